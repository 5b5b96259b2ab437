"""What ``nodeside.discover`` answers on a DGX Spark, and fakes of init's SSH collaborators.

A Spark's ConnectX-7 as Linux shows it: port 0 = ``enp1s0f0np0``/``rocep1s0f0`` (0000:01:00.0) and
``enP2p1s0f0np0``/``roceP2p1s0f0`` (0002:01:00.0), port 1 = function 1 of both domains. Port 0 is
cabled to the switch (both halves up), port 1 is not. The management NIC ``enP7s7`` holds
192.168.7.(10+rank)/24. LLDP names the switch port of both halves.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import paramiko

from sparkctl.site import hostkeys
from sparkctl.ssh.targets import Target

GIB = 1024**3
FW = "28.45.1020"


def _cx7(name: str, pci: str, hca: str, up: bool) -> dict[str, Any]:
    return {"name": name, "driver": "mlx5_core", "pci": pci, "mac": None, "phys_port_name": None,
            "state": "up" if up else "down", "carrier": up, "admin_up": True, "mtu": 1500,
            "speed_mbps": 200000 if up else None, "ipv4": [], "hca": hca, "hca_fw": FW}


def answer(rank: int, *, down: Sequence[str] = (), lldp: bool = True, nvme_gib: int = 3600) -> dict[str, Any]:
    """One Spark's discover answer; ``down`` names ConnectX-7 netdevs without a link."""
    mgmt = {"name": "enP7s7", "driver": "r8127", "pci": "0007:01:00.0", "mac": None, "phys_port_name": None,
            "state": "up", "carrier": True, "admin_up": True, "mtu": 1500, "speed_mbps": 10000,
            "ipv4": [f"192.168.7.{10 + rank}/24"], "hca": None, "hca_fw": None}
    cabled = {"enp1s0f0np0", "enP2p1s0f0np0"} - set(down)
    nets = [mgmt] + [
        _cx7(n, pci, hca, n in cabled)
        for n, pci, hca in (("enp1s0f0np0", "0000:01:00.0", "rocep1s0f0"),
                            ("enp1s0f1np1", "0000:01:00.1", "rocep1s0f1"),
                            ("enP2p1s0f0np0", "0002:01:00.0", "roceP2p1s0f0"),
                            ("enP2p1s0f1np1", "0002:01:00.1", "roceP2p1s0f1"))
    ]
    port = f"qsfp56-dd-{rank + 1}-1"
    return {
        "mode": "discover", "hostname": f"dgx-spark-{rank}", "os": {"PRETTY_NAME": "Ubuntu 24.04.3 LTS"},
        "dgx": {"DGX_SWBUILD_VERSION": "7.2.3"}, "kernel": "6.11.0-1016-nvidia", "arch": "aarch64",
        "nvidia_driver": "580.95.05", "bios": "5.36_0ACUM018", "memory_bytes": 128 * GIB,
        "nvme": [{"name": "nvme0n1", "size_bytes": 4_000_787_030_016, "model": "ESL01TBTLCZ"}],
        "filesystems": [{"mount": "/mnt/nvme", "source": "/dev/nvme0n1p3", "fstype": "ext4",
                         "size_bytes": nvme_gib * GIB, "avail_bytes": (nvme_gib - 10) * GIB}],
        "netdevs": nets, "rdma": True,
        "lldp": {"enp1s0f0np0": {"chassis": "crs812", "port": port},
                 "enP2p1s0f0np0": {"chassis": "crs812", "port": port}} if lldp else None,
    }


@dataclass
class FakeNodes:
    """init's scan and discover over no network: each address has a key and a discover answer."""

    answers: dict[str, Mapping[str, Any] | str] = field(default_factory=dict)  # by address
    keys: dict[str, paramiko.PKey] = field(default_factory=dict)
    scanned: list[str] = field(default_factory=list)
    discovered: list[list[Target]] = field(default_factory=list)
    params: list[Mapping[str, Any]] = field(default_factory=list)

    @classmethod
    def sparks(cls, count: int = 4, **kwargs: Any) -> FakeNodes:
        nodes = cls()
        for rank in range(count):
            nodes.answers[f"192.168.7.{10 + rank}"] = answer(rank, **kwargs)
        return nodes

    def key(self, address: str) -> paramiko.PKey:
        return self.keys.setdefault(address, paramiko.ECDSAKey.generate())

    def scan(self, address: str, port: int, key_types: Sequence[str] = ()) -> hostkeys.HostKey:
        self.scanned.append(address)
        k = self.key(address)
        return hostkeys.HostKey(hostkeys.known_name(address, port), k.get_name(), k.get_base64())

    def discover(self, targets: Sequence[Target],
                 params: Mapping[str, Any]) -> dict[str, Mapping[str, Any] | str]:
        self.discovered.append(list(targets))
        self.params.append(params)
        for t in targets:  # the same rule as the fan-out: a key not pinned is refused
            assert t.known_hosts is not None
            name = hostkeys.known_name(t.address, t.port or 22)
            pinned = hostkeys.pinned(hostkeys.read(t.known_hosts), name)
            assert pinned and pinned[0].blob == self.key(t.address).get_base64(), f"{t.address} not pinned"
        return {t.name: self.answers.get(t.address, f"unreachable: {t.address}") for t in targets}

    def known_hosts_text(self, *addresses: str) -> str:
        return "".join(f"{a} {self.key(a).get_name()} {self.key(a).get_base64()}\n" for a in addresses)
