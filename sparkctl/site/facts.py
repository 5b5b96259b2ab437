"""A node as ``nodeside.discover`` saw it, typed, and its ConnectX-7 ports with their PCIe halves.

A DGX Spark's ConnectX-7 shows each physical port to Linux twice, once per PCIe x4 link (the two
"halves"): the same bus, device and function in two PCI domains, e.g. port 0 is
``0000:01:00.0`` (``enp1s0f0np0``, ``rocep1s0f0``) and ``0002:01:00.0`` (``enP2p1s0f0np0``,
``roceP2p1s0f0``); port 1 is function 1 of both. Grouping by bus:device.function gives the physical
port; the domain tells the halves apart (the lower one is half A). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv4Interface
from typing import Any

# The ConnectX-7's kernel driver, as /sys/class/net/<netdev>/device/driver names it.
CX7_DRIVER = "mlx5_core"
GIB = 1024**3


@dataclass(frozen=True)
class Netdev:
    """One network interface of a node."""

    name: str
    driver: str | None = None
    pci: str | None = None
    state: str = "unknown"
    carrier: bool = False
    admin_up: bool = False
    mtu: int = 0
    speed_mbps: int | None = None
    ipv4: tuple[str, ...] = ()
    hca: str | None = None
    hca_fw: str | None = None

    @property
    def up(self) -> bool:
        """The link is up: administratively up, with a carrier (a cable and a live peer)."""
        return self.admin_up and self.carrier

    def link_text(self) -> str:
        if not self.admin_up:
            return "administratively down"
        return "up" if self.carrier else f"no carrier ({self.state})"


@dataclass(frozen=True)
class Port:
    """One physical ConnectX-7 port: its PCIe halves in domain order (A first)."""

    index: int  # the PCI function: port 0 or port 1
    halves: tuple[Netdev, ...]

    @property
    def up(self) -> bool:
        return all(h.up for h in self.halves)

    @property
    def any_up(self) -> bool:
        return any(h.up for h in self.halves)


@dataclass(frozen=True)
class Filesystem:
    mount: str
    source: str
    size_bytes: int
    avail_bytes: int

    @property
    def size_gib(self) -> int:
        return self.size_bytes // GIB


@dataclass(frozen=True)
class NodeFacts:
    """What discovery read from one node (reached at ``address``)."""

    address: str
    hostname: str = ""
    os: str | None = None
    dgx_os: str | None = None
    kernel: str | None = None
    nvidia_driver: str | None = None
    bios: str | None = None
    memory_bytes: int | None = None
    nvme: tuple[dict[str, Any], ...] = ()
    filesystems: tuple[Filesystem, ...] = ()
    netdevs: tuple[Netdev, ...] = ()
    lldp: Mapping[str, Mapping[str, Any]] | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def netdev(self, name: str) -> Netdev | None:
        return next((n for n in self.netdevs if n.name == name), None)

    def filesystem(self, mount: str) -> Filesystem | None:
        return next((f for f in self.filesystems if f.mount == mount), None)

    def mgmt(self) -> tuple[Netdev, IPv4Interface] | None:
        """The interface holding the address the controller reached this node on, with its prefix."""
        try:
            want = IPv4Address(self.address)
        except ValueError:
            return None
        for nd in self.netdevs:
            for text in nd.ipv4:
                try:
                    iface = IPv4Interface(text)
                except ValueError:
                    continue
                if iface.ip == want:
                    return nd, iface
        return None

    def cx7_ports(self) -> list[Port]:
        """The ConnectX-7 ports, by port index, each with its halves in PCI domain order."""
        groups: dict[str, list[Netdev]] = {}
        for nd in self.netdevs:
            if nd.driver != CX7_DRIVER or not nd.pci:
                continue
            groups.setdefault(nd.pci.split(":", 1)[1], []).append(nd)
        ports = []
        for bdf, members in groups.items():
            halves = tuple(sorted(members, key=lambda n: n.pci or ""))
            ports.append(Port(index=int(bdf.rsplit(".", 1)[1], 8), halves=halves))
        return sorted(ports, key=lambda p: (p.index, p.halves[0].pci or ""))

    def summary(self) -> dict[str, Any]:
        """The identity line of `init`'s table and --json."""
        return {
            "address": self.address, "hostname": self.hostname, "os": self.os, "dgx_os": self.dgx_os,
            "kernel": self.kernel, "nvidia_driver": self.nvidia_driver, "bios": self.bios,
            "memory_gib": round(self.memory_bytes / GIB, 1) if self.memory_bytes else None,
            "nvme": [f"{d.get('name')} {int(d.get('size_bytes') or 0) / 1e12:.1f} TB" for d in self.nvme],
            "cx7_ports": [
                {"port": p.index,
                 "halves": [{"netdev": h.name, "hca": h.hca, "pci": h.pci, "link": h.link_text(),
                             "firmware": h.hca_fw} for h in p.halves]}
                for p in self.cx7_ports()
            ],
        }


def _text(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None


def _int(value: Any, default: int = 0) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else default


def from_answer(address: str, doc: Mapping[str, Any]) -> NodeFacts:
    """The typed facts of ``nodeside.discover``'s JSON answer (missing or odd fields left empty)."""
    osr: Mapping[str, Any] = doc["os"] if isinstance(doc.get("os"), dict) else {}
    dgx: Mapping[str, Any] | None = doc["dgx"] if isinstance(doc.get("dgx"), dict) else None
    dgx_os = None
    if dgx:
        # an over-the-air update appends its DGX_OTA_VERSION (the last one read is the newest)
        dgx_os = _text(dgx.get("DGX_OTA_VERSION") or dgx.get("DGX_SWBUILD_VERSION")
                       or dgx.get("DGX_PRETTY_NAME") or dgx.get("DGX_NAME"))
    nets = []
    for nd in doc.get("netdevs") or []:
        if not isinstance(nd, dict) or not nd.get("name"):
            continue
        nets.append(Netdev(
            name=str(nd["name"]), driver=_text(nd.get("driver")), pci=_text(nd.get("pci")),
            state=str(nd.get("state") or "unknown"), carrier=nd.get("carrier") is True,
            admin_up=nd.get("admin_up") is True, mtu=_int(nd.get("mtu")),
            speed_mbps=_int(nd.get("speed_mbps")) or None,
            ipv4=tuple(str(a) for a in nd.get("ipv4") or []), hca=_text(nd.get("hca")),
            hca_fw=_text(nd.get("hca_fw")),
        ))
    filesystems = tuple(
        Filesystem(str(f["mount"]), str(f.get("source") or ""), _int(f.get("size_bytes")),
                   _int(f.get("avail_bytes")))
        for f in doc.get("filesystems") or [] if isinstance(f, dict) and f.get("mount")
    )
    lldp = doc.get("lldp")
    return NodeFacts(
        address=address,
        hostname=str(doc.get("hostname") or ""),
        os=_text(osr.get("PRETTY_NAME")),
        dgx_os=dgx_os,
        kernel=_text(doc.get("kernel")),
        nvidia_driver=_text(doc.get("nvidia_driver")),
        bios=_text(doc.get("bios")),
        memory_bytes=_int(doc.get("memory_bytes")) or None,
        nvme=tuple(d for d in doc.get("nvme") or [] if isinstance(d, dict)),
        filesystems=filesystems,
        netdevs=tuple(nets),
        lldp=lldp if isinstance(lldp, dict) else None,
        raw=dict(doc),
    )


__all__ = ["CX7_DRIVER", "Filesystem", "Netdev", "NodeFacts", "Port", "from_answer"]
