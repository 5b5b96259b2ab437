"""The controller's systemd unit that runs the supervisor (`sparkctl watch --install`, `--print-unit`):
rendered from its inputs (pure), written and enabled only where systemd runs and root writes."""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from sparkctl.ansible import content
from sparkctl.errors import InputError, SparkctlError

if TYPE_CHECKING:
    from sparkctl.model import Cluster

UNIT_DIR = Path("/etc/systemd/system")


def unit_name(cluster_name: str) -> str:
    return f"sparkctl-watch-{cluster_name}.service"


def render_unit(cluster_name: str, inventory: Path, python: str, state_dir: Path, user: str,
                workdir: Path, vault_password_file: str | None = None) -> str:
    """The controller's unit running `sparkctl watch --service` (pure: every input is an argument)."""
    argv = [python, "-m", "sparkctl", "-i", str(inventory), "watch", "--service"]
    env = [f"SPARKCTL_STATE_DIR={state_dir}"]
    if vault_password_file:
        env.append(f"ANSIBLE_VAULT_PASSWORD_FILE={vault_password_file}")
    lines = [
        "# Written by `sparkctl watch --install`; `systemctl disable --now` it to stop supervising.",
        "[Unit]",
        f"Description=sparkctl supervisor of {cluster_name} (heals the group; autostart: "
        "sparkctl_autostart)",
        "Wants=network-online.target",
        "After=network-online.target",
        "",
        "[Service]",
        "Type=exec",
        f"User={user}",
        f"WorkingDirectory={workdir}",
        *(f"Environment={shlex.quote(e)}" for e in env),
        "# Secrets given as {env: VAR} in the inventory: put VAR=... in this 0600 file.",
        f"EnvironmentFile=-/etc/sparkctl/watch-{cluster_name}.env",
        "ExecStart=" + " ".join(shlex.quote(a) for a in argv),
        "# A crash restarts the supervisor (the breaker's count is on disk, so no restart storm);",
        "# bad input (exit 2: inventory, a second supervisor) does not.",
        "Restart=on-failure",
        "RestartSec=30",
        "RestartPreventExitStatus=2",
        "KillSignal=SIGTERM",
        "# SIGTERM lets a restart in progress finish its gates before the supervisor exits.",
        "TimeoutStopSec=1800",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
    ]
    return "\n".join(lines) + "\n"


def systemd_running() -> bool:
    """systemd is PID 1 here (sd_booted's test)."""
    return Path("/run/systemd/system").is_dir()


def unit_for(cluster: Cluster) -> str:
    """The unit for this controller: this Python, this inventory, state directory, user and directory."""
    return render_unit(cluster.name, Path(cluster.inventory_dir).absolute(), sys.executable,
                       content.state_dir().absolute(), _user(), Path.cwd(),
                       os.environ.get("ANSIBLE_VAULT_PASSWORD_FILE"))


def _user() -> str:
    return pwd.getpwuid(os.getuid()).pw_name


def install(cluster: Cluster) -> Path:
    """Write and enable the unit; nothing is written where systemd does not run or cannot be told."""
    if not systemd_running():
        raise InputError(
            "this controller does not run systemd as PID 1 (no /run/systemd/system): there is no "
            "service manager to install `sparkctl watch` into; nothing was written",
            hint="run `sparkctl watch` in the foreground (or under your own supervisor), or install on a "
                 "controller booted with systemd; `sparkctl watch --print-unit` shows the unit",
        )
    if shutil.which("systemctl") is None:
        raise InputError("systemctl is missing; nothing was written")
    if os.geteuid() != 0:
        raise InputError(f"writing {UNIT_DIR} needs root; nothing was written",
                         hint="run `sudo sparkctl watch --install` (the unit keeps your state directory)")
    text = unit_for(cluster)
    path = UNIT_DIR / unit_name(cluster.name)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.chmod(0o644)
    os.replace(tmp, path)
    for argv in (["systemctl", "daemon-reload"], ["systemctl", "enable", "--now", path.name]):
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise SparkctlError(
                f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()[-300:]}",
                hint=f"the unit is at {path}; fix and run `systemctl enable --now {path.name}`",
            )
    return path
