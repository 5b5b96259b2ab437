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
  - Pings every peer address on the same half with C(ping -M do -s SIZE) (no fragmentation).
  - Optionally reads PFC/pause/discard counters (C(ethtool -S)) of the fabric ports.
options:
  ports:
    description: This node's fabric ports, in order (netdev, hca, address).
    type: list
    elements: dict
    required: true
  peers:
    description: Other nodes, each with C(name) and C(addresses) (one per port, same order).
    type: list
    elements: dict
    default: []
  size:
    description: ICMP payload size (8972 = MTU 9000 minus IPv4 and ICMP headers).
    type: int
    default: 8972
  count:
    description: Pings per pair.
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
  description: per peer and half - peer, index, netdev, src, dst, ok, received, sent, detail
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


def ping(src_dev, dst, size, count, timeout):
    argv = ["ping", "-n", "-q", "-M", "do", "-s", str(size), "-c", str(count), "-i", "0.2",
            "-W", str(timeout), "-I", src_dev, dst]
    rc, out, err = system.run(argv, timeout=count * (timeout + 1) + 5)
    m = re.search(r"(\d+) packets transmitted, (\d+) received", out)
    sent, recv = (int(m.group(1)), int(m.group(2))) if m else (count, 0)
    text = (err or out).strip().splitlines()
    detail = text[-1] if text else f"ping exited {rc}"
    if rc == 0 and recv == sent:
        detail = f"{recv}/{sent} replies"
    elif "message too long" in (err or "").lower():
        detail = "local MTU below the probe size (message too long)"
    elif recv == 0:
        detail = f"0/{sent} replies (jumbo frames dropped on the path, or peer down)"
    return {"ok": rc == 0 and recv == sent, "sent": sent, "received": recv, "detail": detail}


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
            "size": {"type": "int", "default": 8972},
            "count": {"type": "int", "default": 3},
            "timeout": {"type": "int", "default": 1},
            "counters": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    addresses = links.ipv4_addresses()
    ports = [port_facts(port, addresses) for port in p["ports"]]

    jobs = []
    for peer in p["peers"]:
        for idx, dst in enumerate(peer.get("addresses", [])):
            if idx >= len(p["ports"]):
                continue
            src = p["ports"][idx]
            jobs.append({"peer": peer["name"], "index": idx, "netdev": src["netdev"],
                         "src": str(ipaddress.ip_interface(src["address"]).ip),
                         "dst": str(ipaddress.ip_interface(dst).ip)})

    def work(job):
        job.update(ping(job["netdev"], job["dst"], p["size"], p["count"], p["timeout"]))

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
