"""Cross-field checks: what no single field can know on its own.

Each check reads the parts of the draft that validated and adds problems; none raises, none
touches the network. The memory arithmetic itself lives on the profile (`Profile.memory_problems`,
`kv_pool_gib`, ...); the disk budget, which needs the nodes, lives here.

Size: one module on purpose — every check is a small function over the same draft, and ``CHECKS``
(the order they run in) is the one list a reader needs to see them all.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections import defaultdict
from collections.abc import Callable, Iterable
from ipaddress import IPv4Address, IPv4Network
from pathlib import PurePosixPath

from sparkctl.model.cluster import Checkpoint, Fabric, Kit, Mgmt, Paths, Ports, Runtime, Supervisor
from sparkctl.model.draft import Draft
from sparkctl.model.problems import Problems, suggest
from sparkctl.model.router import Router
from sparkctl.model.topology import check_shape
from sparkctl.model.types import MIN_FABRIC_MTU, image_is_pinned
from sparkctl.profiles import Profile
from sparkctl.profiles import flags as sglang_flags


def _names(items: Iterable[str]) -> str:
    return ", ".join(sorted(items))


def check_topology(d: Draft, p: Problems) -> None:
    count = len(d.spark_names)
    if count == 0:
        p.add("all.children.sparks.hosts", "no nodes", "list each Spark (one SGLang rank per node)")
        return
    # Ranks: exactly 0..N-1, each once, over every host whose rank validated.
    by_rank: dict[int, list[str]] = defaultdict(list)
    for name, rank in d.ranks.items():
        by_rank[rank].append(name)
    for rank, names in sorted(by_rank.items()):
        if len(names) > 1:
            what = "rank 0 (the head) is" if rank == 0 else f"rank {rank} is"
            p.add(
                f"sparks.{sorted(names)[1]}.sparkctl_rank",
                f"{what} given to {len(names)} nodes ({_names(names)})",
                f"number the nodes 0..{count - 1}, each rank once; rank 0 is the head",
            )
    for name, rank in d.ranks.items():
        if rank >= count:
            p.add(
                f"sparks.{name}.sparkctl_rank",
                f"rank {rank} with only {count} nodes",
                f"number the nodes 0..{count - 1}",
            )
    if len(d.ranks) == count:
        missing = sorted(set(range(count)) - set(by_rank))
        if missing:
            p.add(
                "sparks.*.sparkctl_rank",
                f"no node has rank {', '.join(map(str, missing))}",
                f"number the nodes 0..{count - 1}; rank 0 is the head",
            )
    # Node count against the profile's parallelism (one GPU, so one rank, per node).
    prof = d.profile
    if prof is None or d.get("sparkctl_groups") is not None:
        return  # explicit groups are each held to their own size (topology.check_groups)
    tp = prof.tp_size
    pp = int(prof.args.get("--pp-size", 1) or 1)
    flag_path = (
        "sparkctl_profile_overrides.args.--tp-size"
        if _overridden(d, "--tp-size")
        else f"sparkctl_profile ({prof.name}).args.--tp-size"
    )
    if count % tp:
        p.add(
            "all.children.sparks.hosts",
            f"{count} nodes is not a multiple of --tp-size {tp} ({flag_path})",
            f"list {tp * max(1, round(count / tp))} Sparks, "
            f"or choose a profile whose --tp-size divides {count}",
        )
    elif count != tp * pp:
        p.add(
            "all.children.sparks.hosts",
            f"{count} nodes but --tp-size {tp} x --pp-size {pp} = {tp * pp} ranks (one rank per node)",
            f"list {tp * pp} Sparks or set --pp-size {count // tp} in sparkctl_profile_overrides",
        )


def _overridden(d: Draft, flag: str) -> bool:
    overrides = d.get("sparkctl_profile_overrides") or {}
    args = overrides.get("args") if isinstance(overrides, dict) else None
    return isinstance(args, dict) and flag in args


def controller_source(address: str) -> IPv4Address | None:
    """The source address this machine would use to reach ``address`` (kernel route lookup only:
    ``ip route get`` sends nothing). None where it cannot tell."""
    try:
        proc = subprocess.run(["ip", "-j", "-4", "route", "get", address], capture_output=True,
                              text=True, timeout=5, check=False)
        routes = json.loads(proc.stdout) if proc.returncode == 0 else []
        src = routes[0].get("prefsrc") if routes else None
        return IPv4Address(src) if src else None
    except (OSError, subprocess.SubprocessError, ValueError, IndexError, AttributeError):
        return None


def check_addresses(d: Draft, p: Problems) -> None:
    mgmt: Mgmt | None = d.get("sparkctl_mgmt")
    fabric: Fabric | None = d.get("sparkctl_fabric")
    # Unique management addresses (switch included).
    owners: dict[str, list[str]] = defaultdict(list)
    for n in d.nodes:
        owners[str(n.mgmt_ip)].append(f"sparks.{n.name}")
    if d.switch is not None:
        owners[d.switch.host].append(f"switches.{d.switch.name}")
    for ip, paths in owners.items():
        if len(paths) > 1:
            p.add(
                f"{paths[1]}.ansible_host",
                f"{ip} is also the address of {paths[0]}",
                "give every host its own management address",
            )
    # Unique fabric addresses.
    seen: dict[str, str] = {}
    for n in d.nodes:
        for i, port in enumerate(n.fabric_ports):
            where = f"sparks.{n.name}.sparkctl_fabric_ports[{i}].address"
            key = str(port.ip)
            if key in seen:
                p.add(
                    where, f"{key} is already used by {seen[key]}", "give every fabric port its own address"
                )
            else:
                seen[key] = where
            if mgmt is not None and n.mgmt_ip == port.ip:
                p.add(where, f"{key} is the node's management address", "use an address in a fabric subnet")
    if fabric is None:
        return
    subnets = fabric.subnets
    text = ", ".join(map(str, subnets))
    for i, a in enumerate(subnets):
        for b in subnets[i + 1 :]:
            if a.overlaps(b):
                p.add(
                    f"sparkctl_fabric.subnets[{i}]", f"{a} overlaps {b}", "give each PCIe half its own subnet"
                )
    if mgmt is not None:
        for i, net in enumerate(subnets):
            if net.overlaps(mgmt.subnet):
                p.add(
                    f"sparkctl_fabric.subnets[{i}]",
                    f"{net} overlaps the management subnet {mgmt.subnet}",
                    "put the fabric on its own private subnets (e.g. 10.77.0.0/24)",
                )
        for n in d.nodes:
            for net in subnets:
                if n.mgmt_ip in net:
                    p.add(
                        f"sparks.{n.name}.ansible_host",
                        f"{n.mgmt_ip} is inside fabric subnet {net}",
                        "use the node's management address; the fabric carries only model traffic",
                    )
    # The address this controller reaches the nodes from must stay off the fabric: a fabric route
    # that captures it cuts the controller's own path (nothing is sent to find it out).
    for n in d.nodes[:1]:
        src = controller_source(str(n.mgmt_ip))
        for i, net in enumerate(subnets):
            if src is not None and src in net:
                p.add(
                    f"sparkctl_fabric.subnets[{i}]",
                    f"{net} contains {src}, the address this controller reaches the nodes from",
                    "pick fabric subnets this controller does not use (the fabric routes would capture "
                    "its path to the nodes)",
                )
    for n in d.nodes:
        used: dict[IPv4Network, int] = {}
        for i, port in enumerate(n.fabric_ports):
            where = f"sparks.{n.name}.sparkctl_fabric_ports[{i}].address"
            home = next((s for s in subnets if port.ip in s), None)
            if home is None:
                p.add(
                    where,
                    f"{port.ip} is outside the fabric subnets {text}",
                    "use an address inside one of them",
                )
                continue
            if port.address.network != home:
                p.add(
                    where,
                    f"prefix /{port.address.network.prefixlen} differs from its subnet {home}",
                    f"write {port.ip}/{home.prefixlen}",
                )
            elif port.ip in (home.network_address, home.broadcast_address):
                p.add(
                    where, f"{port.ip} is the network or broadcast address of {home}", "pick a host address"
                )
            if home in used:
                p.add(
                    where,
                    f"in the same subnet {home} as port [{used[home]}]",
                    "put each PCIe half in its own subnet (one per half in sparkctl_fabric.subnets)",
                )
            else:
                used[home] = i


def check_pcie_halves(d: Draft, p: Problems) -> None:
    for n in d.nodes:
        where = f"sparks.{n.name}.sparkctl_fabric_ports"
        if len(n.fabric_ports) < 2:
            p.add(
                where,
                f"{len(n.fabric_ports)} port listed, the ConnectX-7 port has two PCIe halves",
                "list both halves (e.g. enp1s0f0np0/rocep1s0f0 and enP2p1s0f0np0/roceP2p1s0f0)",
            )
        for attr, what in (("netdev", "interface"), ("hca", "RDMA device")):
            first: dict[str, int] = {}
            for i, port in enumerate(n.fabric_ports):
                value = getattr(port, attr)
                if value in first:
                    p.add(
                        f"{where}[{i}].{attr}",
                        f"{value} is already port [{first[value]}]'s {what}",
                        f"each PCIe half has its own {what}; check `ibdev2netdev` on {n.name}",
                    )
                else:
                    first[value] = i


def check_mtu(d: Draft, p: Problems) -> None:
    fabric: Fabric | None = d.get("sparkctl_fabric")
    if fabric is not None and fabric.mtu < MIN_FABRIC_MTU:
        p.add(
            "sparkctl_fabric.mtu",
            f"{fabric.mtu} is below {MIN_FABRIC_MTU}",
            f"set {MIN_FABRIC_MTU} (RoCE needs jumbo frames end to end)",
        )
    sw = d.switch
    if sw is None:
        return
    if fabric is not None and sw.mtu <= fabric.mtu:
        p.add(
            f"switches.{sw.name}.sparkctl_switch_mtu",
            f"{sw.mtu} is not above the host fabric MTU {fabric.mtu}",
            f"set the switch MTU above the hosts' (e.g. {max(9216, fabric.mtu + 216)}) "
            "to leave room for headers",
        )
    if sw.l2mtu is not None and sw.l2mtu < sw.mtu:
        p.add(
            f"switches.{sw.name}.sparkctl_switch_l2mtu",
            f"{sw.l2mtu} is below the switch MTU {sw.mtu}",
            "set l2mtu at least as large as the MTU",
        )


def check_ports(d: Draft, p: Problems) -> None:
    ports: Ports | None = d.get("sparkctl_ports")
    if ports is None:
        return
    first: dict[int, str] = {}
    for name in Ports.model_fields:
        value = getattr(ports, name)
        if value in first:
            p.add(
                f"sparkctl_ports.{name}",
                f"{value} is also sparkctl_ports.{first[value]}",
                "give each service its own port",
            )
        else:
            first[value] = name


def _inside(child: PurePosixPath, parent: PurePosixPath) -> bool:
    return child == parent or parent in child.parents


def check_paths(d: Draft, p: Problems) -> None:
    paths: Paths | None = d.get("sparkctl_paths")
    if paths is None:
        return
    for name in ("model_dir", "engram_dir"):
        value: PurePosixPath = getattr(paths, name)
        if not _inside(value, paths.nvme_mount) or value == paths.nvme_mount:
            p.add(
                f"sparkctl_paths.{name}",
                f"{value} is not inside nvme_mount {paths.nvme_mount}",
                "keep the checkpoint and the Engram shards on the NVMe filesystem (or fix nvme_mount)",
            )
    named = [(n, getattr(paths, n)) for n in ("model_dir", "engram_dir", "run_dir")]
    for i, (a, pa) in enumerate(named):
        for b, pb in named[i + 1 :]:
            if _inside(pa, pb) or _inside(pb, pa):
                p.add(
                    f"sparkctl_paths.{b}",
                    f"{pb} overlaps sparkctl_paths.{a} {pa}",
                    "give the checkpoint, the Engram shards and the run state separate directories",
                )


def check_runtime(d: Draft, p: Problems) -> None:
    rt: Runtime | None = d.get("sparkctl_runtime")
    if rt is None:
        return
    if rt.kind == "container":
        local = rt.image_source in ("build", "archive")
        if not rt.image:
            p.add(
                "sparkctl_runtime.image",
                "missing for kind container",
                "set the SGLang image pinned by digest (name@sha256:<64 hex>)"
                if not local else "set the local name:tag the built or loaded image gets",
            )
        elif local and "@" in rt.image:
            p.add(
                "sparkctl_runtime.image",
                f"{rt.image!r}: a {rt.image_source} image is named by a local name:tag, not a digest",
                "write name:tag (pin the result with sparkctl_runtime.image_id)",
            )
        elif local:
            pass  # pinned by the image ID stage records and checks identical on every node
        elif "@sha256:" in rt.image and not image_is_pinned(rt.image):
            digest = rt.image.split("@sha256:", 1)[1]
            p.add(
                "sparkctl_runtime.image",
                f"the digest has {len(digest)} characters, not 64 lowercase hex",
                "copy the full digest from `docker buildx imagetools inspect <image>`",
            )
        elif not image_is_pinned(rt.image) and not rt.allow_mutable_tag:
            p.add(
                "sparkctl_runtime.image",
                f"{rt.image!r} is not pinned by digest",
                "write name@sha256:<64 hex> (`docker inspect --format '{{.RepoDigests}}'`); "
                "a tag can move under you (allow_mutable_tag: true overrides)",
            )
    elif rt.kind == "venv" and rt.venv_path is None:
        p.add("sparkctl_runtime.venv_path", "missing for kind venv", "set the virtualenv path on the nodes")
    if rt.image_source == "archive" and rt.image_archive is None:
        p.add(
            "sparkctl_runtime.image_archive",
            "missing for image_source archive",
            "give the `docker save` archive (.tar or .tar.zst) on the controller",
        )
    elif rt.image_source != "archive" and rt.image_archive is not None:
        p.add("sparkctl_runtime.image_archive", f"only used with image_source archive, not {rt.image_source}",
              "remove it, or set image_source: archive")
    if rt.kind != "container":
        for key in ("image_archive", "image_id"):
            if getattr(rt, key) is not None:
                p.add(f"sparkctl_runtime.{key}", f"only used with kind container, not {rt.kind}", "remove it")
    prof = d.profile
    if prof is None:
        return
    if rt.kind == "lab" and prof.simulator is None:
        p.add(
            "sparkctl_profile",
            f"runtime kind lab needs a simulator profile, {prof.name} has none",
            "use the lab profile in the lab, or a real runtime (container, venv) on Sparks",
        )
    if rt.kind == "venv" and prof.simulator is not None:
        p.add(
            "sparkctl_runtime.kind",
            f"{rt.kind} cannot serve the simulator profile {prof.name}",
            "use kind container (the lab's engine image) or lab for the lab profile, "
            "or a real profile (r4-nvme, m1-1m)",
        )
    _check_kit(d, p, rt, prof)
    _check_required_image(d, p, rt, prof)


def _check_required_image(d: Draft, p: Problems, rt: Runtime, prof: Profile) -> None:
    """A profile that names the image it needs (``image:``, m1-1m): that build or its pinned ID only.

    Its adapters (Engram rows from NVMe) exist only in the publisher's image; a stock or another
    publisher's image would serve with the Engram tables in unified memory."""
    need = prof.image
    if need is None or rt.kind == "lab":  # the lab kind is refused above for a non-simulator profile
        return
    what = f"the profile {prof.name} needs the image built from {need.source}'s {need.dockerfile}"
    if rt.kind != "container":
        p.add("sparkctl_runtime.kind", f"{rt.kind}: {what} (its adapters exist only there)",
              "use kind container with image_source: build")
        return
    if rt.image_source != "build":
        if rt.image_id is None:
            p.add("sparkctl_runtime.image_source",
                  f"{rt.image_source} of {rt.image!r}: {what}; any other image loads the Engram tables "
                  "into unified memory",
                  f"set image_source: build with sparkctl_kit pinning {need.source} at a commit (only "
                  "the build context, never mounted), or pin the image built from it with "
                  "sparkctl_runtime.image_id")
        return
    kit: Kit | None = d.get("sparkctl_kit")
    if kit is not None and kit.source == "git" and kit.url is not None:
        url = str(kit.url).lower().removesuffix(".git").rstrip("/")
        if not url.endswith("/" + need.source.lower()):
            p.add("sparkctl_kit.url", f"{kit.url}: {what}, and this kit is another repository",
                  f"pin {need.source} at a commit (https://github.com/{need.source}.git)")


def _check_kit(d: Draft, p: Problems, rt: Runtime, prof: Profile) -> None:
    """sparkctl_kit against the source kind, the runtime and what the profile declares."""
    kit: Kit | None = d.get("sparkctl_kit")
    # Only a container carries a kit (mounted read-only, overlays bound over the image's SGLang):
    # a venv's stock SGLang, or the simulator, would serve a kit-only profile without it.
    carries = rt.kind == "container"
    if prof.kit is not None and prof.kit.required and not carries:
        p.add(
            "sparkctl_runtime.kind",
            f"{rt.kind} cannot carry the serving kit the profile {prof.name} cannot serve without "
            "(only a container mounts the kit and its SGLang overlays)",
            "set kind: container with the kit's image (image_source: build, or its image by digest) "
            "and pin the kit in sparkctl_kit",
        )
    if kit is None:
        if prof.kit is not None and prof.kit.required and rt.kind == "container":
            p.add(
                "sparkctl_kit",
                f"the profile {prof.name} cannot serve without its serving kit",
                "pin the publisher's repository: {source: git, url: …, commit: <40 hex>} "
                "(see the example site: `sparkctl init --example DIR`)",
            )
        if rt.kind == "container" and rt.image_source == "build":
            p.add("sparkctl_runtime.image_source", "build needs the serving kit's Dockerfile",
                  "configure sparkctl_kit, or pull the image by digest")
        return
    if kit.source == "git":
        for key in ("url", "commit"):
            if getattr(kit, key) is None:
                p.add(f"sparkctl_kit.{key}", "missing for source git",
                      "the repository URL" if key == "url" else "pin the full 40-hex commit, never a branch")
        for key in ("path", "location"):
            if getattr(kit, key) is not None:
                p.add(f"sparkctl_kit.{key}", "only used with source dir or tar",
                      "remove it (a git kit is fetched on the controller)")
    else:
        if kit.path is None:
            p.add("sparkctl_kit.path", f"missing for source {kit.source}",
                  "the kit's directory" if kit.source == "dir" else "the kit's .tar/.tar.gz archive")
        for key in ("url", "commit"):
            if getattr(kit, key) is not None:
                p.add(f"sparkctl_kit.{key}", "only used with source git", "remove it, or set source: git")
    if not carries:
        if not (prof.kit is not None and prof.kit.required):  # said above, on the runtime
            p.add("sparkctl_kit",
                  f"a serving kit is mounted into the rank's container; runtime kind is {rt.kind}",
                  "set sparkctl_runtime.kind: container, or remove sparkctl_kit")
    elif prof.kit is None:
        if prof.image is None or prof.image.requires != "build-from-kit":
            p.add("sparkctl_kit", f"the profile {prof.name} declares no kit (mount point, overlays)",
                  "remove sparkctl_kit, or use a profile that mounts one (r4-nvme)")
    elif prof.kit.entrypoint == "launcher" and "api_key" in (d.get("sparkctl_secrets") or {}):
        p.add("sparkctl_profile_overrides.kit.entrypoint",
              "the kit's launcher builds SGLang's arguments itself and cannot pass the API key",
              "keep entrypoint engine: it makes the launcher's kit checks too (sparkctl's pre-start in the "
              "rank's container) and passes the API key from a 0600 file; "
              "or remove sparkctl_secrets.api_key and rely on sparkctl_api_allow")
    elif rt.image_source == "build" and prof.kit.dockerfile is None:
        p.add("sparkctl_runtime.image_source", f"the kit of {prof.name} has no Dockerfile to build",
              "pull the image by digest or load an archive")


def check_checkpoint(d: Draft, p: Problems) -> None:
    ck: Checkpoint | None = d.get("sparkctl_checkpoint")
    if ck is None:
        return
    if ck.source == "hf":
        if ck.repo is None:
            p.add("sparkctl_checkpoint.repo", "missing for source hf", "set the owner/name of the repository")
        if ck.revision is None:
            p.add("sparkctl_checkpoint.revision", "missing for source hf", "pin the full 40-hex commit")
        if ck.path is not None or ck.location is not None:
            p.add(
                "sparkctl_checkpoint.path" if ck.path is not None else "sparkctl_checkpoint.location",
                "only used with source dir",
                "remove it (hf checkpoints land in sparkctl_paths.model_dir)",
            )
    else:
        if ck.path is None:
            p.add(
                "sparkctl_checkpoint.path", "missing for source dir", "set the directory holding config.json"
            )
        if ck.location is None:
            p.add(
                "sparkctl_checkpoint.location",
                "missing for source dir",
                "say where that directory is: controller or head",
            )


def check_switch(d: Draft, p: Problems) -> None:
    if len(d.switch_names) > 1:
        p.add(
            "all.children.switches.hosts",
            f"{len(d.switch_names)} switches ({_names(d.switch_names)})",
            "list zero or one switch; all Sparks hang off one RoCE switch",
        )
    sw = d.switch
    if sw is None:
        return
    where = f"switches.{sw.name}.sparkctl_switch_ports"
    by_name = {n.name: n for n in d.nodes}
    for stray in sorted(set(sw.ports) - set(d.spark_names)):
        p.add(f"{where}.{stray}", f"no node named {stray}", "map only the hosts of the sparks group")
    taken: dict[str, str] = {}
    for name in d.spark_names:
        mapping = sw.ports.get(name)
        if mapping is None:
            p.add(
                f"{where}.{name}",
                "missing: the node has no switch port",
                "add the switch port each of its fabric netdevs is cabled to",
            )
            continue
        node = by_name.get(name)
        if node is not None:
            netdevs = [port.netdev for port in node.fabric_ports]
            for netdev in netdevs:
                if netdev not in mapping:
                    p.add(
                        f"{where}.{name}.{netdev}", "missing", "add the switch port this netdev is cabled to"
                    )
            for netdev in mapping:
                if netdev not in netdevs:
                    p.add(
                        f"{where}.{name}.{netdev}",
                        f"{netdev} is not one of {name}'s fabric netdevs",
                        f"use {', '.join(netdevs)}",
                    )
        for port in sorted(set(mapping.values())):
            if port in taken and taken[port] != name:
                p.add(
                    f"{where}.{name}",
                    f"switch port {port} is already cabled to {taken[port]}",
                    "each node has its own switch port",
                )
            taken.setdefault(port, name)


# A Spark's ConnectX-7 has two ports: three nodes cable into a full triangle, four cannot all reach
# each other directly. From this many nodes up the fabric's two subnets need a RoCE switch.
SWITCHED_FROM_NODES = 4


def check_fabric_needs_switch(d: Draft, p: Problems) -> None:
    count = len(d.spark_names)
    if (d.get("sparkctl_topology") or "switch") != "switch":
        return  # a cabled topology's node count and cables are checked by topology.check_cabling
    if count >= SWITCHED_FROM_NODES and not d.switch_names:
        p.add(
            "all.children.switches",
            f"{count} nodes and no switch: a Spark's two ConnectX-7 ports make a three-node triangle, "
            f"not a mesh of {count}, so the fabric subnets need a RoCE switch",
            "add the switch under switches (ansible_host, sparkctl_switch_type, sparkctl_switch_mtu, "
            "sparkctl_switch_ports; see hosts.yml of the example site: `sparkctl init --example DIR`)",
        )


# Speculative algorithms SGLang counts as the DFlash family (is_dflash_family): with
# --max-running-requests at 8 or more it holds new prefills until min(4, max(2, (n + 5) // 6))
# slots are free, unless --min-free-slots-delay is given at 1 or less (an explicit value wins).
DELAYER_ALGORITHMS = ("DFLASH", "DSPARK")
DELAYER_FROM_SLOTS = 8


def check_admission_delayer(d: Draft, p: Problems) -> None:
    prof = d.profile
    if prof is None:
        return
    algo = prof.args.get("--speculative-algorithm")
    slots = sglang_flags.number("--max-running-requests", prof.args.get("--max-running-requests"))
    if not isinstance(algo, str) or algo.upper() not in DELAYER_ALGORITHMS:
        return
    if slots is None or slots < DELAYER_FROM_SLOTS:
        return
    flag = "--min-free-slots-delay"
    delay = sglang_flags.number(flag, prof.args.get(flag))
    if delay is not None and delay <= 1:
        return
    wait = min(4, max(2, (int(slots) + 5) // 6))
    # Name what the site changed: the delay flag it removed or raised, else the slots it raised.
    changed = (flag, "--max-running-requests", "--speculative-algorithm")
    culprit = next((f for f in changed if _overridden(d, f)), None)
    path = (f"sparkctl_profile_overrides.args.{culprit}" if culprit
            else f"sparkctl_profile ({prof.name}).args.{flag}")
    now = "not set" if delay is None else f"{prof.args.get(flag)}"
    p.add(
        path,
        f"{algo} with --max-running-requests {int(slots)} and {flag} {now}: SGLang's admission delayer "
        f"holds new prefills until {wait} slots are free, so {int(slots)} configured requests quietly "
        "run as fewer (about 7 of 8)",
        f"set {flag}: 1 in sparkctl_profile_overrides.args (1 or less disables the delayer)",
    )


# The secrets sparkctl knows how to deliver; a misspelt name would otherwise be ignored silently.
SECRET_NAMES = {
    "api_key": "the key rank 0 requires from API clients (passed in a 0600 file, never argv)",
}


def check_secrets(d: Draft, p: Problems) -> None:
    for name in d.get("sparkctl_secrets") or {}:
        if name not in SECRET_NAMES:
            known = ", ".join(f"{k} ({v})" for k, v in SECRET_NAMES.items())
            p.add(
                f"sparkctl_secrets.{name}",
                f"unknown secret{suggest(name, SECRET_NAMES)}",
                f"use one of: {known}",
            )


def check_memory(d: Draft, p: Problems, warnings: list[str]) -> None:
    prof = d.profile
    if prof is None:
        return
    for text in prof.memory_problems():
        if text.startswith("KV pin"):
            flags = ("--max-total-tokens", "--mem-fraction-static")
        else:
            flags = ("--chunked-prefill-size", "--context-length")
        flag = next((f for f in flags if _overridden(d, f)), None)
        path = (
            f"sparkctl_profile_overrides.args.{flag}"
            if flag
            else f"sparkctl_profile ({prof.name}).args.{flags[0]}"
        )
        what, _, todo = text.rpartition("; ")
        p.add(path, what or text, todo or "lower it")
    # The publisher's rule of thumb: the transient should fit what --mem-fraction-static leaves
    # outside the static pool. Exceeding it is allowed when the pin leaves room (memory_problems
    # says whether it does), but it is worth knowing before sending a full-context prompt.
    outside = prof.memory.unified_gib - prof.static_pool_gib
    if outside < prof.prefill_transient_gib <= prof.transient_limit_gib:
        warnings.append(
            f"prefill transient at full context {prof.memory.prefill_transient_bytes_per_token2:g} B x "
            f"{prof.chunk:,} x {prof.context_length:,} = {prof.prefill_transient_gib:.2f} GiB exceeds the "
            f"{outside:.2f} GiB outside the static pool ({prof.memory.unified_gib} GiB x "
            f"(1 - {prof.mem_fraction_static})); it fits only because the KV pin leaves "
            f"{prof.transient_limit_gib:.2f} GiB free — keep the pin, or lower --chunked-prefill-size"
        )


def check_disk(d: Draft, p: Problems) -> None:
    ck: Checkpoint | None = d.get("sparkctl_checkpoint")
    prof = d.profile
    if ck is None or prof is None or ck.size_gib is None:
        return
    m = prof.memory
    need = ck.size_gib + m.engram_packed_gib + m.disk_margin_gib
    # A node of a group with a profile of its own is held to that profile (topology.check_group_profiles).
    other = {name for g in d.groups if g.profile is not prof for name in g.nodes}
    for n in d.nodes:
        if n.name in other:
            continue
        if n.nvme_gib is not None and need > n.nvme_gib:
            p.add(
                f"sparks.{n.name}.sparkctl_nvme_gib",
                f"{n.nvme_gib:g} GiB < checkpoint {ck.size_gib:g} + packed Engram {m.engram_packed_gib:g} "
                f"+ margin {m.disk_margin_gib:g} = {need:.2f} GiB",
                "free space on the NVMe filesystem, "
                "or correct sparkctl_nvme_gib / sparkctl_checkpoint.size_gib",
            )


def check_mgmt(d: Draft, p: Problems) -> None:
    mgmt: Mgmt | None = d.get("sparkctl_mgmt")
    fabric: Fabric | None = d.get("sparkctl_fabric")
    if mgmt is not None:
        for n in d.nodes:
            for i, port in enumerate(n.fabric_ports):
                if str(port.netdev) == str(mgmt.interface):
                    p.add(
                        "sparkctl_mgmt.interface",
                        f"{mgmt.interface} is also {n.name}'s fabric port [{i}]",
                        "name the interface that carries the management address; the fabric role "
                        "rewrites the fabric ports and must never touch it",
                    )
    if fabric is not None and not fabric.stage_over_fabric and fabric.bootstrap_over == "fabric":
        p.add(
            "sparkctl_fabric.stage_over_fabric",
            "false stages over the management network, but the firewall opens the stage agents' port "
            "to the nodes' management addresses only when bootstrap_over is mgmt (staging would fail "
            "after provision)",
            "keep stage_over_fabric: true, or set bootstrap_over: mgmt as well",
        )


# How each switch type names its ports; anything else never reaches a device.
SWITCH_PORT_NAMES = {
    "routeros": (re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"),
                 "a RouterOS interface name such as qsfp56-dd-1-1"),
    "nvue": (re.compile(r"^swp[0-9]+(s[0-9]+)?$"), "a Cumulus port name such as swp1 or swp1s0"),
    "linux": (re.compile(r"^(?!\.{1,2}$)[A-Za-z0-9_.-]{1,15}$"),
              "a Linux interface name (1-15 of A-Z a-z 0-9 _ . -)"),
}


def check_switch_port_names(d: Draft, p: Problems) -> None:
    sw = d.switch
    if sw is None:
        return
    pattern, what = SWITCH_PORT_NAMES[sw.type]
    for node, mapping in sw.ports.items():
        for netdev, port in mapping.items():
            field = f"switches.{sw.name}.sparkctl_switch_ports.{node}.{netdev}"
            if any(ord(c) < 32 or ord(c) == 127 for c in port):
                p.add(
                    field,
                    f"{port!r} contains a control character (a newline would end the switch's command "
                    "there and run the rest as another)",
                    "write the port's name on one line, exactly as the switch shows it",
                )
            elif not pattern.fullmatch(port):  # not match(): `$` would let a trailing newline through
                p.add(field, f"{port!r} is not {what}",
                      "write the port's name exactly as the switch shows it")


def check_supervisor(d: Draft, p: Problems) -> None:
    """The breaker must be able to open: its restarts, each at least one probe and the settle pause
    apart, have to fit in its window, or a crash loop would restart the group forever."""
    sup: Supervisor | None = d.get("sparkctl_supervisor")
    if sup is None:
        return
    shortest = sup.max_restarts * (sup.interval_s + sup.settle_s)
    if sup.window_s <= shortest:
        p.add(
            "sparkctl_supervisor.window_s",
            f"{sup.window_s:g} s cannot hold {sup.max_restarts} restarts of at least interval_s "
            f"{sup.interval_s:g} + settle_s {sup.settle_s:g} s each ({shortest:g} s): the circuit "
            "breaker would never open",
            f"make window_s longer than {shortest:g} s (the default is 3600), or lower max_restarts",
        )


def check_upgrade(d: Draft, p: Problems) -> None:
    """An upgrade section must pin something: an empty one would take the group down for nothing."""
    upgrade = d.get("sparkctl_upgrade")
    if upgrade is not None and upgrade.empty:
        p.add(
            "sparkctl_upgrade",
            "pins nothing to apply (no packages, debs or commands, and reboot is false)",
            "pin packages with exact versions, list .deb files or commands, or remove the section",
        )


CHECKS: list[
Callable[[Draft, Problems], None]] = [
    check_topology,
    check_addresses,
    check_mgmt,
    check_pcie_halves,
    check_mtu,
    check_ports,
    check_paths,
    check_runtime,
    check_admission_delayer,
    check_checkpoint,
    check_switch,
    check_fabric_needs_switch,
    check_switch_port_names,
    check_secrets,
    check_disk,
    check_upgrade,
    check_supervisor,
]


def check_router(d: Draft, p: Problems, warnings: list[str]) -> None:
    """The router's node is a Spark, its ports are its own, and it has groups to route to."""
    router: Router | None = d.get("sparkctl_router")
    if router is None:
        return
    known = set(d.spark_names)
    if router.node not in known:
        p.add("sparkctl_router.node", f"no node named {router.node}",
              f"name one host of the sparks group ({', '.join(sorted(known)) or 'none listed'})")
    taken: dict[int, str] = {}
    ports = d.get("sparkctl_ports")
    if ports is not None:
        for name in type(ports).model_fields:
            taken.setdefault(int(getattr(ports, name)), f"sparkctl_ports.{name}")
    node = next((n for n in d.nodes if n.name == router.node), None)
    if node is not None:
        taken.setdefault(node.ssh_port, f"the SSH port of {node.name}")
    for field, value in (("port", router.port), ("metrics_port", router.metrics_port)):
        if value in taken:
            p.add(f"sparkctl_router.{field}", f"{value} is also {taken[value]}",
                  "give the router a port no rank, exporter or sshd uses (e.g. 8889 and 29000)")
        taken.setdefault(value, f"sparkctl_router.{field}")
    if len(d.groups) == 1:
        warnings.append(f"sparkctl_router: one serving group ({d.groups[0].name}); the router fronts it "
                        "alone (list two or more groups in sparkctl_groups to spread requests)")


def run_checks(d: Draft, p: Problems) -> list[str]:
    """Run every cross-field check; returns warnings (facts that do not block)."""
    warnings: list[str] = []
    for check in CHECKS:
        check(d, p)
    check_memory(d, p, warnings)
    check_shape(d, p, warnings)
    check_router(d, p, warnings)
    return warnings
