"""The SSH port (and the ssh_config files) of a host, resolved once, the way Ansible's ``ssh`` does.

Ansible builds ssh's command line as: ``ansible_ssh_args`` (else ansible.cfg's ``ssh_args``), then
``-o Port=`` from ``ansible_port`` / ``ansible_ssh_port`` (the latter wins when both are set, in
ansible-core and in Mitogen alike), then ``ansible_ssh_common_args``, then ``ansible_ssh_extra_args``.
ssh keeps the first value it is given for an option, and only then reads its ssh_config files.
So the port is, first found:

1. ``-p`` / ``-o Port`` in ``ansible_ssh_args``;
2. ``ansible_ssh_port``, else ``ansible_port``;
3. ``-p`` / ``-o Port`` in ``ansible_ssh_common_args``, then in ``ansible_ssh_extra_args``;
4. ``Port`` from the ssh_config files: the ``-F`` file when one is given, else the inventory's
   own ``ssh_config`` (sparkctl reads it; the vars plugin hands the result to Ansible as
   ``ansible_port``, so Ansible connects on it too), ``~/.ssh/config`` and ``/etc/ssh/ssh_config``;
   looked up under the host's address, then under its inventory name;
5. 22.

The loader stores step 4's answer on the node (``Node.ssh_config_port``); ``Node.ssh_port`` is the
one value the firewall opens, the SSH fan-out (``ssh/targets.py``) dials and the roles read
(``sparkctl_rendered.ssh_port``).
"""

from __future__ import annotations

import functools
import shlex
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # paramiko is imported only where an ssh_config file names a port
    import paramiko

USER_SSH_CONFIG = Path("~/.ssh/config")
SYSTEM_SSH_CONFIG = Path("/etc/ssh/ssh_config")
DEFAULT_SSH_CONFIGS = (USER_SSH_CONFIG, SYSTEM_SSH_CONFIG)
INVENTORY_SSH_CONFIG = "ssh_config"
# In the order Ansible puts them on ssh's command line.
ANSIBLE_SSH_ARGS = ("ansible_ssh_common_args", "ansible_ssh_extra_args")
DEFAULT_PORT = 22
# The TCP connect: a node's kernel answers a SYN whatever its load, so a node that does not within
# 3 s is not there (powered off, cable cut), and `status` says so without waiting longer.
CONNECT_TIMEOUT_S = 3.0

_FLAG_OPTION = {"-J": "proxyjump", "-i": "identityfile", "-p": "port", "-l": "user", "-F": "-F"}


def ssh_options_from_args(args: str | None) -> dict[str, list[str]]:
    """The options in an ``ansible_ssh_common_args``-style string: {lowercase key: [values]}.

    ``-o Key=Value``, ``-oKey=Value``, ``-o "Key Value"`` and the flags ``-J -i -p -l -F``; anything
    else is ignored. ``-F`` is returned under the key ``-F``.
    """
    out: dict[str, list[str]] = {}
    if not args:
        return out
    try:
        words = shlex.split(args)
    except ValueError:
        words = args.split()
    i = 0
    while i < len(words):
        word, value, key = words[i], None, None
        flag = word[:2]
        if flag == "-o" or flag in _FLAG_OPTION:
            if len(word) > 2:
                value = word[2:]
            elif i + 1 < len(words):
                i += 1
                value = words[i]
        if value is not None and flag == "-o":
            parts = value.split("=", 1) if "=" in value else value.split(None, 1)
            if len(parts) == 2:
                key, value = parts[0].strip().lower(), parts[1].strip()
        elif value is not None:
            key = _FLAG_OPTION[flag]
        if key and value is not None:
            out.setdefault(key, []).append(value)
        i += 1
    return out


def _port(value: Any) -> int | None:
    text = str(value).strip() if value is not None else ""
    return int(text) if text.isdigit() and 0 < int(text) < 65536 else None


def _args_port(hostvars: Mapping[str, Any], key: str) -> int | None:
    values = ssh_options_from_args(str(hostvars.get(key) or "")).get("port") or []
    return _port(values[0]) if values else None


def port_from_vars(hostvars: Mapping[str, Any]) -> int | None:
    """The port Ansible puts on ssh's command line for a host (steps 1-3), or None (ssh_config's)."""
    for port in (
        _args_port(hostvars, "ansible_ssh_args"),
        _port(hostvars.get("ansible_ssh_port")),
        _port(hostvars.get("ansible_port")),
        *(_args_port(hostvars, key) for key in ANSIBLE_SSH_ARGS),
    ):
        if port is not None:
            return port
    return None


def controller_path(path: Path | str, inventory_dir: Path) -> Path:
    """A file on the controller the inventory names (known_hosts, a key file, an ssh_config, a
    secret file): ``~`` expanded, a relative path read from the inventory directory — never from
    wherever sparkctl was started (the one rule; ``ssh.targets``, ``validate`` and the vars plugin,
    which hands Ansible the absolute paths, all use it)."""
    path = Path(path).expanduser()
    return path if path.is_absolute() else Path(inventory_dir).absolute() / path


abs_path = controller_path

# The ssh options whose value is a file on the controller.
_PATH_OPTIONS = ("userknownhostsfile", "identityfile", "globalknownhostsfile")
_PATH_FLAGS = ("-i", "-F")


def _absolute_words(value: str, inventory_dir: Path) -> str:
    # several files, space-separated (UserKnownHostsFile a b); ssh's none and %-tokens stay as written
    return " ".join(w if w.lower() == "none" or "%" in w or w.startswith("/")
                    else str(controller_path(w, inventory_dir)) for w in value.split())


def absolute_ssh_args(args: str, inventory_dir: Path) -> str | None:
    """``args`` (an ``ansible_ssh_common_args``-style string) with every relative file path of its
    ``-o UserKnownHostsFile/IdentityFile``, ``-i`` and ``-F`` made absolute by ``controller_path``,
    so ssh reads the same file whatever its working directory; None when nothing is relative (or
    the string is a template, or cannot be split)."""
    if "{{" in args:
        return None
    try:
        words = shlex.split(args)
    except ValueError:
        return None
    out: list[str] = []
    changed = False
    i = 0
    while i < len(words):
        word = words[i]
        flag = word[:2]
        if flag == "-o" or flag in _PATH_FLAGS:
            inline = len(word) > 2
            value = word[2:] if inline else (words[i + 1] if i + 1 < len(words) else None)
            if value is None:
                out.append(word)
                break
            new = value
            if flag == "-o":
                key, sep, rest = value.partition("=") if "=" in value else value.partition(" ")
                if key.strip().lower() in _PATH_OPTIONS and rest.strip():
                    new = f"{key}{sep}{_absolute_words(rest.strip(), inventory_dir)}"
            else:
                new = _absolute_words(value, inventory_dir)
            changed |= new != value
            out += [flag + new] if inline else [flag, new]
            i += 1 if inline else 2
            continue
        out.append(word)
        i += 1
    return shlex.join(out) if changed else None


def config_files(hostvars: Mapping[str, Any], inventory_dir: Path) -> tuple[Path, ...]:
    """The ssh_config files for a host: the ``-F`` file of its ssh arguments alone, else the
    inventory's ``ssh_config`` (when there is one), ``~/.ssh/config`` and ``/etc/ssh/ssh_config``."""
    args = " ".join(str(hostvars[k]) for k in ("ansible_ssh_args", *ANSIBLE_SSH_ARGS) if hostvars.get(k))
    named = ssh_options_from_args(args).get("-F")
    if named:
        return (abs_path(Path(named[0]), inventory_dir),)
    own = inventory_dir / INVENTORY_SSH_CONFIG
    return ((own,) if own.is_file() else ()) + DEFAULT_SSH_CONFIGS


def read_ssh_config(paths: Sequence[Path]) -> paramiko.SSHConfig:
    """One SSHConfig from ``paths`` in order (the first value found for a host wins); missing files
    are skipped, as ssh skips them."""
    import paramiko

    config = paramiko.SSHConfig()
    for path in paths:
        path = path.expanduser()
        if path.is_file():
            with path.open() as fh:
                config.parse(fh)
    return config


@functools.lru_cache(maxsize=64)
def _read(path: Path, _mtime_ns: int, _size: int) -> str:
    return path.read_text(errors="replace").lower()


def _texts(paths: Sequence[Path]) -> Iterator[str]:
    """The ssh_config files' text, lower-cased; each read once while it is unchanged (a plan asks
    for a host's port and its proxies, and both look into the same files)."""
    for path in paths:
        path = path.expanduser()
        try:
            st = path.stat()
            yield _read(path, st.st_mtime_ns, st.st_size)
        except OSError:
            continue


def _names_a_port(paths: Sequence[Path]) -> bool:
    return any(line.strip().startswith(("port", "match"))
               for text in _texts(paths) for line in text.splitlines())


def config_port(files: Sequence[Path], address: str, name: str) -> int | None:
    """The ``Port`` the ssh_config ``files`` give a host (under its address, then its name)."""
    if not _names_a_port(files):  # the common case: nothing to parse (and no paramiko import)
        return None
    config = read_ssh_config(files)
    for host in (address, name):
        port = _port(config.lookup(host).get("port"))
        if port is not None:
            return port
    return None


def _mentions(paths: Sequence[Path], word: str) -> bool:
    return any(word in text for text in _texts(paths))


def proxies(hostvars: Mapping[str, Any], inventory_dir: Path, address: str, name: str,
            config: paramiko.SSHConfig | None = None) -> tuple[str | None, str | None]:
    """A host's ProxyJump and ProxyCommand (each None where ssh dials it directly, or ``none``):
    the first found in its ssh arguments (``-J``, ``-o``), then the ssh_config files under its
    address, then its name. ``config``: those files already read (``read_ssh_config``)."""
    args = " ".join(str(hostvars[k]) for k in ANSIBLE_SSH_ARGS if hostvars.get(k))
    layers: list[Mapping[str, Any]] = [ssh_options_from_args(args)]
    files = config_files(hostvars, inventory_dir)
    if config is not None or _mentions(files, "proxy"):  # the common case: nothing to parse
        config = config if config is not None else read_ssh_config(files)
        layers += [config.lookup(address), config.lookup(name)]
    found: list[str | None] = []
    for key in ("proxyjump", "proxycommand"):
        value = next((v for layer in layers if (v := layer.get(key)) not in (None, "", [])), None)
        value = value[0] if isinstance(value, list) else value
        found.append(None if value is None or str(value).lower() == "none" else str(value))
    return found[0], found[1]


def resolve_port(hostvars: Mapping[str, Any], inventory_dir: Path, address: str, name: str) -> int:
    """The port Ansible (and sparkctl's own SSH) connects to a host on: steps 1-5 above."""
    port = port_from_vars(hostvars)
    if port is None:
        port = config_port(config_files(hostvars, inventory_dir), address, name)
    return DEFAULT_PORT if port is None else port
