"""The draft of a cluster while the inventory is being checked: what validated, section by section.

``loader`` fills it; the cross-field checks (``checks``) read it. Its own module so that neither of
the two imports the other for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkctl.model.cluster import Group, Node, Switch


@dataclass
class Draft:
    """What validated, section by section (None where a section had problems)."""

    inventory_dir: Path
    site: dict[str, Any] = field(default_factory=dict)  # SITE_KEYS -> validated value
    ansible: dict[str, Any] = field(default_factory=dict)  # ANSIBLE_READ -> validated value
    spark_names: list[str] = field(default_factory=list)  # every host of the sparks group
    ranks: dict[str, int] = field(default_factory=dict)  # host -> rank, where it validated
    nodes: list[Node] = field(default_factory=list)  # hosts that validated completely
    switch_names: list[str] = field(default_factory=list)
    switch: Switch | None = None
    profile: Any = None
    groups: list[Group] = field(default_factory=list)  # the serving groups (sparkctl.model.topology)

    def get(self, key: str) -> Any:
        return self.site.get(key)


__all__ = ["Draft"]
