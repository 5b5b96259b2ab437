"""The controller's systemd unit that runs the supervisor (`sparkctl watch --install`, `--print-unit`):
rendered from its inputs (pure), written and enabled only where systemd runs and root writes.

The unit runs as the admin who installs it (``sudo`` names them in ``SUDO_USER``; ``--user`` names
another), with that admin's state directory and home: the service sees the admin's `down` pause and
lifecycle lock (one supervisor per cluster, theirs), and connects with the admin's SSH identity.
Root never runs what another account can write: the interpreter, the sparkctl package and the
inventory must be writable by the unit's user and root only. ``KillMode=mixed`` sends the stop's
SIGTERM to the supervisor alone, so a restart in progress (its ``ansible-playbook`` children)
finishes within ``TimeoutStopSec``, derived from the stop, settle and boot timeouts."""

from __future__ import annotations

import grp
import os
import pwd
import shlex
import shutil
import stat
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import TYPE_CHECKING

from sparkctl.ansible import content
from sparkctl.errors import InputError, SparkctlError
from sparkctl.render import rank

if TYPE_CHECKING:
    from sparkctl.model import Cluster

UNIT_DIR = Path("/etc/systemd/system")
# The playbooks' own time in a restart, beyond the ranks' stop and boot timeouts (preflight, unit
# and file writes, the gates' last probes), and beyond that a margin.
RESTART_OVERHEAD_S = 300


def unit_name(cluster_name: str) -> str:
    return f"sparkctl-watch-{cluster_name}.service"


def render_unit(cluster_name: str, inventory: Path, python: str, state_dir: Path, user: str,
                workdir: Path, vault_password_file: str | None = None, *, group: str | None = None,
                home: Path | None = None, stop_timeout_s: int = 1800) -> str:
    """The controller's unit running `sparkctl watch --service` (pure: every input is an argument)."""
    argv = [python, "-m", "sparkctl", "-i", str(inventory), "watch", "--service"]
    env = [f"SPARKCTL_STATE_DIR={state_dir}"]
    if home is not None:
        env.append(f"HOME={home}")
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
        "# The admin's account: their state directory (the `down` pause, the lifecycle lock) and SSH key.",
        f"User={user}",
        *([f"Group={group}"] if group else []),
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
        "# SIGTERM to the supervisor alone (mixed): a restart in progress finishes its playbooks and",
        "# gates before it exits; what is left of the group is killed only after TimeoutStopSec.",
        "KillMode=mixed",
        "KillSignal=SIGTERM",
        "# The longest restart: the ranks' stop, the settle pause, the boot timeout, the playbooks.",
        f"TimeoutStopSec={int(stop_timeout_s)}",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
    ]
    return "\n".join(lines) + "\n"


def restart_timeout_s(cluster: Cluster) -> int:
    """How long a whole-group restart may run: `down`'s longest rank stop, the settle pause, `up`'s
    boot timeout, and the playbooks' own time."""
    stop = max((rank.stop_timeout_s(cluster, node) for node in cluster.nodes), default=0)
    return int(stop + cluster.supervisor.settle_s + cluster.profile.gates.boot_timeout_s
               + RESTART_OVERHEAD_S)


def systemd_running() -> bool:
    """systemd is PID 1 here (sd_booted's test)."""
    return Path("/run/systemd/system").is_dir()


def unit_for(cluster: Cluster, user: str | None = None) -> str:
    """The unit for this controller: this Python, this inventory, the admin's account, state
    directory and home, this directory. ``user``: the account named by ``--user``."""
    account = unit_account(user)
    home = Path(account.pw_dir)
    check_not_writable_by_others(account, _code_paths(cluster), flat=_environment_dirs())
    return render_unit(cluster.name, Path(cluster.inventory_dir).absolute(), sys.executable,
                       content.state_dir(home).absolute(), account.pw_name, Path.cwd(),
                       os.environ.get("ANSIBLE_VAULT_PASSWORD_FILE"),
                       group=_group_name(account.pw_gid), home=home,
                       stop_timeout_s=restart_timeout_s(cluster))


def unit_account(user: str | None = None) -> pwd.struct_passwd:
    """The account the unit runs as: ``user`` when given; else, under root, the admin ``sudo`` names
    (``SUDO_USER``); else this process's own. Root without an admin to name is refused."""
    if user:
        try:
            return pwd.getpwnam(user)
        except KeyError:
            raise InputError(f"--user {user}: no such account on this controller; "
                             "nothing was written") from None
    if os.geteuid() != 0:
        return pwd.getpwuid(os.getuid())
    admin = os.environ.get("SUDO_USER", "")
    if not admin or admin == "root":
        raise InputError(
            "cannot tell which admin the supervisor unit runs as: this runs as root"
            + (" under sudo from root" if admin else " without sudo (no SUDO_USER)")
            + "; a root unit with root's state directory would not see the admin's `down` pause "
            "or lifecycle lock; nothing was written",
            hint="run `sudo sparkctl watch --install` from the admin's own account, or name the account: "
                 "`sparkctl watch --install --user NAME`",
        )
    try:
        return pwd.getpwnam(admin)
    except KeyError:
        raise InputError(f"SUDO_USER={admin} is not an account on this controller; nothing was written",
                         hint="name the account: `sparkctl watch --install --user NAME`") from None


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def _code_paths(cluster: Cluster) -> list[Path]:
    """What the unit runs: the interpreter (as named and as resolved), the sparkctl package and the
    content root (playbooks, roles, plugins), and the inventory; each checked with what is under it."""
    package = Path(__file__).resolve().parents[1]
    root = content.root()
    ansible = [root / name for name in ("ansible.cfg", "playbooks", "roles", "plugins", "collections")]
    return [Path(sys.executable), Path(sys.executable).resolve(), package,
            *(p for p in ansible if p.exists()), Path(cluster.inventory_dir).absolute()]


def _environment_dirs() -> list[Path]:
    """The interpreter's environment: its prefix, scripts and site-packages directories (one file
    there, a ``.pth`` say, runs at every start), checked themselves, not every package under them."""
    paths = sysconfig.get_paths()
    return [Path(sys.prefix), *(Path(paths[k]) for k in ("scripts", "purelib", "platlib") if k in paths)]


def _trusted_group(gid: int, account: pwd.struct_passwd) -> bool:
    """A group whose write access adds nobody: root's, or the account's own with no other member."""
    if gid == 0:
        return True
    if gid != account.pw_gid:
        return False
    try:
        members = set(grp.getgrgid(gid).gr_mem)
    except KeyError:
        return False
    return members <= {account.pw_name}


def _writers(path: Path, account: pwd.struct_passwd, *, ancestor: bool) -> str | None:
    """Who else than ``account`` and root can change ``path`` (None: nobody)."""
    try:
        st = path.lstat()
    except OSError:
        return None
    if st.st_uid not in (0, account.pw_uid):
        return f"owned by uid {st.st_uid}"
    if stat.S_ISLNK(st.st_mode):
        return None  # a symbolic link's own bits mean nothing; its target is checked as resolved
    if st.st_mode & stat.S_IWOTH and not (ancestor and st.st_mode & stat.S_ISVTX):
        return "writable by every account"
    if st.st_mode & stat.S_IWGRP and not _trusted_group(st.st_gid, account) \
            and not (ancestor and st.st_mode & stat.S_ISVTX):
        return f"writable by group {_group_name(st.st_gid)}"
    return None


def check_not_writable_by_others(account: pwd.struct_passwd, paths: list[Path],
                                flat: list[Path] | None = None) -> None:
    """Refuse a unit whose code another account could change: each path, the directories above it,
    and (for a directory of ``paths``; not of ``flat``) the files under it, writable by ``account``
    and root only."""
    problems: list[str] = []
    seen: set[Path] = set()
    walked = set(paths)
    for path in [*paths, *(flat or [])]:
        candidates = [path, *path.parents]
        if path in walked and path.is_dir() and not path.is_symlink():
            for base, dirs, files in os.walk(path):
                dirs[:] = [d for d in dirs if d not in ("__pycache__", ".git", ".venv", ".venv-sglang")]
                candidates += [Path(base, name) for name in (*dirs, *files)]
        for cand in candidates:
            if cand in seen:
                continue
            seen.add(cand)
            why = _writers(cand, account, ancestor=cand in path.parents)
            if why:
                problems.append(f"{cand} ({why})")
    if problems:
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        raise InputError(
            f"the supervisor unit would run code that another account than {account.pw_name} and root "
            f"can change: {shown}; nothing was written",
            hint=f"make these writable by {account.pw_name} (or root) alone, or install sparkctl where "
                 "only they can write",
        )


def install(cluster: Cluster, user: str | None = None) -> Path:
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
                         hint="run `sudo sparkctl watch --install` (the unit runs as you, with your state "
                              "directory)")
    text = unit_for(cluster, user)
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
