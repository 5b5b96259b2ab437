#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Read-only probe of a node's RoCE fabric: links, MTU, addresses, RoCE v2 GIDs, jumbo pings.

Standard library only. It changes nothing: it reads sysfs, `ip` and `ethtool -S`, and sends pings.
Links, addresses and GIDs come from the node-side readers sparkctl's status probe uses too
(``sparkctl.nodeside.links`` and ``.rdma``, shipped as module_utils).
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: sparkctl_fabric_probe
short_description: Probe fabric ports (link, speed, MTU, GID) and jumbo-ping peers
description:
  - For every fabric port, reports link state, speed, MTU and IPv4 addresses, and the RoCE v2 GID
    index of the port's address from /sys/class/infiniband when an RDMA device exists.
  - Pings every peer address of O(pings) (else on the same half of O(peers)) with
    C(ping -M do -s SIZE) (no fragmentation), in rounds; a pair that never gets a full round is
    classed as lossy, mtu or unreachable.
  - Optionally reads PFC/pause/discard counters (C(ethtool -S)) of the fabric ports.
options:
  ports:
    description: This node's fabric ports, in order (netdev, hca, address).
    type: list
    elements: dict
    required: true
  peers:
    description: Other nodes, each with C(name) and C(addresses) (one per port, same order); each
      address is pinged from this node's port of the same index. Ignored when O(pings) is given.
    type: list
    elements: dict
    default: []
  pings:
    description: The pings to send, as sparkctl renders them for the topology
      (C(sparkctl_cluster.fabric_check)), each with C(peer), C(index) (this node's port), C(netdev),
      C(src), C(dst), and optionally C(dst_netdev) and C(subnet), which come back with the result.
    type: list
    elements: dict
  size:
    description: ICMP payload size (8972 = MTU 9000 minus IPv4 and ICMP headers).
    type: int
    default: 8972
  count:
    description: Pings per round and pair.
    type: int
    default: 5
  rounds:
    description: Rounds per pair; a pair passes at its first round with every reply.
    type: int
    default: 3
  timeout:
    description: Seconds to wait for each reply.
    type: int
    default: 1
  counters:
    description: Also return PFC/pause/discard counters per port.
    type: bool
    default: false
author: sparkctl
"""

RETURN = r"""
ports:
  description: per port - netdev, hca, present, state, carrier, speed_mbps, mtu, addresses, rdma, gid_index, gid_error
    (the link fields as sparkctl.nodeside.links.read_link returns them)
  returned: always
  type: list
pings:
  description: per peer and half - peer, index, netdev, src, dst, ok, kind (ok, lossy, mtu, unreachable),
    received, sent, rounds, loss_pct, detail (and dst_netdev, subnet when given O(pings))
  returned: always
  type: list
counters:
  description: netdev -> {counter: value} (only PFC/pause/discard/ECN related)
  returned: when counters is true
  type: dict
"""

import ipaddress
import re
import threading

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sparkctl.nodeside import links, rdma, system

COUNTER_RE = re.compile(r"(pause|pfc|prio3|discard|ecn|cnp|out_of_buffer)", re.I)


def port_facts(port, addresses):
    """One fabric port: its link, IPv4 addresses, RDMA device and RoCE v2 GID index."""
    info = {"netdev": port["netdev"], "hca": port.get("hca"), "address": port.get("address")}
    info.update(links.read_link(port["netdev"]))
    if info["present"]:
        info["addresses"] = addresses.get(port["netdev"], [])
    info["rdma"] = rdma.has_device(port.get("hca"))
    info["gid_index"], info["gid_error"] = (None, "no RDMA device on this node")
    if info["rdma"]:
        info["gid_index"], info["gid_error"] = rdma.roce_v2_gid_index(
            port["hca"], port["netdev"], port["address"])
    return info


def _ping_once(src_dev, dst, size, count, timeout):
    argv = ["ping", "-n", "-q", "-M", "do", "-s", str(size), "-c", str(count), "-i", "0.2",
            "-W", str(timeout), "-I", src_dev, dst]
    rc, out, err = system.run(argv, timeout=count * (timeout + 1) + 5)
    m = re.search(r"(\d+) packets transmitted, (\d+) received", out)
    sent, recv = (int(m.group(1)), int(m.group(2))) if m else (count, 0)
    text = (err or "") + "\n" + (out or "")
    too_long = bool(re.search(r"message too long|frag needed|fragmentation needed", text, re.I))
    return sent, recv, too_long


def ping(src_dev, dst, size, count, timeout, rounds=3):
    """Jumbo pings (DF) in rounds of ``count``; the pair passes at the first round with every reply.

    A pair that never gets a full round is judged by what it got: ``mtu`` (no jumbo reply, or a
    "message too long"/"fragmentation needed" answer, while small pings do get through),
    ``lossy`` (some replies; the loss percentage over every round), or ``unreachable`` (not even
    small pings get through). One lost packet on a busy link is therefore never a failure.
    """
    sent = recv = 0
    too_long = False
    for n in range(1, rounds + 1):
        s, r, tl = _ping_once(src_dev, dst, size, count, timeout)
        sent, recv, too_long = sent + s, recv + r, too_long or tl
        if s and r == s:
            return {"ok": True, "kind": "ok", "sent": sent, "received": recv, "rounds": n,
                    "loss_pct": round(100.0 * (sent - recv) / sent, 1),
                    "detail": f"{recv}/{sent} replies" + (f" ({n} rounds)" if n > 1 else "")}
    loss = round(100.0 * (sent - recv) / sent, 1) if sent else 100.0
    counts = f"{recv}/{sent} replies over {rounds} rounds of {count}"
    if recv and not too_long:
        kind, detail = "lossy", f"{counts} ({loss:g}% lost)"
    else:
        s, r, _ = _ping_once(src_dev, dst, 56, 2, timeout)
        if too_long and r == 0 and recv == 0 and s:
            kind, detail = "mtu", f"{counts}: the local port refuses {size} B without fragmenting"
        elif r:
            kind, detail = "mtu", (f"{counts}, while small pings get {r}/{s}: jumbo frames are dropped "
                                   "on the path (an MTU below the probe size on a port or the switch)")
        else:
            kind, detail = "unreachable", f"{counts}, and 0/{s} small pings: the peer is unreachable"
    return {"ok": False, "kind": kind, "sent": sent, "received": recv, "rounds": rounds,
            "loss_pct": loss, "detail": detail}


def counters(netdev):
    rc, out, _ = system.run(["ethtool", "-S", netdev])
    if rc != 0:
        return {}
    vals = {}
    for line in out.splitlines():
        if ":" not in line:
            continue
        key, _, val = line.strip().partition(":")
        if COUNTER_RE.search(key) and val.strip().isdigit():
            vals[key.strip()] = int(val.strip())
    return vals


def main():
    module = AnsibleModule(
        argument_spec={
            "ports": {"type": "list", "elements": "dict", "required": True},
            "peers": {"type": "list", "elements": "dict", "default": []},
            "pings": {"type": "list", "elements": "dict"},
            "size": {"type": "int", "default": 8972},
            "count": {"type": "int", "default": 5},
            "rounds": {"type": "int", "default": 3},
            "timeout": {"type": "int", "default": 1},
            "counters": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    addresses = links.ipv4_addresses()
    ports = [port_facts(port, addresses) for port in p["ports"]]

    jobs = []
    for job in p["pings"] or []:
        jobs.append({"peer": job["peer"], "index": int(job["index"]), "netdev": job["netdev"],
                     "src": str(ipaddress.ip_interface(job["src"]).ip),
                     "dst": str(ipaddress.ip_interface(job["dst"]).ip),
                     "dst_netdev": job.get("dst_netdev") or "", "subnet": job.get("subnet") or ""})
    for peer in [] if p["pings"] is not None else p["peers"]:
        for idx, dst in enumerate(peer.get("addresses", [])):
            if idx >= len(p["ports"]):
                continue
            src = p["ports"][idx]
            jobs.append({"peer": peer["name"], "index": idx, "netdev": src["netdev"],
                         "src": str(ipaddress.ip_interface(src["address"]).ip),
                         "dst": str(ipaddress.ip_interface(dst).ip)})

    def work(job):
        job.update(ping(job["netdev"], job["dst"], p["size"], p["count"], p["timeout"], p["rounds"]))

    threads = [threading.Thread(target=work, args=(j,)) for j in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    result = {"changed": False, "ports": ports, "pings": jobs, "rdma": rdma.present()}
    if p["counters"]:
        result["counters"] = {port["netdev"]: counters(port["netdev"]) for port in p["ports"]}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
