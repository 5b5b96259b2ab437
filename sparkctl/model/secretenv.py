"""Secret environment variables, read where they are: the controller's environment, or (inside a
playbook that sparkctl runs) the in-memory file the runner hands over instead.

ansible-runner records the whole environment of ansible-playbook in the run directory. So the
runner takes every secret variable out of that environment and writes the values to an anonymous
in-memory file (``memfd``) that only exists while sparkctl runs; ``SPARKCTL_SECRETS_FD`` names it
(``/proc/<pid>/fd/<n>``). Nothing secret reaches the disk, even when the run is killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterable, Iterator

SECRETS_FD_ENV = "SPARKCTL_SECRETS_FD"
# Environment variable names that hold secrets by convention (HF_TOKEN, OPENAI_API_KEY, ...).
SECRET_NAME = re.compile(r"(?i)(^|_)(key|token|secret|passw(or)?d|pass|passphrase|credentials?)$")


def get(name: str) -> str | None:
    """The value of secret environment variable ``name`` (None when it is set nowhere)."""
    value = os.environ.get(name)
    if value:
        return value
    path = os.environ.get(SECRETS_FD_ENV)
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        return None
    found = doc.get(name) if isinstance(doc, dict) else None
    return str(found) if found else None


def secret_names(extra: Iterable[str] = ()) -> list[str]:
    """Names in this environment that hold secrets: the conventional ones plus ``extra``."""
    wanted = set(extra)
    return sorted(n for n in os.environ if n in wanted or SECRET_NAME.search(n))


@contextlib.contextmanager
def withheld(extra: Iterable[str] = ()) -> Iterator[dict[str, str]]:
    """While inside: the secret variables are out of ``os.environ`` (so nothing spawned now records
    them) and in a memfd; yields the variables to add to the child's environment (the fd's path)."""
    names = secret_names(extra)
    saved = {n: os.environ.pop(n) for n in names}
    fd = -1
    try:
        child: dict[str, str] = {}
        if saved:
            fd = os.memfd_create("sparkctl-secrets", 0)
            os.write(fd, json.dumps(saved).encode())
            child[SECRETS_FD_ENV] = f"/proc/{os.getpid()}/fd/{fd}"
        yield child
    finally:
        if fd >= 0:
            os.close(fd)
        os.environ.update(saved)
