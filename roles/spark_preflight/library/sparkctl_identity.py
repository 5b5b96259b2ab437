#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Read-only identity of a Spark node: OS, kernel, NVIDIA driver, CUDA, CX-7 firmware, BIOS.

Standard library only; interfaces and RDMA devices are read by the node-side readers sparkctl's
probe uses too (``sparkctl.nodeside``, shipped as module_utils). Anything absent or unreadable (a lab container has no GPU, no HCA and
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

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sparkctl.nodeside import discover, links, rdma, system

NA = "n/a"


def os_release():
    return discover.os_release().get("PRETTY_NAME") or NA


def nvidia_driver():
    return discover.nvidia_driver() or NA


def cuda_version():
    smi = shutil.which("nvidia-smi")
    if smi:
        _rc, out, _err = system.run([smi], timeout=20)
        m = re.search(r"CUDA Version:\s*([0-9.]+)", out)
        if m:
            return m.group(1)
    text = system.read_text("/usr/local/cuda/version.json")
    if text:
        try:
            return json.loads(text)["cuda"]["version"]
        except (ValueError, KeyError, TypeError):
            pass
    return NA


def cx7_firmware(hcas):
    return ",".join(rdma.firmware(hcas)) or NA


def bios():
    return discover.bios() or NA


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
    found = links.read_links(module.params["netdevs"])
    missing = [n for n in module.params["netdevs"] if not found[n]["present"]]
    module.exit_json(changed=False, identity=identity, missing_netdevs=missing, rdma=rdma.present())


if __name__ == "__main__":
    main()
