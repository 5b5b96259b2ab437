"""Where the Ansible content and sparkctl's own state live, in a clone and in an installed wheel.

The Ansible content (``playbooks/``, ``roles/``, ``plugins/``, ``collections/requirements.yml``
and ``ansible.cfg``) is kept at the top of the repository, where a manual
``ansible-playbook -i inventory/<site> playbooks/<verb>.yml`` finds it. A built wheel carries a
copy of the same tree as package data, ``sparkctl/_content/`` (``setup.py`` copies it at build
time, symlinks dereferenced), found here through :mod:`importlib.resources`. A clone or an
editable install has no ``_content`` and uses the repository itself.

Everything sparkctl writes for itself (run records, the pinned collections of an installed copy,
download caches) goes to one state directory: ``$SPARKCTL_STATE_DIR``, else the per-user state
directory (``$XDG_STATE_HOME/sparkctl``, by default ``~/.local/state/sparkctl``). A site that
shares one controller sets ``SPARKCTL_STATE_DIR`` (e.g. ``/var/lib/sparkctl``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import resources
from pathlib import Path

import platformdirs

from sparkctl import yamltext
from sparkctl.errors import SparkctlError

STATE_ENV = "SPARKCTL_STATE_DIR"
RUNS_ENV = "SPARKCTL_RUNS_DIR"
_PACKAGED = "_content"
# What a content root holds (the wheel's copy and the repository alike).
_MARKERS = ("ansible.cfg", "playbooks")


def _repository() -> Path:
    """The checkout this module was imported from (…/sparkctl/ansible/content.py → …)."""
    return Path(__file__).resolve().parents[2]


def root() -> Path:
    """The directory holding ``ansible.cfg``, ``playbooks/``, ``roles/``, ``plugins/``, ``collections/``."""
    packaged = resources.files("sparkctl") / _PACKAGED
    candidates = [Path(str(packaged)), _repository()]
    for cand in candidates:
        if all((cand / m).exists() for m in _MARKERS):
            return cand
    raise SparkctlError(
        "the Ansible content (playbooks, roles, ansible.cfg) is missing from this installation: "
        f"looked in {', '.join(str(c) for c in candidates)}; reinstall sparkctl from a wheel or a clone",
        exit_code=2,
    )


def playbook_dir() -> Path:
    return root() / "playbooks"


def ansible_cfg() -> Path:
    return root() / "ansible.cfg"


def state_dir(home: Path | None = None) -> Path:
    """``$SPARKCTL_STATE_DIR``, else the per-user state directory (not created here).

    ``home``: the state directory of the user whose home that is, from this process (root under
    ``sudo`` writing the admin's supervisor unit): ``~`` and the per-user default are under ``home``
    instead of this process's ``$HOME``; ``$SPARKCTL_STATE_DIR`` (the admin's, passed through
    ``sudo``) and an ``$XDG_STATE_HOME`` outside this process's home are kept as they are."""
    override = os.environ.get(STATE_ENV)
    if home is None:
        if override:
            return Path(override).expanduser()
        return Path(platformdirs.user_state_dir("sparkctl", appauthor=False))
    if override:
        given = Path(override)
        if given.parts[:1] == ("~",):
            return home.joinpath(*given.parts[1:])
        return given
    default = Path(platformdirs.user_state_dir("sparkctl", appauthor=False))
    try:
        return home / default.relative_to(Path.home())
    except (ValueError, RuntimeError):
        return default


def runs_dir() -> Path:
    """Where run records go: ``$SPARKCTL_RUNS_DIR``, else ``<state>/runs``."""
    override = os.environ.get(RUNS_ENV)
    return Path(override).expanduser() if override else state_dir() / "runs"


def collections_paths() -> list[Path]:
    """Ansible's collection search path: the content's own ``collections/``, then the state copy."""
    return [root() / "collections", state_dir() / "collections"]


def _pinned(requirements: Path) -> dict[str, str]:
    data = yamltext.safe_load(requirements.read_text()) or {}
    return {str(c["name"]): str(c["version"]) for c in data.get("collections") or []}


def _installed(base: Path, name: str) -> str | None:
    ns, coll = name.split(".", 1)
    manifest = base / "ansible_collections" / ns / coll / "MANIFEST.json"
    try:
        return str(json.loads(manifest.read_text())["collection_info"]["version"])
    except (OSError, ValueError, KeyError):
        return None


def missing_collections() -> dict[str, str]:
    """The pinned collections that no directory of :func:`collections_paths` holds at their version."""
    pinned = _pinned(root() / "collections" / "requirements.yml")
    paths = collections_paths()
    return {n: v for n, v in pinned.items() if not any(_installed(p, n) == v for p in paths)}


def ensure_collections() -> str | None:
    """Install missing pinned collections into ``<state>/collections`` (a clone has them from ``make``).

    Returns ``None`` when everything is in place, else one line saying what is missing and why;
    only the RouterOS switch role needs them, so a failure here is reported, not fatal.
    """
    missing = missing_collections()
    if not missing:
        return None
    state = state_dir()
    cmd = [sys.executable, str(root() / "collections" / "install.py"),
           "--dest", str(state / "collections"), "--cache", str(state / "cache" / "wheels")]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL)
    if proc.returncode == 0 and not missing_collections():
        return None
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
    names = ", ".join(f"{n} {v}" for n, v in missing.items())
    return f"pinned Ansible collections not installed ({names}): {tail[0]}"
