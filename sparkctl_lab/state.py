"""Where the lab keeps its files, and the runtime state file that records what `up` created.

Persistent per-lab files (keys, overlay upper dirs, NVMe images, console logs) live under
``lab_dir()`` (default /var/lib/sparkctl/lab). What is running (container PIDs, loop devices, the
inventory written) is recorded in ``run_dir()/state.json`` (default /run/sparkctl-lab), so `down`
removes exactly that, and a run that crashed is recognised and cleaned by the next `up`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sparkctl.errors import SparkctlError
from sparkctl_lab import topology as topo

# Lab N > 0 (topology.INSTANCE) keeps its files beside lab 0's: /var/lib/sparkctl/lab-N, /run/sparkctl-lab-N.
DEFAULT_LAB_DIR = Path(f"/var/lib/sparkctl/lab{topo.DIR_SUFFIX}")
DEFAULT_RUN_DIR = Path(f"/run/sparkctl-lab{topo.DIR_SUFFIX}")
STATE_VERSION = 1


def lab_dir() -> Path:
    return Path(os.environ.get("SPARKCTL_LAB_DIR", str(DEFAULT_LAB_DIR)))


def run_dir() -> Path:
    return Path(os.environ.get("SPARKCTL_LAB_RUN_DIR", str(DEFAULT_RUN_DIR)))


def state_file() -> Path:
    return run_dir() / "state.json"


def controller_key() -> Path:
    return lab_dir() / "id_ed25519"


def api_key_file() -> Path:
    return lab_dir() / "api_key"


def root_password_file() -> Path:
    """The Sparks' root password (0600), random per lab: with it a node answers a password login as
    a fresh DGX OS box does, for `sparkctl bootstrap` (key login as root works as well)."""
    return lab_dir() / "root_password"


def checkpoint_dir() -> Path:
    """Default controller-side checkpoint source for the lab (filled by stage tests; never removed)."""
    return lab_dir() / "checkpoint"


def machines_dir() -> Path:
    return lab_dir() / "machines"


def machine_dir(name: str) -> Path:
    return machines_dir() / name


@dataclass
class MachinePaths:
    root: Path

    @property
    def upper(self) -> Path:
        return self.root / "upper"

    @property
    def work(self) -> Path:
        return self.root / "work"

    @property
    def merged(self) -> Path:
        return self.root / "merged"

    @property
    def nvme(self) -> Path:
        return self.root / "nvme"

    @property
    def docker(self) -> Path:
        """The node's Docker data root (bound at /var/lib/docker): ext4, unlike the overlay root."""
        return self.root / "docker"

    @property
    def nvme_image(self) -> Path:
        return self.root / "nvme.img"

    @property
    def console_log(self) -> Path:
        return self.root / "console.log"


def paths(name: str) -> MachinePaths:
    return MachinePaths(machine_dir(name))


@dataclass
class MachineState:
    pid: int | None = None  # the systemd-nspawn process
    pid_start: int | None = None  # its start time (clock ticks), guards against PID reuse
    loop: str | None = None  # loop device holding /mnt/nvme, when size-limited
    nvme_gib: int | None = None


@dataclass
class LabState:
    version: int = STATE_VERSION
    rootfs: str = ""
    # The shape the lab is up in (topology.SHAPES): `down`, `status`, the chaos hooks act on its
    # machines. A state file written before shapes existed is the four-node lab's.
    shape: str = topo.DEFAULT_SHAPE
    inventory_dir: str = ""  # the inventory the last `up` wrote
    # Inventories an earlier `up` wrote elsewhere while the lab kept running (another clone or
    # session on this host, `-i DIR`): still valid, and the session using one may still be
    # running, so they stay until `down` removes them with the rest.
    other_inventories: list[str] = field(default_factory=list)
    machines: dict[str, MachineState] = field(default_factory=dict)

    def adopt_inventory(self, inventory_dir: Path) -> None:
        """Record ``inventory_dir`` as the one `up` writes now; the one before is kept, not removed."""
        old, new = self.inventory_dir, str(inventory_dir.resolve())
        self.other_inventories = [d for d in dict.fromkeys([*self.other_inventories, old]) if d and d != new]
        self.inventory_dir = new

    def inventories(self) -> list[Path]:
        """Every inventory this lab wrote while up (what `down` removes)."""
        return [Path(d) for d in (*self.other_inventories, self.inventory_dir) if d]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LabState:
        machines = {k: MachineState(**v) for k, v in (data.get("machines") or {}).items()}
        return cls(
            version=int(data.get("version", 0)),
            rootfs=str(data.get("rootfs", "")),
            shape=str(data.get("shape") or topo.DEFAULT_SHAPE),
            inventory_dir=str(data.get("inventory_dir", "")),
            other_inventories=[str(d) for d in data.get("other_inventories") or []],
            machines=machines,
        )


def load() -> LabState | None:
    """The recorded state, or None when there is none (or it is unreadable: treated as a crash).
    A recorded state makes its shape the one ``topology`` answers for in this process."""
    try:
        data = json.loads(state_file().read_text())
        st = LabState.from_dict(data)
        if st.version == STATE_VERSION:
            topo.use_shape(st.shape)
    except (OSError, ValueError, TypeError):
        return None
    return st if st.version == STATE_VERSION else None


def save(st: LabState) -> None:
    f = state_file()
    f.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = f.with_suffix(".tmp")
    tmp.write_text(st.to_json())
    tmp.replace(f)


def clear() -> None:
    state_file().unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        run_dir().rmdir()


def lock_file() -> Path:
    return run_dir().with_name(run_dir().name + ".lock")


@contextmanager
def locked(timeout: float = 600.0, path: Path | None = None) -> Iterator[None]:
    """One lab operation at a time on this host (two test sessions, or a user and a test); with
    `path`, that lock file instead of this lab's (the caches every lab on the host shares)."""
    path = path or lock_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise SparkctlError(
                        f"another lab operation holds {path} for more than {timeout:.0f}s",
                        hint="wait for it to finish (see `ps -ef | grep sparkctl`)",
                    ) from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
