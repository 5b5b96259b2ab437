"""Values a role's ``defaults/main.yml`` owns that sparkctl's own code needs too (the kit's layout,
the rank start's tries): read from the role's file, so each is written in one place."""

from __future__ import annotations

import functools
from typing import Any

import yaml

from sparkctl import yamltext
from sparkctl.ansible import content
from sparkctl.errors import SparkctlError


@functools.cache
def _defaults(role: str) -> dict[str, Any]:
    path = content.root() / "roles" / role / "defaults" / "main.yml"
    try:
        doc = yamltext.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise SparkctlError(f"cannot read {path}: {exc}") from exc
    return doc if isinstance(doc, dict) else {}


def role_default(role: str, name: str) -> Any:
    """The literal default of ``name`` in ``roles/<role>/defaults/main.yml``."""
    values = _defaults(role)
    if name not in values:
        raise SparkctlError(f"roles/{role}/defaults/main.yml defines no {name}")
    return values[name]


STATE_DIR_VAR = "{{ sparkctl_state_dir }}"


def controller_path(role: str, name: str) -> str:
    """A role default that names a controller-side path under ``sparkctl_state_dir`` (the vars
    plugin's value, ``content.state_dir()``), resolved here the way Ansible resolves it."""
    value = role_default(role, name)
    if not isinstance(value, str) or not value.startswith(STATE_DIR_VAR):
        raise SparkctlError(f"roles/{role}/defaults/main.yml: {name} is not a path under {STATE_DIR_VAR}")
    return str(content.state_dir()) + value[len(STATE_DIR_VAR):]
