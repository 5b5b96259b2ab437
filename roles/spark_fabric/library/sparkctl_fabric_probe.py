#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Read-only probe of a node's RoCE fabric: links, MTU, addresses, RoCE v2 GIDs, jumbo pings.

Standard library only. It changes nothing: it reads `ip`, `ethtool` and sysfs, and sends pings.
Interfaces are read with `ip` (not /sys/class/net, which a container may borrow from its host).
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
import json
import os
import re
import shutil
import subprocess
import threading

from ansible.module_utils.basic import AnsibleModule

IB = "/sys/class/infiniband"
COUNTER_RE = re.compile(r"(pause|pfc|prio3|discard|ecn|cnp|out_of_buffer)", re.I)


def _read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return None


def _run(argv, timeout=10):
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        return p.returncode, p.stdout, p.stderr
    except (OSError, subprocess.SubprocessError) as exc:
        return 127, "", str(exc)


def link_info(netdev):
    rc, out, _ = _run(["ip", "-j", "-d", "addr", "show", "dev", netdev])
    if rc != 0:
        return {"present": False}
    try:
        data = json.loads(out)[0]
    except (ValueError, IndexError):
        return {"present": False}
    flags = data.get("flags", [])
    info = {
        "present": True,
        "state": data.get("operstate", "UNKNOWN"),
        "carrier": "LOWER_UP" in flags,
        "admin_up": "UP" in flags,
        "mtu": data.get("mtu"),
        "addresses": sorted(
            f"{a['local']}/{a['prefixlen']}" for a in data.get("addr_info", []) if a.get("family") == "inet"
        ),
        "speed_mbps": None,
    }
    if shutil.which("ethtool"):
        rc, out, _ = _run(["ethtool", netdev])
        m = re.search(r"Speed:\s*(\d+)\s*Mb/s", out or "")
        if m:
            info["speed_mbps"] = int(m.group(1))
    return info


def gid_index(hca, address):
    """Index of the RoCE v2 GID that carries `address` on port 1 of `hca`, or (None, why)."""
    base = os.path.join(IB, hca, "ports", "1")
    if not os.path.isdir(base):
        return None, f"no RDMA device {hca}"
    ip = ipaddress.ip_interface(address).ip
    want = "0000:0000:0000:0000:0000:ffff:" + "{:04x}:{:04x}".format(int(ip) >> 16, int(ip) & 0xFFFF)
    gids = os.path.join(base, "gids")
    found = []
    for name in sorted(os.listdir(gids), key=lambda s: int(s) if s.isdigit() else 0):
        gid = (_read(os.path.join(gids, name)) or "").lower()
        if gid != want:
            continue
        kind = _read(os.path.join(base, "gid_attrs", "types", name)) or ""
        if "v2" in kind.lower():
            found.append(int(name))
    if not found:
        return None, f"{hca}: no RoCE v2 GID for {ip}"
    return found[0], None


def ping(src_dev, dst, size, count, timeout):
    argv = ["ping", "-n", "-q", "-M", "do", "-s", str(size), "-c", str(count), "-i", "0.2",
            "-W", str(timeout), "-I", src_dev, dst]
    rc, out, err = _run(argv, timeout=count * (timeout + 1) + 5)
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
    rc, out, _ = _run(["ethtool", "-S", netdev])
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
    rdma_present = os.path.isdir(IB) and bool(os.listdir(IB))
    ports = []
    for port in p["ports"]:
        info = {"netdev": port["netdev"], "hca": port.get("hca"), "address": port.get("address")}
        info.update(link_info(port["netdev"]))
        info["rdma"] = bool(port.get("hca")) and os.path.isdir(os.path.join(IB, port.get("hca") or "-"))
        info["gid_index"], info["gid_error"] = (None, "no RDMA device on this node")
        if info["rdma"]:
            info["gid_index"], info["gid_error"] = gid_index(port["hca"], port["address"])
        ports.append(info)

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

    result = {"changed": False, "ports": ports, "pings": jobs, "rdma": rdma_present}
    if p["counters"]:
        result["counters"] = {port["netdev"]: counters(port["netdev"]) for port in p["ports"]}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
