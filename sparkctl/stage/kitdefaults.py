"""The kit's layout where the profile names none, as the spark_kit role's defaults write it."""

from __future__ import annotations

from typing import NamedTuple

from sparkctl.ansible.roledefaults import role_default


class KitLayout(NamedTuple):
    manifest: str
    overlay_source: str


def kit_layout_defaults() -> KitLayout:
    """``spark_kit_default_manifest`` and ``spark_kit_default_overlay_source`` of roles/spark_kit."""
    return KitLayout(str(role_default("spark_kit", "spark_kit_default_manifest")),
                     str(role_default("spark_kit", "spark_kit_default_overlay_source")))
