"""Pure planning: (Cluster, verb, options) -> Plan. No I/O, no host contacted.

A Plan says which playbook runs, on which hosts, with which tags and variables, and whether in
check mode. `runner.execute(plan, on_event)` is the only thing that runs one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
PLAYBOOK_DIR = REPO_ROOT / "playbooks"


@dataclass(frozen=True)
class Plan:
    playbook: str                      # file name under playbooks/, e.g. "provision.yml"
    inventory: Path                    # the inventory directory
    limit: str | None = None           # Ansible --limit pattern
    tags: tuple[str, ...] = ()
    skip_tags: tuple[str, ...] = ()
    extravars: dict[str, Any] = field(default_factory=dict)  # never secrets
    check: bool = False
    diff: bool = False
    verbosity: int = 0

    def argv(self) -> list[str]:
        """The equivalent manual command, for logs and for `--verbose`."""
        cmd = ["ansible-playbook", "-i", str(self.inventory), f"playbooks/{self.playbook}"]
        if self.limit:
            cmd += ["--limit", self.limit]
        if self.tags:
            cmd += ["--tags", ",".join(self.tags)]
        if self.skip_tags:
            cmd += ["--skip-tags", ",".join(self.skip_tags)]
        if self.check:
            cmd.append("--check")
        if self.diff:
            cmd.append("--diff")
        return cmd
