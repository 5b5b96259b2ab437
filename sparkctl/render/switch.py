"""Switch configuration for the RoCE fabric: RouterOS 7.23+, Cumulus NVUE, or the lab's Linux switch.

All three give the same fabric: every Spark port forced to 200G (not the lab), jumbo MTU above the
host MTU, one L2 domain, RoCE (DSCP 26) lossless on traffic class 3 with PFC and ECN, and CNPs
(DSCP 48) in a strict-priority class 6. The host side is `render.host.qos_script`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkctl.errors import InputError
from sparkctl.render import common as c

if TYPE_CHECKING:  # annotations only: render never imports the model at run time
    from sparkctl.model.cluster import Cluster, Switch


BRIDGE = "sparkctl-fabric"
PORT_SPEED = "200G-baseCR4"
PFC = f"sparkctl-pfc{c.ROCE_PRIO}"
# How the RouterOS script reports a port it took out of another bridge (spark_switch reads it back).
MOVED = "sparkctl: moving "


# The priority each switch configuration makes lossless for RoCE data (DSCP 26): PFC on it, ECN on
# its queue. RouterOS: the sparkctl-roce profile (DSCP 26 -> class 3) and sparkctl-pfc3; NVUE:
# `qos roce mode lossless`, Cumulus's RoCE default (DSCP 26 -> switch priority 3 with PFC). The lab's
# Linux bridge gets MTU and link state only: no lossless class.
LOSSLESS_PRIORITY: dict[str, int | None] = {"routeros": c.ROCE_PRIO, "nvue": c.ROCE_PRIO, "linux": None}


def lossless_priority(cluster: Cluster) -> int | None:
    """The priority the cluster's switch configuration makes lossless for RoCE data (DSCP
    ``ROCE_DSCP``); None with no switch, or one whose configuration has no lossless class."""
    if cluster.switch is None:
        return None
    return LOSSLESS_PRIORITY[cluster.switch.type]


def the_switch(cluster: Cluster) -> Switch:
    """The cluster's switch: each renderer below is for a cluster that has one."""
    if cluster.switch is None:
        raise InputError(f"cluster {cluster.name} has no switch to configure",
                         hint="add it to the inventory's switches group (sparkctl_switch_type, _mtu, _ports)")
    return cluster.switch


def switch_ports(cluster: Cluster) -> list[tuple[str, list[str]]]:
    """Switch ports in rank order, each with the nodes/halves cabled to it (both halves share one)."""
    seen: dict[str, list[str]] = {}
    sw = the_switch(cluster)
    for node in cluster.nodes:
        mapping = sw.ports.get(node.name, {})
        for port in node.fabric_ports:
            name = mapping.get(str(port.netdev))
            if name is None:
                continue
            users = seen.setdefault(name, [])
            if node.name not in users:
                users.append(node.name)
    return list(seen.items())


def _ros(text: str) -> str:
    """A RouterOS string literal: every name that reaches the device is quoted (and escaped)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'


def _ensure(match: str, props: str) -> str:
    """RouterOS: add an entry unless one matching ``match`` exists (so the file imports twice)."""
    return f":if ([:len [find {match}]] = 0) do={{ add {props} }}\n"


def _move_out(port: str) -> str:
    """RouterOS (in /interface bridge port): take ``port`` out of every bridge but the fabric's,
    saying which (the line starts with MOVED, which the switch role reads back)."""
    said = _ros(f"{MOVED}{port} out of bridge ")
    return (f":foreach p in=[find where interface={_ros(port)} and bridge!={BRIDGE}] do={{ "
            f":put ({said} . [get $p bridge]); remove $p }}\n")


def routeros(cluster: Cluster) -> str:
    sw = the_switch(cluster)
    l2mtu = sw.l2mtu or sw.mtu
    ports = switch_ports(cluster)
    out = [
        c.header(f"RoCE fabric of {cluster.name} on {sw.name} (RouterOS >= 7.23)"),
        "# Import with `/import file-name=sparkctl-fabric.rsc`; safe to import again.\n",
        "\n# Spark ports: forced 200G (autonegotiation may settle at 100G), L2MTU before MTU.\n",
        "/interface ethernet\n",
    ]
    for name, users in ports:
        note = _ros("sparkctl: " + ", ".join(users))
        out.append(f"set {_ros(name)} auto-negotiation=no speed={PORT_SPEED} comment={note}\n")
        out.append(f"set {_ros(name)} l2mtu={l2mtu}\n")
        out.append(f"set {_ros(name)} mtu={sw.mtu}\n")
    out += [
        "\n# One bridge, hardware-offloaded: a single L2 domain for the fabric subnets.\n",
        "/interface bridge\n",
        _ensure(f"name={BRIDGE}", f'name={BRIDGE} protocol-mode=none comment="sparkctl RoCE fabric"'),
        "# A Spark port already in another bridge (the default one holds every port out of the box)\n",
        "# is moved out of it, never left there: that would join the fabric to the management LAN.\n",
        "# Each move is reported (`sparkctl: moving ...`); sparkctl applies this under a revert armed\n",
        "# on the switch, in case the port carried management.\n",
        "/interface bridge port\n",
    ]
    for name, _ in ports:
        out.append(_move_out(name))
        out.append(_ensure(f"interface={_ros(name)} bridge={BRIDGE}",
                           f"bridge={BRIDGE} interface={_ros(name)} hw=yes"))
    out += [
        "/interface bridge settings\nset use-ip-firewall=no\n",
        f"\n# QoS: DSCP {c.ROCE_DSCP} (RoCE) -> class {c.ROCE_PRIO} lossless, DSCP {c.CNP_DSCP} (CNP) -> "
        f"class {c.CNP_PRIO} strict.\n",
        "/interface ethernet switch qos profile\n",
        _ensure("name=sparkctl-roce", f"name=sparkctl-roce traffic-class={c.ROCE_PRIO}"),
        _ensure("name=sparkctl-cnp", f"name=sparkctl-cnp traffic-class={c.CNP_PRIO}"),
        "/interface ethernet switch qos map ip\n",
        _ensure(f"dscp={c.ROCE_DSCP}", f"dscp={c.ROCE_DSCP} profile=sparkctl-roce"),
        _ensure(f"dscp={c.CNP_DSCP}", f"dscp={c.CNP_DSCP} profile=sparkctl-cnp"),
        "/interface ethernet switch qos tx-manager queue\n",
        f"set [find traffic-class={c.ROCE_PRIO}] schedule=high-priority-group weight=1 ecn=yes\n",
        f"set [find traffic-class={c.CNP_PRIO}] schedule=strict-priority\n",
        "/interface ethernet switch qos priority-flow-control\n",
        _ensure(f"name={PFC}", f"name={PFC} traffic-class={c.ROCE_PRIO} rx=yes tx=yes"),
        "/interface ethernet switch qos port\n",
    ]
    for name, _ in ports:
        out.append(
            f"set {_ros(name)} trust-l3=keep pfc={PFC} egress-rate-queue{c.ROCE_PRIO}=200G\n"
        )
    out += [
        "/interface ethernet switch\nset [find] qos-hw-offloading=yes\n",
        "# Advertise the PFC settings to the hosts (DCBX over LLDP).\n",
        "/ip neighbor discovery-settings\nset lldp-dcbx=yes\n",
    ]
    return "".join(out)


def nvue(cluster: Cluster) -> str:
    sw = the_switch(cluster)
    out = [
        c.header(f"RoCE fabric of {cluster.name} on {sw.name} (Cumulus Linux, NVUE)"),
        "# Run line by line on the switch, or through nvidia.nvue; `nv config apply` commits.\n",
    ]
    for name, users in switch_ports(cluster):
        q = c.shell_command([name])
        note = c.shell_command([f"sparkctl: {', '.join(users)}"])
        out += [
            f"nv set interface {q} description {note}\n",
            f"nv set interface {q} link speed 200G\n",
            f"nv set interface {q} link mtu {sw.mtu}\n",
            f"nv set interface {q} bridge domain br_default\n",
        ]
    out += [
        f"# Lossless RoCE: DSCP {c.ROCE_DSCP} -> priority {c.ROCE_PRIO} with PFC and ECN, "
        f"CNP DSCP {c.CNP_DSCP} -> priority {c.CNP_PRIO}.\n",
        "nv set qos roce enable on\n",
        "nv set qos roce mode lossless\n",
        "nv config apply --assume-yes\n",
    ]
    return "".join(out)


def linux(cluster: Cluster) -> str:
    sw = the_switch(cluster)
    out = [
        "#!/bin/sh\n",
        c.header(f"fabric ports of {cluster.name} on the lab switch {sw.name}"),
        "set -eu\n",
    ]
    for name, users in switch_ports(cluster):
        out.append(f"# {', '.join(users)}\n")
        out.append(f"ip link set dev {c.shell_command([name])} mtu {sw.mtu}\n")
        out.append(f"ip link set dev {c.shell_command([name])} up\n")
    return "".join(out)


RENDERERS = {"routeros": routeros, "nvue": nvue, "linux": linux}
FILE_NAMES = {
    "routeros": "sparkctl-fabric.rsc",
    "nvue": "sparkctl-fabric.nvue",
    "linux": "sparkctl-fabric.sh",
}


def switch_config(cluster: Cluster) -> str:
    """The candidate configuration for the cluster's switch ('' when there is none)."""
    if cluster.switch is None:
        return ""
    return RENDERERS[cluster.switch.type](cluster)
