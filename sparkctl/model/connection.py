"""The Ansible connection variables (``ansible_*``) an inventory may set, typed; none may weaken host
key checking, at any level (group_vars, a group, a host).

sparkctl verifies every host key against the inventory's pinned ``known_hosts``, for its own SSH
fan-out and for every playbook. A variable that turns that off for Ansible (``host_key_checking``,
``StrictHostKeyChecking=no``/``accept-new``, ``UserKnownHostsFile=/dev/null``, paramiko's auto-add)
would make the two disagree and open the door to a machine in the middle: it is refused at
``validate``, with the field named.
"""

from __future__ import annotations

import re
import shlex
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, StrictBool, StrictStr

from sparkctl.model.problems import Problems, suggest

_BOOL_WORDS = {"true": True, "yes": True, "on": True, "1": True,
               "false": False, "no": False, "off": False, "0": False}


def _bool_word(value: Any) -> Any:
    # INI inventories hand every value over as text; Ansible reads these words as booleans.
    return _BOOL_WORDS.get(value.strip().lower(), value) if isinstance(value, str) else value


def _int_word(value: Any) -> Any:
    return int(value) if isinstance(value, str) and value.strip().isdigit() else value


Bool = Annotated[StrictBool, BeforeValidator(_bool_word)]
Port = Annotated[int, Field(strict=True, ge=1, le=65535), BeforeValidator(_int_word)]
Seconds = Annotated[int, Field(strict=True, ge=1, le=86400), BeforeValidator(_int_word)]

# name -> type; `ansible_host` is checked with the node's own keys.
CONNECTION_VARS: dict[str, Any] = {
    "ansible_port": Port,
    "ansible_ssh_port": Port,
    "ansible_user": StrictStr,
    "ansible_ssh_user": StrictStr,
    "ansible_connection": Literal["ssh", "paramiko", "network_cli", "ansible.netcommon.network_cli"],
    "ansible_network_os": StrictStr,
    "ansible_network_cli_ssh_type": Literal["paramiko", "libssh"],
    "ansible_python_interpreter": StrictStr,
    "ansible_ssh_private_key_file": StrictStr,
    "ansible_private_key_file": StrictStr,
    "ansible_ssh_common_args": StrictStr,
    "ansible_ssh_extra_args": StrictStr,
    "ansible_ssh_args": StrictStr,
    "ansible_ssh_pipelining": Bool,
    "ansible_pipelining": Bool,
    "ansible_timeout": Seconds,
    "ansible_ssh_timeout": Seconds,
    "ansible_command_timeout": Seconds,
    "ansible_connect_timeout": Seconds,
    "ansible_become": Bool,
    "ansible_become_method": Literal["sudo", "su", "doas", "pbrun", "pfexec", "dzdo", "ksu", "runas"],
    "ansible_become_user": StrictStr,
    "ansible_become_password": StrictStr,
    "ansible_become_pass": StrictStr,
    "ansible_become_flags": StrictStr,
    "ansible_password": StrictStr,
    "ansible_ssh_pass": StrictStr,
    "ansible_shell_type": StrictStr,
    "ansible_ssh_executable": StrictStr,
}

# Variables that only exist to turn host key checking down: refused whatever their value says,
# unless it keeps checking on (a boolean true / a false auto-add).
_KEEP_ON: dict[str, bool] = {
    "ansible_host_key_checking": True,
    "ansible_ssh_host_key_checking": True,
    "ansible_paramiko_host_key_checking": True,
    "ansible_libssh_host_key_checking": True,
    "ansible_paramiko_host_key_auto_add": False,
    "ansible_libssh_host_key_auto_add": False,
    "ansible_paramiko_record_host_keys": False,
}
_ARG_VARS = ("ansible_ssh_common_args", "ansible_ssh_extra_args", "ansible_ssh_args")
_WEAK_OPTIONS = {
    "stricthostkeychecking": ("no", "off", "accept-new", "false"),
    # The pinned file replaced by nothing: with it, sparkctl's known_hosts is no longer consulted.
    # (GlobalKnownHostsFile=/dev/null is fine: it narrows trust to the pinned file.)
    "userknownhostsfile": ("/dev/null", "none"),
}
_TRUE = ("true", "yes", "1", "on")


def _weak_args(text: str) -> str | None:
    """The option in an SSH argument string that weakens host key checking, or None."""
    try:
        words = shlex.split(text)
    except ValueError:
        return "unbalanced quotes"
    options: list[str] = []
    for i, word in enumerate(words):
        if word == "-o" and i + 1 < len(words):
            options.append(words[i + 1])
        elif word.startswith("-o") and len(word) > 2:
            options.append(word[2:])
    for opt in options:
        parts = re.split(r"\s*=\s*|\s+", opt.strip(), maxsplit=1)
        key = parts[0].lower()
        value = (parts[1] if len(parts) > 1 else "").strip().strip("\"'").lower()
        if value in _WEAK_OPTIONS.get(key, ()):
            return opt
    return None


def check(key: str, value: Any, path: str, problems: Problems, check_value: Any) -> None:
    """Check one ``ansible_*`` variable; problems are recorded under ``path``."""
    if key in _KEEP_ON:
        on = str(value).strip().lower() in _TRUE if not isinstance(value, bool) else value
        if on != _KEEP_ON[key]:
            problems.add(path, "weakens host key checking",
                         "remove it: sparkctl always verifies host keys against the inventory's known_hosts")
        return
    if key not in CONNECTION_VARS:
        problems.add(
            path,
            f"not a connection variable sparkctl supports{suggest(key, CONNECTION_VARS)}",
            f"remove it or use one of: {', '.join(sorted(CONNECTION_VARS))}",
        )
        return
    ok, checked = check_value(value, CONNECTION_VARS[key], path, problems)
    if ok and key in _ARG_VARS:
        weak = _weak_args(checked)
        if weak:
            problems.add(path, f"weakens host key checking ({weak})",
                         "remove that option: keep StrictHostKeyChecking=yes with the pinned known_hosts")
