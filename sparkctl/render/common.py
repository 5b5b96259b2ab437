"""Paths on the nodes, quoting rules and small helpers shared by the renderers (no I/O)."""

from __future__ import annotations

import json
import re
import shlex
import string
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from sparkctl.errors import InputError

if TYPE_CHECKING:
    from sparkctl.profiles import ArgValue

# Files sparkctl owns on a Spark. Roles write exactly these paths; `plan` shows their contents.
ETC_DIR = "/etc/sparkctl"
RANK_ENV_FILE = f"{ETC_DIR}/rank.env"
RANK_SECRETS_FILE = f"{ETC_DIR}/rank-secrets.yaml"
RANK_UNIT_NAME = "sparkctl-rank.service"
RANK_UNIT_FILE = f"/etc/systemd/system/{RANK_UNIT_NAME}"
NETPLAN_FILE = "/etc/netplan/40-sparkctl-fabric.yaml"
QOS_SCRIPT = "/usr/local/sbin/sparkctl-roce-qos"
QOS_UNIT_NAME = "sparkctl-roce-qos.service"
QOS_UNIT_FILE = f"/etc/systemd/system/{QOS_UNIT_NAME}"
QOS_LINK_HOOK = "/etc/networkd-dispatcher/configured.d/50-sparkctl-roce-qos"
FIREWALL_TABLE = "inet sparkctl"  # the one nftables table sparkctl owns on a node
FIREWALL_FILE = f"{ETC_DIR}/firewall.nft"
FIREWALL_DROPIN_DIR = f"{ETC_DIR}/firewall.d"
FIREWALL_UNIT_NAME = "sparkctl-firewall.service"
FIREWALL_UNIT_FILE = f"/etc/systemd/system/{FIREWALL_UNIT_NAME}"

# Inside the rank container (the container runtime mounts the host paths here).
CONTAINER_MODEL_ROOT = "/models"
CONTAINER_ENGRAM_DIR = "/engram"
CONTAINER_CACHE_DIR = "/cache"
CONTAINER_STATE_DIR = "/state"

# The NCCL all-reduce of `sparkctl check fabric`: the script and its environment file on the node
# (a tmpfs, gone at reboot) and the script's path inside the container.
NCCL_CHECK_DIR = "/run/sparkctl"
NCCL_CHECK_SCRIPT = f"{NCCL_CHECK_DIR}/nccl_allreduce.py"
NCCL_CHECK_ENV_FILE = f"{NCCL_CHECK_DIR}/nccl-check.env"
CONTAINER_NCCL_SCRIPT = "/nccl_allreduce.py"

# Programs the rank unit starts.
DOCKER = "/usr/bin/docker"
LAB_RANK_PROGRAM = "sparkctl-sim-rank"

# RoCE QoS numbers (host and switch must agree).
ROCE_DSCP = 26       # RoCE v2 data
CNP_DSCP = 48        # congestion notification packets
ROCE_PRIO = 3        # PFC priority / switch traffic class of RoCE data
CNP_PRIO = 6         # strict-priority class of CNPs
ROCE_TOS = 106       # DSCP 26 << 2 | ECN capable (ECT0): NCCL_IB_TC and RDMA-CM ToS

SECRET_PREFIX = "<secret:"
SECRET_MARK = SECRET_PREFIX + "{}>"

# Secrets that go into the rank's 0600 SGLang config file, by inventory name -> SGLang config key.
RANK_SECRET_KEYS = {"api_key": "api-key"}

_SAFE_SHELL = re.compile(r"^[A-Za-z0-9_@%+=:,./-]+$")
_SAFE_ENV_VALUE = re.compile(r"^[A-Za-z0-9_@%+=:,./^-]*$")


def secret_mark(name: str) -> str:
    """How a secret appears in anything sparkctl renders: a marker, never its value."""
    return SECRET_MARK.format(name)


def header(what: str, comment: str = "#") -> str:
    """First line of every rendered file, so an admin on the node knows where it came from."""
    return f"{comment} Rendered by sparkctl: {what}. Edits are overwritten; change the inventory instead.\n"


def flag_values(flag: str, value: ArgValue) -> list[str]:
    """One profile argument as argv words: store_true flags alone, lists as nargs, mappings as JSON."""
    if value is True or value is None:
        return [flag]
    if isinstance(value, list):
        return [flag, *(_scalar(v) for v in value)]
    if isinstance(value, Mapping):
        return [flag, json.dumps(value, separators=(",", ":"))]
    return [flag, _scalar(value)]


def _scalar(value: bool | int | float | str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def fill(value: str, places: Mapping[str, str]) -> str:
    """Fill ${model_dir}-style placeholders (the profile checked their names when it loaded)."""
    return string.Template(value).substitute(places)


def fill_arg(value: ArgValue, places: Mapping[str, str]) -> ArgValue:
    """A profile argument with its placeholders filled (in a string, or in each string of a list)."""
    if isinstance(value, str):
        return fill(value, places)
    if isinstance(value, list):
        return [fill(v, places) if isinstance(v, str) else v for v in value]
    return value


def env_file_text(env: Mapping[str, str], what: str) -> str:
    """KEY=VALUE lines readable both by systemd's EnvironmentFile= and by `docker run --env-file`.

    The two parsers disagree on quotes, so values are written bare and must not need any.
    """
    lines = [header(what)]
    for key, value in env.items():
        if not _SAFE_ENV_VALUE.match(value):
            raise InputError(
                f"environment variable {key}={value!r} cannot be written to the rank's env file",
                hint="use a value without spaces, quotes, backslashes or $ "
                "(override it in sparkctl_profile_overrides.env)",
            )
        lines.append(f"{key}={value}\n")
    return "".join(lines)


def systemd_word(word: str) -> str:
    """One argv word as systemd's ExecStart= reads it: % and $ escaped, quoted when needed."""
    escaped = word.replace("%", "%%").replace("$", "$$")
    if escaped and re.match(r"^[A-Za-z0-9_@%+=:,./$-]+$", escaped):
        return escaped
    return '"' + escaped.replace("\\", "\\\\").replace('"', '\\"') + '"'


def systemd_command(argv: Sequence[str], indent: str = "    ") -> str:
    """An argv as an ExecStart= value, one option per continuation line for readability."""
    words = [systemd_word(w) for w in argv]
    lines: list[str] = []
    for word in words:
        if word.startswith("--") or not lines:
            lines.append(word)
        else:
            lines[-1] += " " + word
    return (" \\\n" + indent).join(lines)


def shell_command(argv: Sequence[str]) -> str:
    """An argv as one POSIX shell line (for display and for scripts)."""
    return " ".join(w if _SAFE_SHELL.match(w) else shlex.quote(w) for w in argv)
