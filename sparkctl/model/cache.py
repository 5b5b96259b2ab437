"""The parsed-inventory cache: what ansible-core read from an inventory, kept under the files' digests.

Reading an inventory with ansible-core (``ansible_read``) costs its import and its read, most of a
second of every ``sparkctl status`` and of every <TAB> that offers node names. What it returns
(``loader.Raw``: every host's and the site's variables as plain data, with their origins) depends
only on the inventory's files, on ansible-core and on sparkctl's own reading code, so it is kept
in the state directory (``<state>/inventory-cache/<sha256 of the directory's path>.json``, 0600)
under a key made of:

* the relative path and SHA-256 of every file directly in the inventory directory and of every
  file under its ``group_vars/`` and ``host_vars/`` (one byte changed, a file added or removed:
  the key changes and the inventory is read again);
* the ansible.cfg files ansible-core may read, every ``ANSIBLE_*`` environment variable but those
  that cannot change what it reads from an inventory (``_NOT_READ``: colour, callbacks, temporary
  and SSH control directories, the fact cache; each playbook sparkctl runs sets some of them to
  paths of its own run), ``$ANSIBLE_HOME`` (``~/.ansible`` when it is not set) by what in it can
  (its ``plugins/`` and ``collections/`` trees, not its path: each run's is new and empty), and the
  vault password file given;
* sparkctl's version and the size and time of its model modules, ansible-core's release file,
  Python's version.

Only what is read is cached: validation, the cross-field checks and the ``Cluster`` are made
afresh on every load, from the cached data as from a fresh read.

Never cached: an inventory with anything kept with ansible-vault (a ``$ANSIBLE_VAULT`` header in
any of its files, a whole encrypted file or a ``!vault`` value), so a decrypted secret is never
written here; an inventory whose values use Jinja lookups, ``query``, ``now()`` or ``random`` (their
value is not the files'); a read with problems; data that JSON does not give back unchanged. Those
are read by ansible-core every time.

Each entry also holds a summary of the loaded cluster (node names and ranks, the switch), so that
completion offers node names without importing the model at all (``summary``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkctl import __version__

STATE_ENV = "SPARKCTL_STATE_DIR"
CACHE_DIR = "inventory-cache"
FORMAT = 1
VAULT_HEADER = b"$ANSIBLE_VAULT"
# Jinja expressions and statements, and in them what computes a value from something other than
# the inventory's files.
JINJA = re.compile(rb"\{[{%].*?[}%]\}", re.DOTALL)
NOT_THE_FILES = re.compile(rb"lookup\s*\(|query\s*\(|\bq\s*\(|now\s*\(|random|shuffle")
_MODEL_DIR = Path(__file__).resolve().parent


def state_dir() -> Path:
    """sparkctl's state directory, as ``sparkctl.ansible.content.state_dir()`` gives it (a unit test
    holds the two together), without importing the Ansible side: ``$SPARKCTL_STATE_DIR``, else
    ``$XDG_STATE_HOME/sparkctl``, else ``~/.local/state/sparkctl`` (platformdirs' rule on Linux)."""
    override = os.environ.get(STATE_ENV)
    if override:
        return Path(override).expanduser()
    if sys.platform.startswith("linux"):
        xdg = os.environ.get("XDG_STATE_HOME", "").strip()
        base = Path(xdg) if xdg else Path.home() / ".local" / "state"
        return base / "sparkctl"
    import platformdirs  # elsewhere: its own rule

    return Path(platformdirs.user_state_dir("sparkctl", appauthor=False))


def cache_file(inv: Path) -> Path:
    digest = hashlib.sha256(str(inv.absolute()).encode()).hexdigest()[:32]
    return state_dir() / CACHE_DIR / f"{digest}.json"


# --- the key -------------------------------------------------------------------------------------


def _inventory_files(inv: Path) -> list[Path]:
    """Every file directly in ``inv``, and every file under its group_vars/ and host_vars/."""
    out = sorted(p for p in inv.iterdir() if p.is_file())
    for sub in ("group_vars", "host_vars"):
        for root, dirs, names in os.walk(inv / sub):
            dirs.sort()
            out += [Path(root) / n for n in sorted(names)]
    return out


def _stat(path: Path) -> list[Any]:
    try:
        st = path.stat()
    except OSError:
        return [str(path), None]
    return [str(path), st.st_mtime_ns, st.st_size]


def _ansible_release() -> list[Any]:
    try:
        spec = importlib.util.find_spec("ansible")  # a top-level package: found, not imported
    except (ImportError, ValueError):
        spec = None
    if spec is None or spec.origin is None:
        return [None]
    return _stat(Path(spec.origin).parent / "release.py")


def _config_files() -> list[Path]:
    """The ansible.cfg files ansible-core looks for, in its order."""
    found = [os.environ.get("ANSIBLE_CONFIG", ""), "ansible.cfg", "~/.ansible.cfg",
             "/etc/ansible/ansible.cfg"]
    return [Path(p).expanduser() for p in found if p]


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


@dataclass
class Ticket:
    """One load's view of the cache: the key of the files as they are, and what was kept under it."""

    inv: Path
    key: str | None  # None: this inventory is never cached (the reason in ``why``)
    why: str = ""
    raw: dict[str, Any] | None = None  # what was kept: the read, as plain data
    summary_doc: dict[str, Any] | None = None
    vault_password_file: str | None = None

    @property
    def hit(self) -> bool:
        return self.raw is not None

    def keep(self, raw: dict[str, Any], summary: dict[str, Any]) -> bool:
        """Keep what was read, when the files are still what the key says; True when kept."""
        if self.key is None or self.hit:
            return False
        again = key_of(self.inv, self.vault_password_file)
        if again[0] != self.key:  # a file changed while it was read
            return False
        doc = plain({"format": FORMAT, "key": self.key, "raw": raw, "summary": summary})
        if doc is None:
            return False
        try:
            path = cache_file(self.inv)
        except (OSError, RuntimeError, KeyError):  # no home directory to keep it in
            return False
        _write(path, doc)
        return True


# ANSIBLE_* variables that cannot change what ansible-core reads from an inventory (sparkctl's runs
# and ansible-runner set them, several to a path of the run: keyed, no run would find the cache).
_NOT_READ = frozenset({
    "ANSIBLE_FORCE_COLOR", "ANSIBLE_NOCOLOR", "ANSIBLE_STDOUT_CALLBACK", "ANSIBLE_CALLBACK_PLUGINS",
    "ANSIBLE_LOCAL_TEMP", "ANSIBLE_SSH_CONTROL_PATH_DIR", "ANSIBLE_HOST_KEY_CHECKING",
    "ANSIBLE_RETRY_FILES_ENABLED", "ANSIBLE_CACHE_PLUGIN", "ANSIBLE_CACHE_PLUGIN_CONNECTION",
})
# Where under $ANSIBLE_HOME ansible-core looks for plugins and collections by default.
_HOME_READ = ("plugins", "collections")


def _home_listing(home: Path) -> list[Any]:
    """What in an Ansible home can change a read: the entries of its plugins and collections."""
    found = sorted(p for sub in _HOME_READ for p in (home / sub).rglob("*"))
    return [[str(p.relative_to(home)), *_stat(p)[1:]] for p in found]


def _ansible_env() -> list[Any]:
    out: list[Any] = [[name, value] for name, value in sorted(os.environ.items())
                      if name.startswith("ANSIBLE_") and name not in _NOT_READ and name != "ANSIBLE_HOME"]
    try:  # the home ansible-core reads, ~/.ansible unless $ANSIBLE_HOME names another
        home = Path(os.environ.get("ANSIBLE_HOME", "~/.ansible")).expanduser()
    except RuntimeError:  # no home directory: none to look in
        out.append(["ANSIBLE_HOME", None])
    else:
        out.append(["ANSIBLE_HOME", _home_listing(home)])
    return out


def key_of(inv: Path, vault_password_file: Path | str | None = None) -> tuple[str | None, str]:
    """The cache key of ``inv`` as its files are now, or (None, why it is never cached)."""
    files: list[Any] = []
    for path in _inventory_files(inv):
        try:
            data = path.read_bytes()
        except OSError as exc:
            return None, f"{path}: {exc.strerror}"
        if VAULT_HEADER in data:
            return None, f"{path.relative_to(inv)} holds ansible-vault data"
        if any(NOT_THE_FILES.search(m.group()) for m in JINJA.finditer(data)):
            return None, f"{path.relative_to(inv)} uses a lookup, query, now() or random"
        files.append([str(path.relative_to(inv)), hashlib.sha256(data).hexdigest()])
    parts = [
        FORMAT, __version__, sys.version, str(inv), str(inv.absolute()), files,
        [[str(p), _digest(p)] for p in _config_files()],
        _ansible_env(),
        str(vault_password_file) if vault_password_file is not None else None,
        [_stat(p) for p in sorted(_MODEL_DIR.glob("*.py"))], _ansible_release(),
    ]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest(), ""


def plain(doc: dict[str, Any]) -> dict[str, Any] | None:
    """A copy of ``doc`` that JSON gives back unchanged, or None (a boolean mapping key, a tuple, a
    date: such a read is not kept)."""
    try:
        copy = json.loads(json.dumps(doc))
    except (TypeError, ValueError):
        return None
    return copy if copy == doc else None


def _read(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and doc.get("format") == FORMAT else None


def _write(path: Path, doc: dict[str, Any]) -> None:
    """Atomically, 0600 in a 0700 directory; never an error (the next load reads the files again)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(doc, fh)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)


def lookup(inv: Path, vault_password_file: Path | str | None = None) -> Ticket:
    """What the cache holds for ``inv`` as its files are now (``hit`` when it holds the read)."""
    try:
        key, why = key_of(inv, vault_password_file)
    except OSError as exc:
        return Ticket(inv, None, why=str(exc))
    vpf = str(vault_password_file) if vault_password_file is not None else None
    for given in (vault_password_file, os.environ.get("ANSIBLE_VAULT_PASSWORD_FILE")):
        if given and not Path(given).expanduser().exists():  # ansible-core's read says so, in words
            return Ticket(inv, None, why=f"vault password file {given} does not exist")
    if key is None:
        return Ticket(inv, None, why=why, vault_password_file=vpf)
    try:
        doc = _read(cache_file(inv))
    except (RuntimeError, KeyError):  # no home directory: nothing kept
        doc = None
    if doc is None or doc.get("key") != key or not isinstance(doc.get("raw"), dict):
        return Ticket(inv, key, vault_password_file=vpf)
    return Ticket(inv, key, raw=doc["raw"], summary_doc=doc.get("summary"), vault_password_file=vpf)


def summary(inv: Path) -> dict[str, Any] | None:
    """The kept summary of ``inv`` (``nodes``: [[name, rank], ...], ``switch``: [name, type] or
    None) when its files are unchanged since it loaded cleanly; None otherwise. Never raises."""
    try:
        ticket = lookup(inv)
    except Exception:  # completion asks: it says nothing rather than fail
        return None
    return ticket.summary_doc if ticket.hit else None
