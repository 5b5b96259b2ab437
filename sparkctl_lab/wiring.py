"""The lab's cables: network namespaces, the management bridge, the fabric veth pairs through the
switch machine (its bridges are the shape's segments), and powering a machine's links with it (as
described in ``topology``)."""

from __future__ import annotations

from sparkctl_lab import host
from sparkctl_lab import topology as topo

# --- wiring ---------------------------------------------------------------------------------


def _sysctl(ns: str, *settings: str) -> None:
    host.run(["ip", "netns", "exec", ns, "sysctl", "-q", "-w", *settings], check=False)


def ensure_netns(machine: str) -> None:
    ns = topo.netns(machine)
    if ns not in host.netns_list():
        host.run(["ip", "netns", "add", ns])
    host.run(["ip", "-n", ns, "link", "set", "lo", "up"])
    # No IPv6 chatter on lab links; one interface answers ARP for its own address only (two
    # fabric halves share one L2 segment, as both PCIe halves share one switch port).
    _sysctl(
        ns,
        "net.ipv6.conf.all.disable_ipv6=1",
        "net.ipv6.conf.default.disable_ipv6=1",
        "net.ipv4.conf.all.arp_ignore=1",
        "net.ipv4.conf.all.arp_announce=2",
    )


def ensure_mgmt_bridge() -> None:
    br = topo.MGMT_BRIDGE
    if not host.link_exists(br):
        host.run(["ip", "link", "add", br, "type", "bridge"])
    host.run(["sysctl", "-q", "-w", f"net.ipv6.conf.{br}.disable_ipv6=1"], check=False)
    cidr = f"{topo.CONTROLLER_IP}/{topo.MGMT_SUBNET.prefixlen}"
    if cidr not in host.run(["ip", "-o", "-4", "addr", "show", "dev", br]).stdout:
        host.run(["ip", "addr", "add", cidr, "dev", br])
    host.run(["ip", "link", "set", br, "up"])


def ensure_mgmt_link(machine: str) -> bool:
    """The machine's management veth (controller end on the mgmt bridge). True when (re)created."""
    ns, inner, outer = topo.netns(machine), topo.mgmt_iface(machine), topo.mgmt_veth_host(machine)
    created = False
    # Check the namespace end: the host end of a veth whose netns died vanishes asynchronously.
    if not host.link_exists(inner, ns):
        if host.link_exists(outer):
            host.run(["ip", "link", "del", outer], check=False)
        host.run(
            [
                "ip",
                "link",
                "add",
                outer,
                "address",
                topo.mgmt_host_mac(machine),
                "type",
                "veth",
                "peer",
                "name",
                inner,
                "address",
                topo.mgmt_mac(machine),
                "netns",
                ns,
            ]
        )
        host.run(["ip", "neigh", "flush", "to", str(topo.mgmt_ip(machine))], check=False)
        host.run(["ip", "-n", ns, "link", "set", inner, "up"])
        created = True
    host.run(["sysctl", "-q", "-w", f"net.ipv6.conf.{outer}.disable_ipv6=1"], check=False)
    host.run(["ip", "link", "set", outer, "master", topo.MGMT_BRIDGE])
    if created:
        host.run(["ip", "link", "set", outer, "up"])
    return created


def ensure_switch_fabric() -> None:
    """The shape's bridges inside lab-switch: br-fabric on a switch, one per cable on a cabled shape."""
    ns = topo.netns(topo.SWITCH_NAME)
    for bridge in topo.segments():
        if not host.link_exists(bridge, ns):
            host.run(["ip", "-n", ns, "link", "add", bridge, "type", "bridge", "stp_state", "0"])
            host.run(["ip", "-n", ns, "link", "set", bridge, "mtu", str(topo.SWITCH_PORT_MTU), "up"])


def ensure_fabric_links(node: str) -> bool:
    """Every fabric veth of a node: netdev inside the node, switch port inside lab-switch, on the
    bridge of its segment (the shared fabric, or its cable's)."""
    sw, ns = topo.netns(topo.SWITCH_NAME), topo.netns(node)
    created = False
    for h in topo.fabric_ports():
        port = topo.switch_port(node, h)
        if host.link_exists(h.netdev, ns) and host.link_exists(port, sw):
            continue
        host.run(["ip", "-n", sw, "link", "del", port], check=False)
        host.run(["ip", "-n", ns, "link", "del", h.netdev], check=False)
        host.run(
            [
                "ip",
                "-n",
                sw,
                "link",
                "add",
                port,
                "address",
                topo.switch_port_mac(node, h),
                "type",
                "veth",
                "peer",
                "name",
                h.netdev,
                "address",
                topo.fabric_mac(node, h),
                "netns",
                ns,
            ]
        )
        # Switch ports start above the host MTU; only set on creation so `lab mtu` sticks.
        host.run(["ip", "-n", sw, "link", "set", port, "mtu", str(topo.SWITCH_PORT_MTU)])
        host.run(["ip", "-n", sw, "link", "set", port, "master", topo.segment_of(node, h), "up"])
        host.run(["ip", "-n", ns, "link", "set", h.netdev, "up"])
        created = True
    return created


def _machine_links(machine: str) -> list[str]:
    if machine == topo.SWITCH_NAME:
        return [topo.SWITCH_MGMT_IFACE]
    return [topo.MGMT_IFACE, *(h.netdev for h in topo.fabric_ports())]


def power_links(machine: str, up: bool) -> None:
    """A machine's own NICs as after a power cycle: down, no addresses, default MTU (or back up)."""
    ns = topo.netns(machine)
    for link in _machine_links(machine):
        if not host.link_exists(link, ns):
            continue
        if up:
            host.run(["ip", "-n", ns, "link", "set", link, "up"])
        else:
            host.run(["ip", "-n", ns, "link", "set", link, "down"], check=False)
            host.run(["ip", "-n", ns, "addr", "flush", "dev", link], check=False)
            host.run(["ip", "-n", ns, "link", "set", link, "mtu", str(topo.LINK_DEFAULT_MTU)], check=False)


