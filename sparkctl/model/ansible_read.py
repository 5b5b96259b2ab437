"""Reading an inventory directory the way ansible-playbook reads it, with ansible-core itself.

ansible-core's ``DataLoader`` (with the vault secrets, see ``vault``), ``InventoryManager`` and
``VariableManager`` read the inventory, so YAML and INI inventory files, child groups, Ansible's
variable precedence, ``!vault`` values, vault-encrypted vars files and ``{{ templated }}`` values
mean here exactly what they mean to a playbook. What comes back is plain Python data (no Ansible
types), each value's ``file:line`` and the problems found on the way, each naming its file.

The inventory sources are the directory's ``hosts`` files (``hosts.yml``, ``hosts.yaml``,
``hosts.ini``, ``hosts``), with ``group_vars/`` and ``host_vars/`` beside them: other files in the
directory (``known_hosts``, an ``ssh_config``, a key file) are never read as inventory.

Origins (file and line of a value) and the capture of Ansible's warnings use ansible-core 2.19's
data tags and deferred-warning context; they are diagnostics only, and degrade to no origin and
printed warnings where a release moves them.

Size: one module on purpose — ansible-core's loader, inventory and variable managers are set up,
used and their results turned into plain data in one pass; the vault half lives in ``vault``.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleError
from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.parsing.vault import (
    EncryptedString,
)
from ansible.template import Templar
from ansible.utils.display import Display
from ansible.utils.vars import combine_vars
from ansible.vars.manager import VariableManager
from ansible.vars.plugins import get_vars_from_inventory_sources

from sparkctl.errors import InputError
from sparkctl.model import vault, yamlbound
from sparkctl.model.problems import Problems

try:  # diagnostics only (see the module docstring)
    from ansible._internal._datatag._tags import Origin
except ImportError:  # pragma: no cover - other ansible-core releases
    Origin = None
try:
    from ansible._internal._display_utils import DeferredWarningContext, format_message
except ImportError:  # pragma: no cover
    DeferredWarningContext = format_message = None

_DUPLICATE = re.compile(r"Found duplicate mapping key (.+?)\.?$")
_PARSE_FAILED = re.compile(r"(?i)failed to parse|unable to parse|duplicate")
SOURCE_NAMES = ("hosts.yml", "hosts.yaml", "hosts.ini", "hosts")
YAML_SUFFIXES = (".yml", ".yaml", ".json")
GROUP_BODY = ("hosts", "vars", "children")
# Variables Ansible itself adds to every host; never inventory keys.
MAGIC = frozenset(
    ("groups", "group_names", "inventory_dir", "inventory_file", "inventory_hostname", "omit",
     "inventory_hostname_short", "playbook_dir", "role_names", "environment", "ansible_facts",
     "ansible_local", "ansible_playbook_python", "ansible_config_file", "ansible_version",
     "ansible_check_mode", "ansible_diff_mode", "ansible_forks", "ansible_inventory_sources",
     "ansible_run_tags", "ansible_skip_tags", "ansible_verbosity")
)  # fmt: skip

_loading = 0  # > 0 while this module is inside Ansible's variable manager (see loading())


def loading() -> bool:
    """True while sparkctl reads an inventory through Ansible.

    The sparkctl vars plugin hands out values rendered *from* the inventory; asked while the
    inventory itself is being read, it must answer nothing (and must not read it again).
    """
    return _loading > 0


@dataclass
class HostRead:
    """One host: its groups, the variables set at its level (native), and its source file."""

    name: str
    groups: set[str]
    vars: dict[str, Any]
    source: str


@dataclass
class Read:
    """An inventory as Ansible resolves it, in plain data."""

    site: dict[str, Any] = field(default_factory=dict)  # the `all` group's variables
    hosts: dict[str, HostRead] = field(default_factory=dict)
    group_names: dict[str, set[str]] = field(default_factory=dict)  # group -> its ancestors
    origins: dict[str, str] = field(default_factory=dict)  # field path -> "file:line"
    vaulted: set[str] = field(default_factory=set)  # site keys whose value was vault-protected
    sources: list[str] = field(default_factory=list)  # inventory files, as shown
    vault_files: list[str] = field(default_factory=list)  # the password files used


# -- origins --------------------------------------------------------------------------------------


def _origin(value: Any, inv: Path) -> str | None:
    if Origin is None:
        return None
    tag = value if isinstance(value, Origin) else Origin.get_tag(value)
    if tag is None or not tag.path:
        return None
    path = Path(tag.path)
    with contextlib.suppress(ValueError):
        path = path.relative_to(inv.resolve())
    return f"{path}:{tag.line_num}" if tag.line_num else str(path)


def _index_origins(value: Any, path: str, inv: Path, out: dict[str, str], key: Any = None) -> None:
    where = _origin(value, inv) or (_origin(key, inv) if key is not None else None)
    if where:
        out.setdefault(path, where)
    if isinstance(value, EncryptedString):
        return
    if isinstance(value, dict):
        for k, v in value.items():
            _index_origins(v, f"{path}.{k}", inv, out, k)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _index_origins(v, f"{path}[{i}]", inv, out)


# -- plain data -----------------------------------------------------------------------------------


def native(value: Any) -> Any:
    """Ansible's tagged/lazy values as plain Python (vaulted strings decrypted)."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, dict):
        return {native(k): native(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [native(v) for v in value]
    if isinstance(value, EncryptedString):
        return str(value._native_copy())
    for kind in (str, int, float):
        if isinstance(value, kind):
            return kind(value)
    return value


# -- reading --------------------------------------------------------------------------------------


def _display(path: Path, inv: Path) -> str:
    with contextlib.suppress(ValueError):
        return str(path.relative_to(inv))
    return str(path)


def _mark(exc: AnsibleError, inv: Path) -> str:
    where = _origin(exc.obj, inv) if exc.obj is not None else None
    return f" ({where})" if where else ""


def _error_text(exc: BaseException) -> str:
    text = getattr(exc, "message", None) or str(exc)
    cause = exc.__cause__
    if cause is not None and str(cause) and str(cause) not in text:
        text += f": {getattr(cause, 'message', None) or cause}"
    return " ".join(str(text).split())


def _read_file(loader: DataLoader, path: Path, inv: Path, problems: Problems, **kw: Any) -> Any:
    """One YAML file through Ansible's loader; None (and a problem naming the file) on failure."""
    shown = _display(path, inv)
    try:
        return loader.load_from_file(str(path), **kw)
    except AnsibleError as exc:
        text = (getattr(exc, "message", None) or str(exc)).removeprefix("YAML parsing failed: ")
        text = _DUPLICATE.sub(r"key \1 appears twice in one mapping", " ".join(text.split()))
        where = _origin(exc.obj, inv) if exc.obj is not None else None
        line = f" line {where.split(':')[1]}" if where and where.count(":") >= 1 else ""
        if "decrypt" in text.lower() or "vault" in text.lower():
            problems.add(
                shown,
                f"cannot be decrypted: {text}",
                "give the vault password with --vault-password-file FILE or ANSIBLE_VAULT_PASSWORD_FILE",
            )
        else:
            problems.add(
                f"{shown}{line}", f"not valid YAML: {text}", "fix the YAML (indentation, quotes, colons)"
            )
        return None


def _suggest(word: str, known: list[str]) -> str:
    close = difflib.get_close_matches(word, known, n=1, cutoff=0.75)
    return f" (did you mean {close[0]}?)" if close else ""


def _lint_groups(doc: dict[str, Any], shown: str, problems: Problems) -> None:
    """What Ansible's YAML inventory plugin would skip with a warning: sparkctl refuses it."""

    def group(name: str, body: Any, path: str) -> None:
        if body is None:
            return
        if not isinstance(body, dict):
            problems.add(
                f"{shown}: {path}",
                f"expected a mapping, got {type(body).__name__}",
                "a group holds hosts:, vars: and children:",
            )
            return
        for key, value in body.items():
            if key not in GROUP_BODY:
                problems.add(
                    f"{shown}: {path}.{key}",
                    f"unknown key{_suggest(str(key), list(GROUP_BODY))}",
                    "a group holds hosts:, vars: and children:",
                )
            elif value is not None and not isinstance(value, dict):
                problems.add(
                    f"{shown}: {path}.{key}",
                    f"expected a mapping, got {type(value).__name__}",
                    "write `name:` lines under it (a mapping, not a list)",
                )
            elif key == "children" and value:
                for child, child_body in value.items():
                    group(str(child), child_body, f"{path}.children.{child}")

    for name, body in doc.items():
        group(str(name), body, str(name))


def _check_sources(loader: DataLoader, sources: list[Path], inv: Path, problems: Problems) -> None:
    for path in sources:
        if path.suffix not in YAML_SUFFIXES:
            continue  # INI: Ansible's own parser reports file and line
        before = len(problems)
        doc = _read_file(loader, path, inv, problems, cache="none", trusted_as_template=True)
        shown = _display(path, inv)
        if doc is None and len(problems) == before:
            problems.add(shown, "empty", "list the hosts under all.children.sparks.hosts")
        elif doc is not None and not isinstance(doc, dict):
            problems.add(
                shown,
                f"expected a mapping of groups, found {type(doc).__name__}",
                "start the file with `all:` (as hosts.yml of the example site does: "
                "`sparkctl init --example DIR`)",
            )
        elif isinstance(doc, dict):
            _lint_groups(doc, shown, problems)


def _check_vars_files(
    loader: DataLoader, im: InventoryManager, inv: Path, problems: Problems, hosts_file: str
) -> None:
    """Read every group_vars/host_vars file Ansible will read, so a bad one is named."""
    for sub, names, what in (
        ("group_vars", sorted(im.groups), "a group"),
        ("host_vars", sorted(im.hosts), "a host"),
    ):
        base = inv / sub
        if not base.is_dir():
            continue
        present = set()
        for entry in base.iterdir():
            if entry.name.startswith("."):
                continue
            present.add(entry.stem if entry.is_file() and entry.suffix in YAML_SUFFIXES else entry.name)
        for name in sorted(present - set(names)):
            problems.add(
                f"{sub}/{name}",
                f"vars for {what} not in {hosts_file}{_suggest(name, names)}",
                "rename it after a group or host of the inventory, or remove it",
            )
        for name in sorted(present & set(names)):
            for found in loader.find_vars_files(str(base), name):
                path = Path(found)
                data = _read_file(
                    loader, path, inv, problems, cache="all", unsafe=True, trusted_as_template=True
                )
                if data is not None and not isinstance(data, dict):
                    problems.add(
                        _display(path, inv),
                        f"expected a mapping of keys to values, found {type(data).__name__}",
                        "the file must look like `key: value` lines",
                    )


def _yaml_files(inv: Path, sources: list[Path]) -> list[Path]:
    """Every file of the directory Ansible may read as YAML: the YAML hosts files, and each file
    under group_vars/ and host_vars/ (any depth) with a YAML suffix or none, hidden ones aside."""
    out = [s for s in sources if s.suffix in YAML_SUFFIXES]
    for sub in ("group_vars", "host_vars"):
        for root, dirs, names in os.walk(inv / sub):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            out += [Path(root) / n for n in sorted(names)
                    if not n.startswith(".") and Path(n).suffix in ("", *YAML_SUFFIXES)]
    return out


def _check_aliases(loader: DataLoader, inv: Path, sources: list[Path], problems: Problems) -> None:
    """Refuse an alias bomb before anything walks the data (``yamlbound``); vault-encrypted files
    are checked decrypted. A file that cannot be read here is left to Ansible's reader to report."""
    for path in _yaml_files(inv, sources):
        try:
            # as bytes: libyaml takes no str subclass (Ansible's text is an Origin-tagged str)
            text = loader.get_text_file_contents(str(path)).encode()
        except (AnsibleError, OSError, UnicodeError):
            continue
        why = yamlbound.alias_problem(text)
        if why:
            problems.add(_display(path, inv), why, "write the values out, or nest fewer aliases")


def _forget_cached_listings(inv: Path) -> None:
    """host_group_vars caches directory listings per process; a long-lived process must re-list."""
    module = sys.modules.get("ansible.plugins.vars.host_group_vars")  # not loaded yet: nothing cached
    root = str(inv.resolve())
    for name in ("FOUND", "NAK", "CANONICAL_PATHS"):
        cache = getattr(module, name, None)
        if isinstance(cache, dict):
            for key in [k for k in cache if root in k]:
                del cache[key]
        elif isinstance(cache, set):
            cache.difference_update({k for k in cache if root in k})


@contextlib.contextmanager
def _ansible_settings() -> Iterator[list[Any]]:
    """Duplicate YAML keys are errors, and Ansible's warnings are collected (yielded), not printed."""
    global _loading
    saved = os.environ.get("ANSIBLE_DUPLICATE_YAML_DICT_KEY")
    os.environ["ANSIBLE_DUPLICATE_YAML_DICT_KEY"] = "error"
    warnings: list[Any] = []
    _loading += 1
    try:
        if DeferredWarningContext is None:
            yield warnings
        else:
            with DeferredWarningContext(variables={}) as ctx:
                yield warnings
            warnings.extend(ctx.get_warnings())
    finally:
        _loading -= 1
        if saved is None:
            os.environ.pop("ANSIBLE_DUPLICATE_YAML_DICT_KEY", None)
        else:
            os.environ["ANSIBLE_DUPLICATE_YAML_DICT_KEY"] = saved


def _warning_text(warning: Any) -> str:
    text = format_message(warning, False) if format_message is not None else str(warning)
    return " ".join(text.split())


class _NoFacts:
    """A fact cache with no host in it (Ansible's VariableManager reads a host's facts with get)."""

    def get(self, key: str) -> dict[str, Any]:
        raise KeyError(key)


def sources_of(inv: Path) -> list[Path]:
    return [inv / name for name in SOURCE_NAMES if (inv / name).is_file()]


def read(inv: Path, problems: Problems, vault_password_file: Path | str | None = None) -> Read:
    """Read ``inv`` with ansible-core; problems found are added (InputError when reading must stop)."""
    sources = sources_of(inv)
    if not sources:
        raise InputError(
            f"{inv}: no hosts.yml",
            hint="an inventory directory holds hosts.yml (or an INI hosts file) and group_vars/all/ "
            "(`sparkctl init --example DIR` writes the documented example site)",
        )
    loader = DataLoader()
    files = vault.vault_password_files(vault_password_file)
    vault.use_secrets(loader, vault.secrets_from(loader, files))
    out = Read(sources=[s.name for s in sources], vault_files=[str(f) for f in files])
    shown_sources = " / ".join(out.sources)
    with _ansible_settings() as warnings:
        _check_aliases(loader, inv, sources, problems)
        problems.raise_if_any(str(inv))
        _check_sources(loader, sources, inv, problems)
        problems.raise_if_any(str(inv))
        _forget_cached_listings(inv)
        try:
            im = InventoryManager(loader=loader, sources=[str(s.absolute()) for s in sources])
        except AnsibleError as exc:
            problems.add(shown_sources, _error_text(exc) + _mark(exc, inv), "fix the inventory file")
            problems.raise_if_any(str(inv))
            raise
        _check_vars_files(loader, im, inv, problems, shown_sources)
        problems.raise_if_any(str(inv))
        vm = VariableManager(loader=loader, inventory=im)
        # Inside ansible-playbook (the vars plugin, a role's lookup) the process's own -e values and
        # options (check mode, verbosity) would land in every host's variables: the inventory is
        # what is read here, nothing else.
        vm._extra_vars = {}
        vm._options_vars = {}
        # Nor the facts a persistent fact cache (ANSIBLE_CACHE_PLUGIN=jsonfile, redis, ...) holds
        # from an earlier run: they would read as 200 unknown inventory keys.
        vm._fact_cache = _NoFacts()
        everyone = im.groups["all"]
        site_raw = combine_vars(
            everyone.get_vars(), get_vars_from_inventory_sources(loader, im._sources, [everyone], "task")
        )
        host_raw = {h.name: vm.get_vars(host=h, include_hostvars=False) for h in im.get_hosts()}
    for warning in warnings:
        text = _warning_text(warning)
        if _PARSE_FAILED.search(text):
            problems.add(
                shown_sources, text, "fix the inventory file (ansible-inventory --list shows the same)"
            )
        else:
            Display().warning(text)
    out.group_names = {name: {a.name for a in g.get_ancestors()} for name, g in im.groups.items()}
    first = next(iter(host_raw.values()), site_raw)
    out.site = _resolve(site_raw, first, loader, "", inv, out, problems, site=True)
    for host in im.get_hosts():
        hv = host_raw[host.name]
        groups = {g.name for g in host.get_groups()}
        own = {k: v for k, v in hv.items() if k not in MAGIC and (k not in site_raw or v is not site_raw[k])}
        source = _display(Path(str(hv.get("inventory_file") or sources[0])), inv.absolute())
        group = "sparks" if "sparks" in groups else "switches" if "switches" in groups else "host"
        values = _resolve(own, hv, loader, f"{group}.{host.name}", inv, out, problems, site=False)
        out.hosts[host.name] = HostRead(host.name, groups, values, source)
    return out


def _resolve(
    values: dict[str, Any],
    context: dict[str, Any],
    loader: DataLoader,
    prefix: str,
    inv: Path,
    out: Read,
    problems: Problems,
    *,
    site: bool,
) -> dict[str, Any]:
    """Template each value as Ansible would (in ``context``), then make it plain data."""
    templar = Templar(loader=loader, variables=context)
    resolved: dict[str, Any] = {}
    for key, raw in values.items():
        path = f"{prefix}.{key}" if prefix else key
        _index_origins(raw, path, inv, out.origins, key)
        if key.startswith("ansible_") and isinstance(raw, EncryptedString):
            continue  # a vaulted connection secret (become password...): Ansible's to use, not ours
        try:
            value = templar.template(raw)
            plain = native(value)
        except AnsibleError as exc:
            text = _error_text(exc)
            if "decrypt" in text.lower() or "vault" in text.lower():
                problems.add(
                    path,
                    f"cannot be decrypted with the vault password given: {text}",
                    "pass the right --vault-password-file (or ANSIBLE_VAULT_PASSWORD_FILE)",
                )
            else:
                problems.add(
                    path,
                    f"template cannot be resolved: {text}",
                    "define the variable it uses, or fix the expression",
                )
            continue
        if site and vault.is_vaulted(raw, value):
            out.vaulted.add(key)
        resolved[key] = plain
    return resolved
