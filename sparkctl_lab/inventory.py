"""The lab's inventory, in exactly the format of inventory/example/ (hosts.yml + group_vars/all/sparkctl.yml),
plus the recorded host keys (known_hosts) and an ssh_config for people.

Rendering is pure (``render_files``); ``write`` puts the files on disk and only touches a file
whose content changed, so a repeated `lab up` leaves the inventory as it was.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sparkctl_lab import topology as topo
from sparkctl_lab.kit import KIT_IMAGE

HOSTS_FILE = "hosts.yml"
GROUP_VARS_FILE = "group_vars/all/sparkctl.yml"
KNOWN_HOSTS_FILE = "known_hosts"
SSH_CONFIG_FILE = "ssh_config"
MARKER_FILE = ".written-by-sparkctl-lab"

# Same layout as a real site, under the lab's private /mnt/nvme.
NVME_MOUNT = "/mnt/nvme"
LAB_PORTS = {"dist_init": 29649, "api": 8004, "nccl_test": 29659}
LAB_PATHS = {
    "model_dir": f"{NVME_MOUNT}/models/DeepSeek-V4.1-Flash",
    "engram_dir": f"{NVME_MOUNT}/engram-tp4",
    "run_dir": "/srv/sparkctl/run",
    "nvme_mount": NVME_MOUNT,
}

_HEADER = (
    "---\n"
    "# Written by `sparkctl lab up` for the local lab; rewritten on every `up`, removed by `down`.\n"
    "# Same format as inventory/example/ (see there for what each key means).\n"
)


@dataclass(frozen=True)
class LabInventory:
    """Inputs of the lab inventory that are not fixed wiring (all paths absolute)."""

    inventory_dir: Path
    private_key: Path
    api_key_file: Path
    checkpoint_dir: Path
    host_keys: Mapping[str, str]  # machine -> "ssh-ed25519 AAAA..."
    nvme_gib: Mapping[str, int | None]  # node -> size of its /mnt/nvme filesystem, if limited
    # The synthetic serving kit (sparkctl_lab.kit). With it the ranks run as containers of the
    # image built from its Dockerfile; without it (unit tests' inventories) they run the
    # simulator directly (kind lab).
    kit_url: str | None = None
    kit_commit: str | None = None
    shape: str = topo.DEFAULT_SHAPE  # topology.SHAPES: the wiring the inventory describes

    @property
    def lab_shape(self) -> topo.Shape:
        return topo.get_shape(self.shape)

    @property
    def known_hosts(self) -> Path:
        return self.inventory_dir / KNOWN_HOSTS_FILE

    @property
    def ssh_config(self) -> Path:
        return self.inventory_dir / SSH_CONFIG_FILE


def ssh_common_args(inv: LabInventory) -> str:
    return (
        f"-o UserKnownHostsFile={inv.known_hosts} -o StrictHostKeyChecking=yes "
        "-o GlobalKnownHostsFile=/dev/null -o IdentitiesOnly=yes"
    )


def hosts_document(inv: LabInventory) -> dict[str, Any]:
    sh = inv.lab_shape
    sparks: dict[str, Any] = {}
    for rank, node in enumerate(topo.node_names(sh)):
        entry: dict[str, Any] = {
            "ansible_host": str(topo.mgmt_ip(node, sh)),
            "sparkctl_rank": rank,
            "sparkctl_fabric_ports": [
                {"netdev": h.netdev, "hca": h.hca, "address": str(topo.fabric_ip(node, h, sh))}
                for h in topo.fabric_ports(sh)
            ],
        }
        gib = inv.nvme_gib.get(node)
        if gib is not None:
            entry["sparkctl_nvme_gib"] = gib
        sparks[node] = entry
    children: dict[str, Any] = {"sparks": {"hosts": sparks}}
    if sh.switched:
        switch = {
            "ansible_host": str(topo.mgmt_ip(topo.SWITCH_NAME)),
            "sparkctl_switch_type": "linux",
            "sparkctl_switch_mtu": topo.SWITCH_PORT_MTU,
            "sparkctl_switch_l2mtu": topo.SWITCH_PORT_MTU,
            "sparkctl_switch_ports": {
                node: {h.netdev: topo.switch_port(node, h, sh) for h in topo.fabric_ports(sh)}
                for node in topo.node_names(sh)
            },
        }
        children["switches"] = {"hosts": {topo.SWITCH_NAME: switch}}
    # A cabled shape has no switch in its inventory (`validate` refuses one): lab-switch is only the
    # patch panel that holds its cables.
    return {
        "all": {
            "vars": {
                "ansible_user": "root",
                "ansible_become": False,
                "ansible_ssh_private_key_file": str(inv.private_key),
                "ansible_ssh_common_args": ssh_common_args(inv),
                "ansible_python_interpreter": "/usr/bin/python3",
            },
            "children": children,
        }
    }


# What a published profile takes from the lab's own profile (sparkctl/profiles/lab.yml) to run on
# the lab's simulated ranks, read from that file (never restated here): the container a lab node can
# run, the synthetic kit, the memory of a lab container, the simulator's knobs, the toy sizes of the
# context and the KV pool, and the kit's path. Everything else (TP/EP, padding, fabric, the published
# flags and NCCL environment, the gates and smoke requests) stays the published profile's: the lab
# profile's kit markers describe R4's TP4 layout (128 draft experts do not split over EP3).
LAB_PROFILE = "lab"
LAB_SECTIONS = ("container", "kit", "memory", "simulator")
LAB_ARGS = ("--min-free-slots-delay", "--context-length", "--max-running-requests", "--chunked-prefill-size",
            "--max-prefill-tokens", "--max-total-tokens", "--mem-fraction-static",
            "--cuda-graph-max-bs-decode", "--watchdog-timeout")
LAB_ENV = ("PYTHONPATH",)


def profile_overrides(sh: topo.Shape) -> dict[str, Any]:
    """sparkctl_profile_overrides of a shape's lab inventory: none for the lab's own profile."""
    if sh.profile == LAB_PROFILE:
        return {}
    from sparkctl.profiles import load_profile, profile_text

    lab, published = (yaml.safe_load(profile_text(name)) for name in (LAB_PROFILE, sh.profile))
    out: dict[str, Any] = {k: lab[k] for k in LAB_SECTIONS if k in lab}
    # Overrides merge into a section key by key: the container is given whole (every key, the lab
    # profile's defaults included), so nothing of the publisher's (privileged, binds) stays.
    out["container"] = load_profile(LAB_PROFILE).container.model_dump(mode="json")
    if published.get("memory", {}).get("engram_packed_gib") == 0:
        # Resident Engram (sg17-tp8): nothing is packed, on the lab either.
        out["memory"] = {**out["memory"], "engram_packed_gib": 0}
    out["args"] = {k: lab["args"][k] for k in LAB_ARGS if k in lab["args"]}
    out["env"] = {k: lab["env"][k] for k in LAB_ENV if k in lab["env"]}
    # The publisher's image is built from its own kit; the lab's ranks run the lab's engine image.
    out["image"] = None
    return out


def runtime_document(inv: LabInventory) -> dict[str, Any]:
    if inv.kit_url and inv.kit_commit:
        # Built on the head from the kit's docker/Dockerfile (FROM the lab's base engine image,
        # which `lab up` imports there), then fanned out by `sparkctl stage image`.
        return {"kind": "container", "image": KIT_IMAGE, "image_source": "build"}
    return {"kind": "lab", "allow_mutable_tag": False, "venv_path": "/opt/sparkctl/venv"}


def group_vars_document(inv: LabInventory) -> dict[str, Any]:
    sh = inv.lab_shape
    doc: dict[str, Any] = {"sparkctl_cluster_name": topo.CLUSTER_NAME}
    if sh.topology != "switch":
        doc["sparkctl_topology"] = sh.topology
    doc |= {
        "sparkctl_profile": sh.profile,
        "sparkctl_profile_overrides": profile_overrides(sh),
        "sparkctl_runtime": runtime_document(inv),
        "sparkctl_mgmt": {"subnet": str(topo.MGMT_SUBNET), "interface": topo.MGMT_IFACE},
        "sparkctl_fabric": {
            "subnets": [str(net) for net in topo.fabric_subnets(sh)],
            "mtu": topo.HOST_FABRIC_MTU,
            # The QoS role skips itself where no RDMA device exists (the lab); the intent stays on as
            # on a real site. The ranks get no NCCL_IB_TC: the lab's Linux bridge has no lossless class.
            # A cabled shape has no switch to match (off, as its example), and bootstraps and stages
            # over the management network: the head's fabric addresses are each one cable's.
            "host_qos": sh.switched,
            "bootstrap_over": "fabric" if sh.switched else "mgmt",
            "stage_over_fabric": sh.switched,
        },
        "sparkctl_ports": dict(LAB_PORTS),
        "sparkctl_api_allow": [str(topo.MGMT_SUBNET)],
        "sparkctl_paths": {**LAB_PATHS, "engram_dir": f"{NVME_MOUNT}/engram-tp{sh.tp}"},
        "sparkctl_checkpoint": {"source": "dir", "path": str(inv.checkpoint_dir), "location": "controller"},
        "sparkctl_secrets": {"api_key": {"file": str(inv.api_key_file)}},
        # `sparkctl watch`: the lab's ranks start in seconds, so it may look more often.
        "sparkctl_supervisor": {"interval_s": 5, "canary_failures": 3, "max_restarts": 3, "window_s": 3600,
                                "settle_s": 2},
        "sparkctl_autostart": False,
    }
    if inv.kit_url and inv.kit_commit:
        # Fetched on the controller (the nodes have no route out), then sent to the head and fanned out.
        doc["sparkctl_kit"] = {"source": "git", "url": inv.kit_url, "commit": inv.kit_commit}
    return doc


def known_hosts_text(host_keys: Mapping[str, str], sh: topo.Shape | None = None) -> str:
    lines = [f"{m},{topo.mgmt_ip(m, sh)} {host_keys[m].strip()}" for m in topo.machines(sh) if m in host_keys]
    return "\n".join(lines) + "\n"


def ssh_config_text(inv: LabInventory) -> str:
    out = ["# Written by `sparkctl lab up`: ssh -F <this file> spark-2", ""]
    machines = topo.machines(inv.lab_shape)
    for m in machines:
        out += [f"Host {m}", f"  HostName {topo.mgmt_ip(m, inv.lab_shape)}", ""]
    out += [
        f"Host {' '.join(machines)}",
        "  User root",
        f"  IdentityFile {inv.private_key}",
        "  IdentitiesOnly yes",
        f"  UserKnownHostsFile {inv.known_hosts}",
        "  GlobalKnownHostsFile /dev/null",
        "  StrictHostKeyChecking yes",
        "  BatchMode yes",
        # TCP and the banner exchange: the lab's nodes share the controller's cores, and at load
        # ~12 a banner took longer than 5 s (`Connection timed out during banner exchange`)
        "  ConnectTimeout 30",
        "  LogLevel ERROR",
        "",
    ]
    return "\n".join(out)


class _IndentedDumper(yaml.SafeDumper):
    """Block sequences indented under their key, as yamllint (and inventory/example) has them."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def _yaml(doc: dict[str, Any]) -> str:
    body = yaml.dump(doc, Dumper=_IndentedDumper, sort_keys=False, default_flow_style=False, width=100)
    return _HEADER + body


def render_files(inv: LabInventory) -> dict[str, str]:
    """Relative path -> content of every file of the lab inventory."""
    return {
        HOSTS_FILE: _yaml(hosts_document(inv)),
        GROUP_VARS_FILE: _yaml(group_vars_document(inv)),
        KNOWN_HOSTS_FILE: known_hosts_text(inv.host_keys, inv.lab_shape),
        SSH_CONFIG_FILE: ssh_config_text(inv),
        MARKER_FILE: "This directory is written by `sparkctl lab up` and removed by `sparkctl lab down`.\n",
    }


def write(inv: LabInventory) -> list[str]:
    """Write the inventory; return the relative paths whose content changed."""
    changed = []
    for rel, content in render_files(inv).items():
        path = inv.inventory_dir / rel
        try:
            if path.read_text() == content:
                continue
        except OSError:
            pass
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(content)
        os.chmod(tmp, 0o644)
        tmp.replace(path)
        changed.append(rel)
    return changed


def remove(inventory_dir: Path) -> bool:
    """Remove a lab inventory directory, but only one this module wrote (it carries the marker)."""
    if not (inventory_dir / MARKER_FILE).is_file():
        return False
    for rel in (*render_files_names(), MARKER_FILE):
        (inventory_dir / rel).unlink(missing_ok=True)
    for d in sorted(
        (p for p in inventory_dir.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True
    ):
        with contextlib.suppress(OSError):
            d.rmdir()
    try:
        inventory_dir.rmdir()
    except OSError:
        return False
    return True


def render_files_names() -> tuple[str, ...]:
    return (HOSTS_FILE, GROUP_VARS_FILE, KNOWN_HOSTS_FILE, SSH_CONFIG_FILE)
