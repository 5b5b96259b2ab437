"""Per-node host configuration: fabric addresses (netplan), RoCE QoS, and the firewall."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import yaml

from sparkctl.render import common as c
from sparkctl.render import fabric, router

if TYPE_CHECKING:  # annotations only: render never imports the model at run time
    from sparkctl.model.cluster import Cluster, Node


def netplan(cluster: Cluster, node: Node) -> str:
    """Static addresses and MTU on every fabric port; never the management iface.

    On a switch those are both PCIe halves of the cabled port; on a triangle, a ring or a pair the
    port of each cable (each half of it that is addressed), and the file says which cable each
    interface is. No gateway, no routes, no DHCP: the fabric is one L2 segment per subnet (one
    cable, node to node) and the default route stays on the management network.
    """
    ethernets: dict[str, Any] = {}
    for port in node.fabric_ports:
        ethernets[str(port.netdev)] = {
            "addresses": [str(port.address)],
            "mtu": cluster.fabric.mtu,
            "dhcp4": False,
            "dhcp6": False,
            "accept-ra": False,
            "link-local": [],
            # Boot does not wait for the fabric (the management network is what matters there).
            "optional": True,
        }
    doc = {"network": {"version": 2, "renderer": "networkd", "ethernets": ethernets}}
    body = yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)
    return c.header(f"fabric addresses of {node.name} (mode 0600)") + _cables_note(cluster, node) + body


def _cables_note(cluster: Cluster, node: Node) -> str:
    """On a cabled topology, one comment line per port: the cable it is and what is at its other end."""
    if not fabric.cabled(cluster):
        return ""
    lines = [f"# {cluster.topology}: node to node, every subnet is one cable (or one PCIe half of it).\n"]
    links = fabric.node_links(cluster, node)
    for port in node.fabric_ports:
        ip = str(port.ip)
        link = next((lk for lk in links if any(e.node == node.name and e.ip == ip for e in lk.ends)), None)
        if link is None:
            continue
        others = ", ".join(f"{e.node} {e.netdev} ({e.ip})" for e in link.ends if e.node != node.name)
        lines.append(f"# {port.netdev}: {link.subnet}, the cable to {others}\n")
    return "".join(lines)


def qos_script(cluster: Cluster, node: Node) -> str:
    """Host RoCE QoS: trust DSCP, 26 -> priority 3 and 48 -> 6, PFC on priority 3 only, ToS 106.

    Idempotent. With an interface argument it configures that port only (the link-up hook).
    Uses mlnx_qos when the driver tools are installed, else iproute2's dcb.
    """
    pairs = " ".join(f"{p.netdev}:{p.hca}" for p in node.fabric_ports)
    pfc = ",".join("1" if prio == c.ROCE_PRIO else "0" for prio in range(8))
    return f"""#!/bin/sh
{c.header(f"RoCE QoS of the fabric ports of {node.name}").rstrip()}
# RoCE data (DSCP {c.ROCE_DSCP}) -> priority {c.ROCE_PRIO} with PFC;
# CNP (DSCP {c.CNP_DSCP}) -> priority {c.CNP_PRIO}; RDMA-CM traffic class {c.ROCE_TOS}.
# Must match the switch (`sparkctl switch show`).
set -eu

PORTS="{pairs}"
ONLY="${{1:-}}"

configure_port() {{
    dev="$1"
    hca="$2"
    if command -v mlnx_qos >/dev/null 2>&1; then
        mlnx_qos -i "$dev" --trust dscp
        mlnx_qos -i "$dev" --dscp2prio set,{c.ROCE_DSCP},{c.ROCE_PRIO}
        mlnx_qos -i "$dev" --dscp2prio set,{c.CNP_DSCP},{c.CNP_PRIO}
        mlnx_qos -i "$dev" --pfc {pfc}
    else
        dcb apptrust set dev "$dev" order dscp
        dcb app replace dev "$dev" dscp-prio {c.ROCE_DSCP}:{c.ROCE_PRIO} {c.CNP_DSCP}:{c.CNP_PRIO}
        dcb pfc set dev "$dev" prio-pfc all:off {c.ROCE_PRIO}:on
    fi
    # Default ToS of RDMA-CM connections (what cma_roce_tos sets), through configfs.
    cm=/sys/kernel/config/rdma_cm
    if [ ! -d "$cm" ]; then
        modprobe configfs 2>/dev/null || true
        mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config
        modprobe rdma_cm 2>/dev/null || true
    fi
    mkdir -p "$cm/$hca"
    echo {c.ROCE_TOS} > "$cm/$hca/ports/1/default_roce_tos"
    rmdir "$cm/$hca" 2>/dev/null || true
    echo "sparkctl-roce-qos: $dev ($hca) trust dscp, pfc prio {c.ROCE_PRIO}, tos {c.ROCE_TOS}"
}}

for pair in $PORTS; do
    dev="${{pair%%:*}}"
    hca="${{pair#*:}}"
    if [ -n "$ONLY" ] && [ "$ONLY" != "$dev" ]; then
        continue
    fi
    configure_port "$dev" "$hca"
done
"""


def qos_unit(cluster: Cluster, node: Node) -> str:
    devices = " ".join(f"sys-subsystem-net-devices-{p.netdev}.device" for p in node.fabric_ports)
    return f"""{c.header(f"applies RoCE QoS on {node.name} at boot").rstrip()}
[Unit]
Description=sparkctl RoCE QoS of the fabric ports (PFC priority {c.ROCE_PRIO}, ToS {c.ROCE_TOS})
After=network.target {devices}
Wants={devices}

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart={c.QOS_SCRIPT}

[Install]
WantedBy=multi-user.target
"""


def qos_link_hook(cluster: Cluster, node: Node) -> str:
    """networkd-dispatcher hook: a link flap resets DCB state, so re-apply on every link up."""
    names = "|".join(str(p.netdev) for p in node.fabric_ports)
    return f"""#!/bin/sh
{c.header(f"re-applies RoCE QoS when a fabric port of {node.name} comes up").rstrip()}
case "${{IFACE:-}}" in
    {names}) exec {c.QOS_SCRIPT} "$IFACE" ;;
esac
exit 0
"""


def _set(items: list[str]) -> str:
    return "{ " + ", ".join(items) + " }"


def firewall(cluster: Cluster, node: Node) -> str:
    """nftables: SSH from management, the API from api_allow, rank traffic from the peers only.

    Rank traffic (rendezvous, NCCL and Gloo bootstrap, SGLang's broadcaster) uses ephemeral TCP
    ports besides the fixed ones, so it is allowed by source: the fabric subnets (also used for
    staging), plus the nodes' management addresses when the ranks bootstrap over management. On a
    cabled topology (triangle, ring, pair) the fabric subnets are those of the node's own cables.
    RoCE itself bypasses the kernel and is not filtered here.
    """
    peers = fabric.peer_subnets(cluster, node)
    peer_note = "the fabric subnets"
    if fabric.cabled(cluster):
        # Node to node, only the subnets of this node's own cables reach it.
        peer_note = f"the subnets of {node.name}'s cables"
    if cluster.fabric.bootstrap_over == "mgmt":
        peers += [str(n.mgmt_ip) for n in cluster.nodes]
        peer_note += " and the nodes' management addresses"
    api = [str(s) for s in cluster.api_allow]
    admins = [str(cluster.mgmt.subnet), *(str(s) for s in cluster.mgmt.admin_sources)]
    fabric_ifs = [f'"{p.netdev}"' for p in node.fabric_ports]
    ports = cluster.ports
    # The API and, on a site with sparkctl_router, the router in front of it (render.router).
    api_rules = "\n        ".join(router.api_rules(cluster, node, ports.api))
    return f"""#!/usr/sbin/nft -f
{c.header(f"firewall of {node.name}").rstrip()}
# Loaded by {c.FIREWALL_UNIT_NAME}; only the table {c.FIREWALL_TABLE} is touched.
table {c.FIREWALL_TABLE}
delete table {c.FIREWALL_TABLE}

table {c.FIREWALL_TABLE} {{
    set rank_peers {{
        type ipv4_addr
        flags interval
        auto-merge
        # Rank traffic from {peer_note}: dist-init {ports.dist_init},
        # NCCL test {ports.nccl_test}, and NCCL/Gloo/SGLang ephemeral ports.
        elements = {_set(peers)}
    }}

    set api_clients {{
        type ipv4_addr
        flags interval
        auto-merge
        elements = {_set(api)}
    }}

    set admin_sources {{
        type ipv4_addr
        flags interval
        auto-merge
        # SSH: the management subnet and sparkctl_mgmt.admin_sources; provision adds the
        # address the controller connects from ({c.FIREWALL_DROPIN_DIR}/controller.nft).
        elements = {_set(admins)}
    }}

    chain input {{
        type filter hook input priority filter; policy drop;
        ct state established,related accept
        ct state invalid drop
        iif "lo" accept
        meta l4proto icmp accept
        # ICMPv6 by number: minimal hosts have no /etc/protocols to resolve its name.
        meta l4proto 58 accept
        # SSH on the node's own port, from the admin sources only.
        ip saddr @admin_sources tcp dport {node.ssh_port} accept
        # The node exporter (Prometheus), from the management subnet and the admin sources.
        ip saddr @admin_sources tcp dport {ports.exporter} accept
        {api_rules}
        # Nothing but peers on the fabric ports.
        iifname {_set(fabric_ifs)} ip saddr != @rank_peers drop
        ip saddr @rank_peers meta l4proto {{ tcp, udp }} accept
    }}
}}

# Site additions written on the node (a glob: none is fine), e.g. the controller's address.
include "{c.FIREWALL_DROPIN_DIR}/*.nft"
"""


def firewall_unit(cluster: Cluster, node: Node) -> str:
    return f"""{c.header(f"loads the sparkctl firewall table on {node.name}").rstrip()}
[Unit]
Description=sparkctl firewall (table {c.FIREWALL_TABLE})
Wants=network-pre.target
Before=network-pre.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/sbin/nft -f {c.FIREWALL_FILE}
ExecStop=/usr/sbin/nft delete table {c.FIREWALL_TABLE}

[Install]
WantedBy=multi-user.target
"""
