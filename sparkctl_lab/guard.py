"""Keeping one lab whole for a long sequence of users (the integration tests of one stream).

A test that fails, a chaos hook that was not undone, or anything else that takes part of the lab
away (its state file, a file of its inventory, a machine) must not fail every test after it for a
reason that has nothing to do with them. Before each test the guard looks at what the lab is made
of (``damage``, cheap: files and PIDs, no SSH); anything missing is rebuilt with an idempotent
``lab up``, which says so; a lab that cannot be rebuilt fails that one test with the reason, and
every later test of the stream is skipped with the same one reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sparkctl_lab import inventory as lab_inventory
from sparkctl_lab import machines, state
from sparkctl_lab import topology as topo


def damage(inventory_dir: Path) -> list[str]:
    """What of the running lab is missing: its state file, a file of its inventory, a machine that
    is off. Empty when the lab is whole."""
    found: list[str] = []
    st = state.load()
    if st is None:
        found.append(f"the lab's state file {state.state_file()} is gone")
    for name in lab_inventory.render_files_names():
        if not (inventory_dir / name).is_file():
            found.append(f"{inventory_dir / name} is gone")
    if st is not None:
        found += [f"{m} is off" for m in topo.machines() if machines.nspawn_pid(m, st) is None]
    return found


class LabLost(Exception):
    """The lab broke and could not be rebuilt: the message is the one reason for the rest."""


@dataclass
class Guard:
    """``before(test)`` ahead of each test, ``after(test)`` when it is done.

    ``check`` lists what is missing (``damage``); ``rebuild`` brings the lab back (``control.up``).
    """

    check: Callable[[], list[str]]
    rebuild: Callable[[], object]
    broken: str | None = None  # set once a rebuild failed: every later test is skipped with it
    rebuilt: list[str] = field(default_factory=list)  # per rebuild: before which test, what was missing
    last: str = "the lab's setup"  # the test that ran last on the lab

    def before(self, test: str) -> str | None:
        """None when the lab is whole (rebuilt first if it was not; the line says so, also in
        ``rebuilt``). Raises LabLost when it cannot be rebuilt; once it could not, raises LabLost
        with that same reason for every later test."""
        if self.broken is not None:
            raise LabLost(self.broken)
        missing = self.check()
        if not missing:
            return None
        what = "; ".join(missing)
        try:
            self.rebuild()
            still = self.check()
        except Exception as exc:  # any failure to rebuild is the reason
            still, error = [], f"{type(exc).__name__}: {exc}"
        else:
            error = "; ".join(still)
        if still or error:
            self.broken = (
                f"the lab broke after {self.last} ({what}) and rebuilding it failed ({error}): "
                "the rest of this stream is skipped"
            )
            raise LabLost(self.broken)
        line = f"lab rebuilt before {test}: after {self.last}, {what}"
        self.rebuilt.append(line)
        return line

    def after(self, test: str) -> None:
        self.last = test
