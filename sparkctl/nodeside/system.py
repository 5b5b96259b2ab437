"""What every node-side module reads with: a text file (sysfs, procfs) and a bounded command.

Standard library only, Python 3.8+: it runs on the nodes (the probe, the role modules).
"""

import subprocess


def read_text(path, default=None):
    """The stripped text of ``path``, or ``default`` when it cannot be read (absent, EINVAL, …)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return default


def read_int(path, default=None):
    """``path`` as an integer, or ``default`` when absent or not a number (sysfs's ``-1`` included)."""
    text = read_text(path)
    if text is None or not text.lstrip("-").isdigit():
        return default
    return int(text)


def run(argv, timeout=5.0):
    """(returncode, stdout, stderr) of ``argv``; 127 and the reason when it cannot be started."""
    try:
        proc = subprocess.run(argv, capture_output=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return 127, "", str(exc)
    return proc.returncode, proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace")
