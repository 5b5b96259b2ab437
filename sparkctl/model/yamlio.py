"""Reading the inventory's YAML files: safe, duplicate keys refused, every failure naming its file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode

from sparkctl.errors import InputError

VAR_SUFFIXES = (".yml", ".yaml", ".json")


_Base: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser when present


class _StrictLoader(_Base):
    """SafeLoader that refuses a key written twice in one mapping (YAML would keep the last)."""

    def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, MappingNode):
            seen: dict[Any, Any] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    hash(key)
                except TypeError:
                    continue
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None,
                        None,
                        f"key {key!r} appears twice in one mapping (first on line {seen[key].line + 1})",
                        key_node.start_mark,
                    )
                seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


def read_yaml(path: Path, display: str) -> Any:
    """Parse one YAML file; InputError naming ``display`` (the path shown to the admin) on failure."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise InputError(f"{display}: file not found", hint="create it (copy inventory/example/)") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(
            f"{display}: cannot be read ({exc})", hint="check the file's permissions and encoding"
        ) from exc
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = exc.problem or str(exc)
        if exc.context and "appears twice" not in what:
            what = f"{exc.context}: {what}"
        raise InputError(
            f"{display}{where}: not valid YAML: {what}", hint="fix the YAML (indentation, quotes, colons)"
        ) from exc
    except yaml.YAMLError as exc:
        raise InputError(f"{display}: not valid YAML: {exc}", hint="fix the YAML") from exc


def read_mapping(path: Path, display: str) -> dict[str, Any]:
    """A YAML file that must hold a mapping (an empty file counts as an empty one)."""
    data = read_yaml(path, display)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InputError(
            f"{display}: expected a mapping of keys to values, found {type(data).__name__}",
            hint="the file must look like `key: value` lines at the top level",
        )
    bad = [k for k in data if not isinstance(k, str)]
    if bad:
        raise InputError(f"{display}: key {bad[0]!r} is not text", hint="quote the key")
    return data


def var_files(base: Path, name: str) -> list[Path]:
    """Ansible's layout for group_vars/host_vars: ``<name>.yml`` or every file in ``<name>/``, sorted."""
    out: list[Path] = []
    for suffix in ("", *VAR_SUFFIXES):
        candidate = base / f"{name}{suffix}"
        if candidate.is_file():
            out.append(candidate)
    folder = base / name
    if folder.is_dir():
        out.extend(sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in VAR_SUFFIXES))
    return out


def var_names(base: Path) -> set[str]:
    """Names (hosts or groups) that have vars under ``base``."""
    names: set[str] = set()
    if not base.is_dir():
        return names
    for entry in base.iterdir():
        if entry.name.startswith("."):
            continue
        if entry.is_dir():
            names.add(entry.name)
        elif entry.suffix in VAR_SUFFIXES:
            names.add(entry.stem)
        elif entry.suffix == "":
            names.add(entry.name)
    return names
