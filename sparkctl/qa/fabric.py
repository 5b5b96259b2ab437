"""The verdict of `sparkctl check fabric`, from what the read-only probe playbook saw.

Pure: ``judge(cluster, probes, switch_mtus, unreachable)`` turns per-node probe results (the
``sparkctl_fabric_probe`` module's output) into port rows, pair rows, problems that name the node,
port and pair, and the checks that could not run — each with the reason, never reported as "ok".
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from ipaddress import ip_address
from typing import TYPE_CHECKING, Any

# The NCCL all-reduce verdict (thresholds included) lives with the script that measures it.
from sparkctl.qa.nccl_allreduce import verdict as nccl_verdict
from sparkctl.render import fabric

if TYPE_CHECKING:
    from sparkctl.model import Cluster

# Link speed a ConnectX-7 200G port should report per PCIe half on a Spark (ethtool, Mb/s).
EXPECTED_SPEED_MBPS = 200_000
# ib_write_bw, one QP, 64 KiB messages: ~98 Gb/s per PCIe half (196 Gb/s per host pair with both
# halves, measured on CRS812 fabrics). Below this per half, the link is degraded.
IB_WRITE_BW_MIN_HALF_GBITS = 80.0
_LOSS_COUNTERS = ("discard", "out_of_buffer", "drop")
_PAUSE_COUNTERS = ("pause", "pfc", "prio3")


@dataclass
class PortRow:
    node: str
    netdev: str
    switch_port: str | None
    state: str
    speed_mbps: int | None
    mtu: int | None
    addresses: list[str]
    gid_index: int | None
    ok: bool
    note: str = ""


@dataclass
class PairRow:
    src: str
    dst: str
    half: int
    netdev: str
    dst_ip: str
    ok: bool
    detail: str
    kind: str = "ok"        # ok · lossy · mtu · unreachable (the probe's classification)
    loss_pct: float = 0.0
    dst_netdev: str = ""    # the peer's port (the matrix's; empty from a probe that does not say)
    subnet: str = ""        # the link the ping crossed (on a triangle, ring or pair: one cable)


@dataclass
class Verdict:
    ports: list[PortRow] = field(default_factory=list)
    pairs: list[PairRow] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    passed: list[str] = field(default_factory=list)
    # Node pairs with no direct path that the topology expects (a ring's opposite nodes): neither
    # pinged nor failed, each with the reason.
    absent: list[str] = field(default_factory=list)
    absent_pairs: list[tuple[str, str]] = field(default_factory=list)
    # The matrix the pings follow: (src, dst) -> the source port indexes pinged from (the table's
    # cells; a pair the matrix leaves out has no direct path).
    expected: dict[tuple[str, str], list[int]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "problems": self.problems,
            "skipped": self.skipped,
            "passed": self.passed,
            "absent": self.absent,
            "ports": [vars(p) for p in self.ports],
            "pairs": [vars(p) for p in self.pairs],
        }


def _switch_port(cluster: Cluster, node: str, netdev: str) -> str | None:
    sw = cluster.switch
    if sw is None:
        return None
    port: str | None = sw.ports.get(node, {}).get(netdev)
    return port


def _where(cluster: Cluster, node: str, netdev: str) -> str:
    sp = _switch_port(cluster, node, netdev)
    return f"{node} {netdev}" + (f" (switch port {sp})" if sp else "")


def judge(
    cluster: Cluster,
    probes: dict[str, dict[str, Any]],
    switch_mtus: dict[str, int | None] | None = None,
    unreachable: dict[str, str] | None = None,
    rdma: dict[str, dict[str, Any]] | None = None,
) -> Verdict:
    """Judge the fabric from per-node probe results (node -> module result).

    ``rdma`` holds, per node, the hardware measurements of playbooks/check_fabric.yml (ib_write_bw
    per pair, counters before/after, NCCL all-reduce); absent where the hardware is absent.
    """
    v = Verdict()
    mtu = int(cluster.fabric.mtu)
    dark = dict(unreachable or {})
    rank = {n.name: n.rank for n in cluster.nodes}
    for name in sorted(dark, key=lambda n: (rank.get(n, len(rank)), n)):
        why = dark[name]  # the node's one line (ansible.failures), or a reason without its name
        v.problems.append(f"{why} (its fabric was not checked)" if why.startswith(f"{name} ")
                          else f"{name}: did not answer, its fabric was not checked: {why}")
    # Only the nodes that answered say anything about the fabric: a node that did not answer is
    # neither missing its RDMA devices nor the culprit of the pings to it.
    answered = [n.name for n in cluster.nodes if n.name in probes and n.name not in dark]
    if not answered:
        v.skipped.append("every fabric check: skipped: no node answered")
        return v

    any_rdma = any(bool(p.get("rdma")) for p in probes.values())
    # --- ports ----------------------------------------------------------------------------------
    for node in cluster.nodes:
        res = probes.get(node.name)
        if res is None:
            continue
        by_dev = {p["netdev"]: p for p in res.get("ports", [])}
        for port in node.fabric_ports:
            info = by_dev.get(str(port.netdev), {"present": False})
            where = _where(cluster, node.name, str(port.netdev))
            notes: list[str] = []
            if not info.get("present"):
                v.problems.append(f"{where}: interface not found")
                notes.append("absent")
            else:
                if not info.get("carrier") or str(info.get("state")).upper() not in ("UP", "UNKNOWN"):
                    v.problems.append(f"{where}: link down (state {info.get('state')}, no carrier)")
                    notes.append("link down")
                if info.get("mtu") != mtu:
                    v.problems.append(
                        f"{where}: MTU {info.get('mtu')}, expected {mtu} (run `sparkctl provision`)"
                    )
                    notes.append(f"MTU {info.get('mtu')}")
                if str(port.address) not in (info.get("addresses") or []):
                    has = info.get("addresses") or "none"
                    v.problems.append(f"{where}: address {port.address} missing (has {has})")
                    notes.append("address missing")
                speed = info.get("speed_mbps")
                if info.get("rdma") and speed is not None and speed < EXPECTED_SPEED_MBPS:
                    v.problems.append(
                        f"{where}: link at {speed // 1000}G, expected {EXPECTED_SPEED_MBPS // 1000}G "
                        "(force 200G-baseCR4 with autonegotiation off on the switch port; "
                        "reseat or reboot if it persists)"
                    )
                    notes.append("slow link")
            v.ports.append(
                PortRow(
                    node=node.name,
                    netdev=str(port.netdev),
                    switch_port=_switch_port(cluster, node.name, str(port.netdev)),
                    state=str(info.get("state", "absent")),
                    speed_mbps=info.get("speed_mbps"),
                    mtu=info.get("mtu"),
                    addresses=list(info.get("addresses") or []),
                    gid_index=info.get("gid_index"),
                    ok=not notes,
                    note=", ".join(notes),
                )
            )

    # --- switch port MTUs (Linux switch) ---------------------------------------------------------
    if switch_mtus:
        owners: dict[str, list[str]] = {}
        sw = cluster.switch
        if sw is not None:
            for node_name, mapping in sw.ports.items():
                for netdev, sp in mapping.items():
                    owners.setdefault(sp, []).append(f"{node_name} {netdev}")
        # The switch's own MTU (above the host's); a switchless site reports the host MTU.
        want = sw.mtu if sw is not None else mtu
        for sp, value in sorted(switch_mtus.items()):
            if value is None:
                v.problems.append(f"switch port {sp}: not found on the switch")
            elif value < mtu:
                v.problems.append(
                    f"switch port {sp} ({', '.join(owners.get(sp, ['?']))}): MTU {value} is below the host "
                    f"MTU {mtu} — jumbo frames are dropped there (set it to {want}: "
                    "`sparkctl provision --tags switch`)"
                )

    # --- jumbo pings, every ordered pair over every half -----------------------------------------
    size = mtu - 28
    for node in cluster.nodes:
        res = probes.get(node.name)
        if res is None:
            continue
        for ping in res.get("pings", []):
            v.pairs.append(
                PairRow(
                    src=node.name,
                    dst=ping["peer"],
                    half=int(ping["index"]),
                    netdev=ping["netdev"],
                    dst_ip=ping["dst"],
                    ok=bool(ping["ok"]),
                    detail=ping.get("detail", ""),
                    kind=str(ping.get("kind") or ("ok" if ping["ok"] else "unreachable")),
                    loss_pct=float(ping.get("loss_pct") or 0.0),
                    dst_netdev=str(ping.get("dst_netdev") or ""),
                    subnet=str(ping.get("subnet") or _shared_subnet(cluster, ping)),
                )
            )
    _judge_paths(cluster, v)
    allowed = float(cluster.fabric.max_loss_pct)
    for p in v.pairs:
        if p.kind == "lossy" and p.loss_pct <= allowed:
            v.passed.append(f"jumbo ping {p.src} {p.netdev} -> {p.dst}: lossy but within the allowed "
                            f"{allowed:g}%: {p.detail}")
    for name in [n for n in dark if any(p.dst == n for p in v.pairs)]:
        v.skipped.append(f"jumbo pings to {name}: skipped: it did not answer")
    failing = [p for p in v.pairs if not p.ok and not (p.kind == "lossy" and p.loss_pct <= allowed)
               and p.dst not in dark]
    port_mtu = {
        (name, str(port.get("netdev"))): port.get("mtu")
        for name, res in probes.items() for port in res.get("ports", []) if isinstance(port, dict)
    }
    if fabric.cabled(cluster):
        _judge_cables(cluster, v, failing, size, port_mtu, allowed)
        failing_halves: list[int] = []
    else:
        failing_halves = sorted({p.half for p in failing})
    for half in failing_halves:
        bad = [p for p in failing if p.half == half]
        total = [p for p in v.pairs if p.half == half]
        blame: Counter[str] = Counter()
        for p in bad:
            blame[p.src] += 1
            blame[p.dst] += 1
        # A node whose every pair on this half fails, while the other pairs pass, is the culprit.
        culprits = []
        for name, n in blame.most_common():
            involving = [p for p in total if name in (p.src, p.dst)]
            if n == len(involving) and len(bad) == n and involving:
                culprits.append(name)
        for p in bad:
            netdev = p.netdev
            what = f"jumbo ping ({size} B, DF) {p.src} {netdev} -> {p.dst} {p.dst_ip}"
            v.problems.append(_ping_problem(cluster, p, what, port_mtu, allowed,
                                            "then the switch ports between them"))
        if culprits:
            name = culprits[0]
            node = cluster.node(name)
            netdev = str(node.fabric_ports[half].netdev) if half < len(node.fabric_ports) else "?"
            v.problems.append(
                f"likely culprit: {_where(cluster, name, netdev)} — "
                "every jumbo ping to or from it on this half fails"
            )
    checked = [p for p in v.pairs if p.dst not in dark]
    if checked and not failing:
        over = ("pings over every cable, both directions" if fabric.cabled(cluster)
                else "ordered pairs over every half")
        v.passed.append(f"jumbo ping ({size} B, DF): all {len(checked)} {over}"
                        + (" between the nodes that answered" if dark else ""))

    # --- RoCE v2 GID index -----------------------------------------------------------------------
    if not any_rdma:
        hcas = sorted({str(p.hca) for n in cluster.nodes for p in n.fabric_ports})
        on = ("every node" if len(answered) == len(cluster.nodes)
              else f"{', '.join(answered)}, the nodes that answered")
        why = f"no RDMA device ({', '.join(hcas)} absent on {on})"
        v.skipped.append(f"RoCE v2 GID index: skipped: {why}")
        v.skipped.append(f"ib_write_bw per pair: skipped: {why}")
        v.skipped.append(f"NCCL all-reduce bus bandwidth: skipped: {why}")
        v.skipped.append(f"PFC losslessness (pause/discard counters under load): skipped: {why}")
        return v
    gids: dict[int, set[int | None]] = {}
    for row in v.ports:
        ports = cluster.node(row.node).fabric_ports
        idx = next(i for i, p in enumerate(ports) if str(p.netdev) == row.netdev)
        gids.setdefault(idx, set()).add(row.gid_index)
        if row.gid_index is None:
            res = probes.get(row.node, {})
            err = next((p.get("gid_error") for p in res.get("ports", []) if p["netdev"] == row.netdev), "")
            v.problems.append(f"{_where(cluster, row.node, row.netdev)}: no RoCE v2 GID ({err})")
    for idx, values in sorted(gids.items()):
        known = {g for g in values if g is not None}
        if len(known) > 1:
            v.problems.append(
                f"RoCE v2 GID index differs across nodes on half {idx}: {sorted(known)} — "
                "set NCCL_IB_GID_INDEX per node or fix the address order"
            )
        elif known:
            v.passed.append(f"RoCE v2 GID index common on half {idx}: {known.pop()}")
    if not rdma:
        why = "not every node has its RDMA devices, so no load was run"
        v.skipped.append(f"ib_write_bw per pair: skipped: {why}")
        v.skipped.append(f"NCCL all-reduce bus bandwidth: skipped: {why}")
        v.skipped.append(f"PFC losslessness (pause/discard counters under load): skipped: {why}")
        return v
    _judge_rdma(cluster, v, rdma)
    return v


def _ping_problem(cluster: Cluster, p: PairRow, what: str, port_mtu: dict[tuple[str, str], Any],
                  allowed: float, beyond: str) -> str:
    """One failed jumbo ping, worded by the probe's classification."""
    if p.kind == "mtu":
        peer_dev = p.dst_netdev
        if not peer_dev:
            ports = cluster.node(p.dst).fabric_ports
            peer_dev = str(ports[p.half].netdev) if p.half < len(ports) else "?"
        want = int(cluster.fabric.mtu)
        return (f"MTU broken: {what}: {p.detail}; host MTU {p.src} {p.netdev}="
                f"{port_mtu.get((p.src, p.netdev), '?')}, {p.dst} {peer_dev}="
                f"{port_mtu.get((p.dst, peer_dev), '?')} (want {want}), {beyond}")
    if p.kind == "lossy":
        return f"lossy: {what}: {p.detail}, above the {allowed:g}% sparkctl_fabric.max_loss_pct allows"
    return f"unreachable: {what}: {p.detail}"


def _shared_subnet(cluster: Cluster, ping: dict[str, Any]) -> str:
    """The fabric subnet holding both ends of a ping the probe did not label ('' where none does)."""
    try:
        src, dst = ip_address(str(ping.get("src"))), ip_address(str(ping.get("dst")))
    except ValueError:
        return ""
    return next((str(net) for net in cluster.fabric.subnets if src in net and dst in net), "")


def _judge_paths(cluster: Cluster, v: Verdict) -> None:
    """The node pairs with no direct path: expected on a ring (said, not failed), a problem anywhere
    else; and a ping the probe sent across one (a stale probe) is a problem too."""
    for node in cluster.nodes:
        for ping in fabric.pings(cluster, node):
            v.expected.setdefault((node.name, ping.peer), []).append(ping.index)
    for gap in fabric.no_direct_path(cluster):
        a, b = gap.nodes
        if gap.expected:
            v.absent.append(f"{a} <-> {b}: no direct path, as expected: {gap.why}")
            v.absent_pairs.append((a, b))
        else:
            v.problems.append(f"{a} <-> {b}: no direct path: {gap.why} (check sparkctl_fabric_ports' "
                              "addresses against sparkctl_fabric.subnets)")
        crossed = [p for p in v.pairs if {p.src, p.dst} == {a, b}]
        if crossed and gap.expected:
            v.problems.append(f"{a} <-> {b}: {len(crossed)} ping(s) sent where no cable runs: the probe did "
                              "not follow the rendered matrix (re-run with this sparkctl's playbooks)")


def _judge_cables(cluster: Cluster, v: Verdict, failing: list[PairRow], size: int,
                  port_mtu: dict[tuple[str, str], Any], allowed: float) -> None:
    """Failed pings on a cabled topology, per cable. One cable whose every ping fails in both
    directions while the others pass is the likely culprit (the cable or its two ports); failures on
    several cables that all involve one node, every ping of which fails, point at that node."""
    order = {link.subnet: k for k, link in enumerate(fabric.links(cluster))}
    for p in sorted(failing, key=lambda p: order.get(p.subnet, len(order))):
        what = f"jumbo ping ({size} B, DF) {p.src} {p.netdev} -> {p.dst} {p.dst_netdev} {p.dst_ip}"
        v.problems.append(_ping_problem(cluster, p, what, port_mtu, allowed, "then the cable"))
    cables = {p.subnet for p in failing}
    if len(cables) == 1 and cables <= set(order):
        link = next(link for link in fabric.links(cluster) if link.subnet in cables)
        total = [p for p in v.pairs if p.subnet == link.subnet]
        if len(failing) == len(total) and len(link.ends) == 2:
            a, b = link.ends
            v.problems.append(
                f"likely culprit: the cable {a.node} {a.netdev} - {b.node} {b.netdev} ({link.subnet}): "
                "every jumbo ping over it fails in both directions (reseat or replace it; check both "
                "ports' link)"
            )
        return
    for node in cluster.nodes:
        involving = [p for p in v.pairs if node.name in (p.src, p.dst)]
        alone = all(node.name in (p.src, p.dst) for p in failing)
        if involving and alone and all(p in failing for p in involving):
            v.problems.append(f"likely culprit: {node.name} — every jumbo ping to or from it fails, on "
                              "every one of its cables")
            return


def _judge_rdma(cluster: Cluster, v: Verdict, rdma: dict[str, dict[str, Any]]) -> None:
    # ib_write_bw, per pair and half
    pairs = 0
    for node, m in sorted(rdma.items()):
        for item in m.get("ib_write_bw") or []:
            peer = item.get("peer")
            total = 0.0
            for line in item.get("halves") or []:
                parts = str(line).split()
                if len(parts) < 3:
                    continue
                netdev, bw = parts[1], float(parts[2]) if _is_number(parts[2]) else 0.0
                total += bw
                if bw < IB_WRITE_BW_MIN_HALF_GBITS:
                    v.problems.append(
                        f"ib_write_bw {_where(cluster, node, netdev)} -> {peer}: {bw:.1f} Gb/s, expected "
                        "about 98 per half (degraded link: check speed/PCIe width, reseat, reboot both nodes)"
                    )
            pairs += 1
            v.passed.append(f"ib_write_bw {node} -> {peer}: {total:.1f} Gb/s over both halves")
    if pairs == 0:
        v.problems.append("ib_write_bw: no measurement came back (is perftest installed on every node?)")
    # losslessness: discards must not grow under load; pause frames show PFC at work
    lost: list[str] = []
    paused = 0
    for node, m in sorted(rdma.items()):
        before = m.get("counters_before") or {}
        after = m.get("counters_after") or {}
        for netdev, counters in sorted(after.items()):
            for key, value in counters.items():
                delta = int(value) - int((before.get(netdev) or {}).get(key, value))
                if delta <= 0:
                    continue
                low = key.lower()
                if any(k in low for k in _LOSS_COUNTERS):
                    lost.append(f"{_where(cluster, node, netdev)} {key} +{delta}")
                elif any(k in low for k in _PAUSE_COUNTERS):
                    paused += delta
    if lost:
        v.problems.append(
            "not lossless under load: " + "; ".join(lost) + " (check PFC on priority 3 end to end)"
        )
    else:
        v.passed.append(f"lossless under load: no discards; pause/PFC counters +{paused}")
    # NCCL all-reduce bus bandwidth (rank 0 reports)
    head = cluster.head.name
    nccl = (rdma.get(head) or {}).get("nccl") or {}
    if not nccl:
        v.skipped.append("NCCL all-reduce bus bandwidth: skipped: disabled (spark_fabric_check_nccl=false)")
        return
    out = nccl.get("out") or {}
    busbw = out.get("busbw_gbps") if isinstance(out, dict) else None
    if busbw is None:
        err = " | ".join(nccl.get("err") or []) or f"exit {nccl.get('rc')}"
        v.problems.append(f"NCCL all-reduce did not finish on {head}: {err}")
        return
    status, reason = nccl_verdict(float(busbw))
    (v.passed if status == "ok" else v.problems).append(f"NCCL all-reduce: {status}: {reason}")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
