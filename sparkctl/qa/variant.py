"""A profile variant for ``bench --ab VARIANT``: a named set of profile overrides (the lever), and the
inventory that serves it.

A variant is a YAML mapping of the same shape as ``sparkctl_profile_overrides`` (e.g. R4's seven
draft tokens against r4-nvme's five)::

    # bench-variants/k7.yml
    args:
      --speculative-dspark-block-size: 7

``VARIANT`` is a name (the file ``bench-variants/<NAME>.yml`` in the inventory directory) or a path
to such a file. Its overrides are laid over the site's own, section by section as the profile merges
them, and the result must load as a profile before anything is switched.

The lever arm is served from a copy of the inventory directory (relative files keep their meaning)
with one more ``group_vars/all`` file setting the merged ``sparkctl_profile_overrides``: the vars
plugin and ``up`` read that copy as they read any inventory, so the rendered units are the variant's
and no value is derived a second time.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from sparkctl import yamltext
from sparkctl.errors import InputError
from sparkctl.profiles import MERGED_SECTIONS, load_profile

if TYPE_CHECKING:
    from sparkctl.model import Cluster
    from sparkctl.qa.idle import ServerCheck
    from sparkctl.qa.protocols import ABPlan

VARIANTS_DIR = "bench-variants"
VARS_FILE = "zz-sparkctl-bench-variant.yml"  # sorts after the site's own group_vars/all files


@dataclass(frozen=True)
class Variant:
    name: str
    path: Path
    sha256: str
    overrides: dict[str, Any]

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "file": str(self.path), "sha256": self.sha256, "overrides": self.overrides}


def variant_path(spec: str, inventory_dir: Path) -> Path:
    """A name → ``<inventory>/bench-variants/<name>.yml``; a spec with a slash or a YAML suffix is a path."""
    if "/" in spec or spec.endswith((".yml", ".yaml")):
        return Path(spec).expanduser()
    return inventory_dir / VARIANTS_DIR / f"{spec}.yml"


def layered(site: Mapping[str, Any], variant: Mapping[str, Any]) -> dict[str, Any]:
    """The variant's overrides over the site's: a merged section (args, env, …) key by key, any other
    key replaced whole, as the profile merges an override."""
    out = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in site.items()}
    for key, value in variant.items():
        current = out.get(key)
        if key in MERGED_SECTIONS and isinstance(value, Mapping) and isinstance(current, Mapping):
            out[key] = {**current, **value}
        else:
            out[key] = value
    return out


def load_variant(spec: str, inventory_dir: Path, profile: str, site_overrides: Mapping[str, Any]) -> Variant:
    """The variant ``spec`` names, checked: a YAML mapping whose overrides, over the site's, load as
    the profile (InputError naming the file otherwise, exit 2, nothing switched)."""
    path = variant_path(spec, inventory_dir)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(
            f"--ab {spec}: cannot read {path} ({exc.strerror or exc})",
            hint=f"a variant is a YAML file of profile overrides: {inventory_dir / VARIANTS_DIR}/<NAME>.yml "
            "or a path",
        ) from None
    try:
        doc = yamltext.safe_load(raw)
    except yaml.YAMLError as exc:
        raise InputError(f"--ab {path}: not YAML ({exc})") from None
    if not isinstance(doc, dict) or not doc:
        raise InputError(f"--ab {path}: a variant is a non-empty mapping of profile overrides "
                         "(the shape of sparkctl_profile_overrides)")
    try:
        load_profile(profile, layered(site_overrides, doc), where=f"--ab {path}")
    except InputError as exc:
        raise InputError(f"--ab {path}: with this variant, {exc.message}", details=exc.details,
                         hint="fix the variant's overrides (sparkctl_profile_overrides' shape)") from None
    return Variant(path.stem, path, hashlib.sha256(raw).hexdigest(), doc)


def variant_inventory(inventory_dir: Path, variant: Variant, site_overrides: Mapping[str, Any],
                      dest: Path) -> Path:
    """A copy of the inventory directory at ``dest`` serving the variant (its overrides over the
    site's in one more group_vars/all file); returns ``dest``."""
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(inventory_dir, dest, symlinks=True)
    group_all = dest / "group_vars" / "all"
    if (dest / "group_vars" / "all.yml").exists() and not group_all.exists():
        raise InputError(f"{inventory_dir}: group_vars/all.yml is a file; bench --ab needs group_vars/all/ "
                         "(a directory) to add the variant's overrides beside the site's")
    group_all.mkdir(parents=True, exist_ok=True)
    text = ("# bench --ab: the variant's profile overrides over the site's (sparkctl.qa.variant)\n"
            + yaml.safe_dump({"sparkctl_profile_overrides": layered(site_overrides, variant.overrides)},
                             sort_keys=False))
    (group_all / VARS_FILE).write_text(text)
    return dest


def ab_plan(inventory: Path, cluster: Cluster, spec: str,
            server_check: Callable[[Cluster], ServerCheck],
            cycle: Callable[[Cluster], Mapping[str, Any]]) -> ABPlan:
    """The A/B of ``spec``: its overrides over the site's must load as the profile; the lever's
    inventory is written under the state directory; ``switch(arm)`` brings the group down and up
    serving that arm (``cycle``: serve's down then up of a cluster); each arm's suites compare
    /server_info with that arm's own profile (``server_check``)."""
    from sparkctl.ansible.content import state_dir
    from sparkctl.model import load_inventory
    from sparkctl.model.loader import read_raw
    from sparkctl.model.problems import Problems
    from sparkctl.qa.protocols import ABPlan

    site = read_raw(inventory, Problems()).site.get("sparkctl_profile_overrides") or {}
    variant = load_variant(spec, inventory, cluster.profile.name, site)
    lever_dir = variant_inventory(inventory, variant, site,
                                  state_dir() / VARIANTS_DIR / f"{cluster.name}-{variant.name}")
    arms = {"baseline": cluster, "lever": load_inventory(lever_dir)}
    dirs = {"baseline": inventory, "lever": lever_dir}
    checks = {arm: server_check(c) for arm, c in arms.items()}

    def switch(arm: str) -> dict[str, Any]:
        return {"arm": arm, "inventory": str(dirs[arm]), **cycle(arms[arm])}

    return ABPlan({**variant.describe(), "inventory": str(lever_dir)}, switch, server_check=checks.get)


__all__ = ["Variant", "ab_plan", "layered", "load_variant", "variant_inventory", "variant_path"]
