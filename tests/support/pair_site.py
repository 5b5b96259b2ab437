"""A switchless site: inventory/example cut to two Sparks on one cable (TP2/EP2, no switches group).

Four or more nodes need a switch (a Spark's two ConnectX-7 ports make a three-node triangle, not a
four-node mesh), so a test of the switchless code paths starts from a site small enough to be one.
"""

from __future__ import annotations

from pathlib import Path

import yaml

DROPPED = ("spark-2", "spark-3")


def make_switchless_pair(inv: Path) -> None:
    """Rewrite the example copy at ``inv`` in place: spark-0 and spark-1 only, no switch, TP2/EP2."""
    hosts = inv / "hosts.yml"
    doc = yaml.safe_load(hosts.read_text())
    del doc["all"]["children"]["switches"]
    for name in DROPPED:
        del doc["all"]["children"]["sparks"]["hosts"][name]
    hosts.write_text(yaml.safe_dump(doc))
    site = inv / "group_vars/all/sparkctl.yml"
    conf = yaml.safe_load(site.read_text())
    overrides = conf.get("sparkctl_profile_overrides") or {}
    overrides.setdefault("args", {}).update({"--tp-size": 2, "--ep-size": 2})
    conf["sparkctl_profile_overrides"] = overrides
    site.write_text(yaml.safe_dump(conf, sort_keys=False))
