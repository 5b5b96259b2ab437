#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Read-only identity of a Spark node: OS, kernel, NVIDIA driver, CUDA, CX-7 firmware, BIOS.

Standard library only. Anything absent or unreadable (a lab container has no GPU, no HCA and
often no DMI table) is reported as "n/a", never guessed.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: sparkctl_identity
short_description: Report the identity of a node (OS, kernel, driver, CUDA, CX-7 firmware, BIOS)
description:
  - Reads /etc/os-release, uname, /proc/driver/nvidia/version, nvidia-smi, /sys/class/infiniband
    and /sys/class/dmi. Never changes anything.
options:
  hcas:
    description: RDMA devices whose firmware version is read.
    type: list
    elements: str
    default: []
  netdevs:
    description: Network interfaces that must exist (reported in C(missing_netdevs)).
    type: list
    elements: str
    default: []
author: sparkctl
"""

RETURN = r"""
identity:
  description: field -> value ("n/a" where absent)
  returned: always
  type: dict
missing_netdevs:
  description: requested interfaces that do not exist
  returned: always
  type: list
rdma:
  description: whether /sys/class/infiniband holds any device
  returned: always
  type: bool
"""

import json
import os
import re
import shutil
import subprocess

from ansible.module_utils.basic import AnsibleModule

NA = "n/a"


def _read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return None


def os_release():
    text = _read("/etc/os-release") or ""
    for line in text.splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip().strip('"') or NA
    return NA


def nvidia_driver():
    text = _read("/proc/driver/nvidia/version")
    if text:
        m = re.search(r"Kernel Module\s+(?:for \S+\s+)?([0-9][0-9.]+)", text)
        if m:
            return m.group(1)
    ver = _read("/sys/module/nvidia/version")
    return ver or NA


def cuda_version():
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi], capture_output=True, text=True, timeout=20, check=False).stdout
        except (OSError, subprocess.SubprocessError):
            out = ""
        m = re.search(r"CUDA Version:\s*([0-9.]+)", out)
        if m:
            return m.group(1)
    text = _read("/usr/local/cuda/version.json")
    if text:
        try:
            return json.loads(text)["cuda"]["version"]
        except (ValueError, KeyError, TypeError):
            pass
    return NA


def cx7_firmware(hcas):
    versions = []
    for hca in hcas:
        ver = _read(os.path.join("/sys/class/infiniband", hca, "fw_ver"))
        if ver:
            versions.append(ver)
    return ",".join(sorted(set(versions))) if versions else NA


def bios():
    ver = _read("/sys/class/dmi/id/bios_version")
    date = _read("/sys/class/dmi/id/bios_date")
    if not ver:
        return NA
    return f"{ver} ({date})" if date else ver


def netdevs(module):
    """Interface names of this network namespace (from `ip`, not /sys/class/net: in a container
    with a borrowed sysfs, /sys shows the host's interfaces)."""
    rc, out, _err = module.run_command(["ip", "-o", "link", "show"])
    if rc != 0:
        return set()
    names = set()
    for line in out.splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            names.add(parts[1].strip().split("@", 1)[0])
    return names


def main():
    module = AnsibleModule(
        argument_spec={
            "hcas": {"type": "list", "elements": "str", "default": []},
            "netdevs": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    hcas = module.params["hcas"]
    identity = {
        "os": os_release(),
        "kernel": os.uname().release,
        "nvidia_driver": nvidia_driver(),
        "cuda": cuda_version(),
        "cx7_firmware": cx7_firmware(hcas),
        "bios": bios(),
    }
    present = netdevs(module)
    missing = [n for n in module.params["netdevs"] if n not in present]
    rdma = os.path.isdir("/sys/class/infiniband") and bool(os.listdir("/sys/class/infiniband"))
    module.exit_json(changed=False, identity=identity, missing_netdevs=missing, rdma=rdma)


if __name__ == "__main__":
    main()
