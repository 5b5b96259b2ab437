"""One SGLang rank per node: its argv, environment, container invocation, systemd unit and files.

Every node gets the same argv except ``--node-rank``; the environment differs only in the node's
own bootstrap address. The API key never appears on a command line: it sits in a 0600 YAML file
that SGLang merges into its arguments through ``--config``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

from sparkctl.errors import InputError
from sparkctl.nodeside import images
from sparkctl.render import common as c
from sparkctl.render import fabric, kit, switch

if TYPE_CHECKING:  # annotations only: render never imports the model at run time
    from sparkctl.model.cluster import Cluster, Node, RuntimeKind


def places(cluster: Cluster) -> dict[str, str]:
    """Values of the profile placeholders for this cluster's runtime."""
    run_dir = PurePosixPath(cluster.paths.run_dir)
    if cluster.runtime.kind == "container":
        return {
            "model_dir": container_model_dir(cluster),
            "engram_dir": c.CONTAINER_ENGRAM_DIR,
            "cache_dir": c.CONTAINER_CACHE_DIR,
            "state_dir": c.CONTAINER_STATE_DIR,
        }
    return {
        "model_dir": str(cluster.paths.model_dir),
        "engram_dir": str(cluster.paths.engram_dir),
        "cache_dir": str(run_dir / "cache"),
        "state_dir": str(run_dir / "state"),
    }


def container_model_dir(cluster: Cluster) -> str:
    return f"{c.CONTAINER_MODEL_ROOT}/{PurePosixPath(cluster.paths.model_dir).name}"


def container_name(cluster: Cluster, node: Node) -> str:
    return f"sparkctl-{cluster.name}-r{node.rank}"


def program(cluster: Cluster) -> list[str]:
    """argv[0:2] of the rank: the only part that differs between runtimes."""
    kind = cluster.runtime.kind
    if kind == "container":
        return ["sglang", "serve"]
    if kind == "venv":
        if not cluster.runtime.venv_path:
            raise InputError("sparkctl_runtime.venv_path: missing", hint="set it when kind is venv")
        return [str(PurePosixPath(cluster.runtime.venv_path) / "bin" / "sglang"), "serve"]
    return [c.LAB_RANK_PROGRAM, "serve"]


def dist_init_addr(cluster: Cluster) -> str:
    return f"{cluster.bootstrap_ips[cluster.head.name]}:{cluster.ports.dist_init}"


def has_rank_secrets(cluster: Cluster) -> bool:
    return any(name in cluster.secrets for name in c.RANK_SECRET_KEYS)


def rank_argv(cluster: Cluster, node: Node) -> list[str]:
    """The full SGLang argv of one rank (full flag names, profile order, cluster flags last)."""
    fills = places(cluster)
    argv = [*program(cluster), "--model-path", fills["model_dir"]]
    for flag, value in cluster.profile.args.items():
        argv += c.flag_values(flag, c.fill_arg(value, fills))
    argv += [
        "--nnodes", str(len(cluster.nodes)),
        "--node-rank", str(node.rank),
        "--dist-init-addr", dist_init_addr(cluster),
        "--host", "0.0.0.0",
        "--port", str(cluster.ports.api),
    ]
    if has_rank_secrets(cluster):
        argv += ["--config", c.RANK_SECRETS_FILE]
    return argv


def bootstrap_netdev(cluster: Cluster, node: Node) -> str:
    if cluster.fabric.bootstrap_over == "fabric":
        return str(node.fabric_ports[0].netdev)
    return str(cluster.mgmt.interface)


def network_env(cluster: Cluster, node: Node) -> dict[str, str]:
    """What NCCL, Gloo and SGLang need to find this node's peers."""
    netdev = bootstrap_netdev(cluster, node)
    env = {
        # The address SGLang's cross-node broadcaster advertises to the other ranks.
        "SGLANG_HOST_IP": str(cluster.bootstrap_ips[node.name]),
        # "=" makes NCCL match the interface name exactly.
        "NCCL_SOCKET_IFNAME": f"={netdev}",
        "GLOO_SOCKET_IFNAME": netdev,
        # Every fabric port: both PCIe halves of the cabled port on a switch, so NCCL drives the
        # full 200G; on a triangle or a ring the port of each cable (both physical ports).
        "NCCL_IB_HCA": "=" + ",".join(f"{p.hca}:1" for p in node.fabric_ports),
    }
    if traffic_class(cluster) is not None:
        env["NCCL_IB_TC"] = str(c.ROCE_TOS)
        env["B12X_ROCE_TRAFFIC_CLASS"] = str(c.ROCE_TOS)
    env.update(fabric_nccl_env(cluster))
    return env


# The prefix length NCCL compares addresses under to tell which local port reaches a peer.
PREFIX_ENV = "NCCL_IB_SUBNET_PREFIX_LEN"


def fabric_nccl_env(cluster: Cluster) -> dict[str, str]:
    """NCCL variables the site's cabling decides (none on a switch).

    On a cabled topology (triangle, ring, pair) every subnet is one cable, and a profile that has
    NCCL route by subnet (``NCCL_IB_SUBNET_PREFIX_LEN``, the publisher's value for its own /24
    cables) gets the prefix of the site's cables instead, so that /30 or /31 cables still tell one
    cable from the next."""
    if not fabric.cabled(cluster) or PREFIX_ENV not in cluster.profile.env:
        return {}
    prefix = fabric.subnet_prefix_len(cluster)
    if prefix is None:
        lengths = ", ".join(str(s) for s in cluster.fabric.subnets)
        raise InputError(
            f"sparkctl_fabric.subnets: {lengths} have different prefix lengths, but {cluster.profile.name} "
            f"routes NCCL by subnet ({PREFIX_ENV}: one prefix length for every cable)",
            hint="give every cable's subnet the same prefix length (e.g. all /24, or all /31)",
        )
    return {PREFIX_ENV: str(prefix)}


def traffic_class(cluster: Cluster) -> int | None:
    """The IP traffic class NCCL and RoCEnante mark their RoCE packets with, or None to leave them
    unmarked as both publishers do.

    ToS 106 (DSCP 26 + ECN) is sparkctl's addition to the published environment, and only worth
    setting where the packets land in a lossless class on both sides: the host QoS (host_qos: PFC
    on priority 3 for DSCP 26) and the switch sparkctl configures with PFC on that same priority.
    Marked packets crossing a switch without it would be no better off than unmarked ones. Node to
    node (a triangle, a ring, a pair) both ends of every cable are hosts with that same QoS, so the
    host QoS alone makes the class lossless there."""
    if not cluster.fabric.host_qos:
        return None
    if fabric.cabled(cluster) or switch.lossless_priority(cluster) == c.ROCE_PRIO:
        return c.ROCE_TOS
    return None


def rank_env(cluster: Cluster, node: Node) -> dict[str, str]:
    """The rank's whole environment: the profile's table, then the node's network variables."""
    fills = places(cluster)
    env = {key: c.fill(value, fills) for key, value in cluster.profile.env.items()}
    env.update(network_env(cluster, node))
    box = cluster.profile.container
    if cluster.runtime.kind == "container" and box.host_nccl_dir is not None:
        env["LD_LIBRARY_PATH"] = box.nccl_mount  # the host NCCL build bound there (container_command)
    if cluster.profile.simulator is not None:
        # The lab's simulated rank reads its behaviour (boot delay, token rate, held memory) here,
        # and where the serving kit is, to check it as the real launcher does.
        env.update(cluster.profile.simulator.environment())
        pk = kit.mounted(cluster)
        if pk is not None:
            env.update(cluster.profile.simulator.kit_environment(pk))
    return env


def docker_run(
    cluster: Cluster,
    name: str,
    mounts: Sequence[str],
    entrypoint: str,
    argv: Sequence[str],
    *,
    remove: bool = False,
    env_file: str = c.RANK_ENV_FILE,
) -> list[str]:
    """`docker run` of the pinned image: the one set of flags every container sparkctl starts gets.

    Host network and IPC, then what the profile's ``container`` section gives (the GPUs, the RDMA
    devices, locked memory and many open files on a Spark; less in the lab), the environment from
    a file (never ``-e KEY=VALUE`` on the command line), and never a pull: `sparkctl stage image`
    put the same image ID on every node.
    """
    box = cluster.profile.container
    cmd = [c.DOCKER, "run"]
    if remove:
        cmd.append("--rm")
    cmd += [
        "--name", name,
        "--pull", "never",
        "--network", "host",
        "--ipc", "host",
        "--cap-add", "IPC_LOCK",
    ]
    if box.privileged:
        cmd.append("--privileged")
    if box.shm_size is not None:
        cmd += ["--shm-size", box.shm_size]
    for limit, value in box.ulimits.items():
        cmd += ["--ulimit", f"{limit}={value}"]
    if box.gpus is not None:
        cmd += ["--gpus", box.gpus]
    for device in box.devices:
        cmd += ["--device", device]
    cmd += ["--env-file", env_file]
    for mount in mounts:
        cmd += ["--mount", mount]
    cmd += ["--entrypoint", entrypoint, run_image(cluster), *argv]
    return cmd


def run_image(cluster: Cluster) -> str:
    """The image `docker run` names: a built or loaded image by its name, a pulled one by the tag
    `stage image` derives from its digest on every node (a loaded image keeps no digest)."""
    return images.run_reference(str(cluster.runtime.image))


def bind(src: str | PurePosixPath, dst: str, readonly: bool = False) -> str:
    """One ``--mount`` value: a bind mount of a host path."""
    return f"type=bind,src={src},dst={dst}" + (",readonly" if readonly else "")


# The kit's pre-start checks (sparkctl.nodeside.prestart): where the spark_rank role installs the
# script on the node, and where the rank's container sees it (a read-only bind of that one file).
PRESTART_SCRIPT = "/opt/sparkctl/rank/prestart.py"
CONTAINER_PRESTART = "/sparkctl-prestart.py"


def prestart_script(cluster: Cluster) -> str | None:
    """The pre-start script's path on the node when the rank's container runs it (a mounted kit)."""
    return PRESTART_SCRIPT if kit.mounted(cluster) is not None else None


def prestart_command(cluster: Cluster, argv: Sequence[str]) -> list[str]:
    """``python3 <script> <checks> --``: what the container runs before the engine or the launcher.

    The checks are the publisher's launcher's, with its inputs, as the profile's kit declares them:
    the overlay manifest always; with ``kit.lock`` the runtime configuration, the checkpoint's
    config.json (under the rendered --model-path, as the engine reads it), the image's SGLang commit
    and the adapters; each compile step's product against its record and each extracted archive's
    files against its manifest (``kit.build``). Empty without a mounted kit.
    """
    pk = kit.mounted(cluster)
    if pk is None:
        return []
    cmd = ["python3", CONTAINER_PRESTART, "--kit", pk.mount, "--manifest", pk.manifest,
           "--overlay-target", pk.overlay_target]
    if pk.lock is not None:
        model = argv[list(argv).index("--model-path") + 1]
        cmd += ["--lock", pk.lock, "--model-config", f"{model}/config.json"]
    for step in pk.build:
        if step.compile is not None and step.compile.record is not None:
            rec = step.compile.record
            cmd += ["--build-record", rec.path, rec.key, step.compile.product]
        if step.extract is not None:
            cmd += ["--source-manifest", step.extract.manifest, step.extract.into]
    return [*cmd, "--"]


def engram_mounted(cluster: Cluster) -> bool:
    """Whether the rank's container binds the packed Engram directory (``paths.engram_dir``).

    Only where the profile's Engram tables are packed on the NVMe (``engram: nvme``). With
    ``engram: resident`` the tables live in each rank's unified memory, ``stage`` packs nothing and
    never creates that directory, and Docker refuses a bind whose source does not exist.
    """
    return cluster.profile.engram != "resident"


def container_command(cluster: Cluster, node: Node) -> list[str]:
    """`docker run` of the pinned image with the rank's argv (container runtime).

    With a mounted kit the container's entrypoint is the pre-start checks (``prestart_command``),
    which exec the engine (or the kit's launcher) unchanged once every check passed.
    """
    paths = cluster.paths
    run_dir = PurePosixPath(paths.run_dir)
    argv = rank_argv(cluster, node)
    mounts = [bind(paths.model_dir, container_model_dir(cluster), readonly=True)]
    if engram_mounted(cluster):
        mounts.append(bind(paths.engram_dir, c.CONTAINER_ENGRAM_DIR, readonly=True))
    pk = kit.mounted(cluster)
    if pk is not None:
        # The kit read-only where its adapters expect it, the files sparkctl renders for it, …
        mounts.append(bind(kit.current(cluster), pk.mount, readonly=True))
        mounts += [bind(src, dst, readonly=True) for src, dst in kit.file_binds(cluster)]
    mounts += [
        bind(run_dir / "cache", c.CONTAINER_CACHE_DIR),
        bind(run_dir / "state", c.CONTAINER_STATE_DIR),
    ]
    # The profile's run-directory binds (FlashInfer's autotune cache kept across restarts) and the
    # site's host NCCL build, when the container section names one.
    box = cluster.profile.container
    mounts += [bind(run_dir / b.src, b.dst, readonly=b.readonly) for b in box.binds]
    if box.host_nccl_dir is not None:
        mounts.append(bind(box.host_nccl_dir, box.nccl_mount, readonly=True))
    # … and one read-only bind per SGLang source overlay, over the file it replaces.
    mounts += [bind(src, dst, readonly=True) for src, dst in kit.overlay_binds(cluster)]
    if has_rank_secrets(cluster):
        mounts.append(bind(c.RANK_SECRETS_FILE, c.RANK_SECRETS_FILE, readonly=True))
    name = container_name(cluster, node)
    engine = list(argv)
    if pk is not None and pk.entrypoint == "launcher":
        # The kit's launcher checks the kit, then execs SGLang with the arguments it builds from
        # the cluster file (the same values as `argv`, which plan keeps showing).
        engine = [a.replace("${rank}", str(node.rank)) for a in pk.launcher]
    if pk is not None:
        # The launcher's checks, whichever entry point: the engine entry point skips none of them.
        mounts.append(bind(PRESTART_SCRIPT, CONTAINER_PRESTART, readonly=True))
        engine = [*prestart_command(cluster, argv), *engine]
    return docker_run(cluster, name, mounts, engine[0], engine[1:])


def nccl_check(cluster: Cluster, node: Node) -> dict[str, Any]:
    """The NCCL all-reduce of `sparkctl check fabric` on this node, run the way the rank runs.

    The same image (or venv), devices, limits and environment as the rank, so a pass means the
    rank's NCCL setup works. ``command`` is what the role runs after copying the script to
    ``script`` and the rank's environment file text to ``env_file``; ``env`` is the process
    environment to run it with (empty for a container: the environment is in the file).
    """
    tail = [
        "--rank", str(node.rank),
        "--world-size", str(len(cluster.nodes)),
        "--master-addr", str(cluster.bootstrap_ips[cluster.head.name]),
        "--master-port", str(cluster.ports.nccl_test),
        "--json",
    ]
    kind = cluster.runtime.kind
    env: dict[str, str] = {}
    if kind == "container":
        mounts = [bind(c.NCCL_CHECK_SCRIPT, c.CONTAINER_NCCL_SCRIPT, readonly=True)]
        box = cluster.profile.container
        if box.host_nccl_dir is not None:  # the rank's NCCL (LD_LIBRARY_PATH is in its environment)
            mounts.append(bind(box.host_nccl_dir, box.nccl_mount, readonly=True))
        name = f"sparkctl-{cluster.name}-nccl-r{node.rank}"
        command = docker_run(
            cluster, name, mounts, "python3", [c.CONTAINER_NCCL_SCRIPT, *tail],
            remove=True, env_file=c.NCCL_CHECK_ENV_FILE,
        )
    else:
        if kind == "venv":
            python = str(PurePosixPath(program(cluster)[0]).parent / "python")
            command = [python, c.NCCL_CHECK_SCRIPT, *tail]
        else:
            command = ["/usr/bin/env", "python3", c.NCCL_CHECK_SCRIPT, *tail]
        env = rank_env(cluster, node)
    return {
        "command": command,
        "env": env,
        "env_file": c.NCCL_CHECK_ENV_FILE,
        "script": c.NCCL_CHECK_SCRIPT,
    }


def api_url(cluster: Cluster, node: Node | None = None) -> str:
    """Where a rank's HTTP API answers (rank 0's by default): its management address, ``ports.api``."""
    target = cluster.head if node is None else node
    return f"http://{target.mgmt_ip}:{cluster.ports.api}"


def served_model_name(cluster: Cluster) -> str:
    """The model name rank 0 serves: the profile's --served-model-name, else SGLang's default,
    the --model-path the rank is given."""
    name = cluster.profile.served_model_name
    return name if name is not None else places(cluster)["model_dir"]


def launch_command(cluster: Cluster, node: Node) -> list[str]:
    """What the unit's ExecStart runs: docker, the venv's sglang, or the simulator."""
    if cluster.runtime.kind == "container":
        return container_command(cluster, node)
    argv = rank_argv(cluster, node)
    if cluster.runtime.kind == "lab":
        return ["/usr/bin/env", *argv]
    return argv


def start_waves(cluster: Cluster) -> list[list[int]]:
    """The order the ranks start in, as waves: every worker (ranks 1..n-1) first, then rank 0, which
    hosts the rendezvous and the API (reference: seed-profiles §A start order). The one definition:
    the spark_rank role's start tasks (``sparkctl_cluster.start_waves``) and the fast path of `up`
    (``sparkctl.serve.fastup``) both read it; a wave starts only after the one before is active."""
    ranks = sorted(n.rank for n in cluster.nodes)
    return [[r for r in ranks if r != 0], [0]]


def drain_s(cluster: Cluster) -> int:
    """Seconds rank 0 may drain after SIGTERM (the profile's), before it is shut down by force."""
    return int(cluster.profile.gates.drain_s)


# Seconds a worker has to leave once its group's rank 0 is gone: rank 0 told every scheduler to exit
# before it left (or it died and never will), so a worker still running after this is shut down by
# force rather than waited on for the whole drain period (a rank restarted on its own, outside the
# group, is never told: `up` healing a degraded group waited out the 75 s drain for it).
LEAVE_S = 30


def stop_timeout_s(cluster: Cluster, node: Node) -> int:
    # Rank 0 drains in-flight requests, then tells every scheduler to exit; workers ignore
    # SIGTERM and leave when that broadcast arrives, so they need less.
    return drain_s(cluster) + 15 if node.rank == 0 else LEAVE_S + 15


NAME_FREE_TRIES = 30


def free_name_script(name: str, tries: int = NAME_FREE_TRIES) -> str:
    """Shell run before each start: remove the rank's old container and wait until its name is free.

    A container left by an earlier start (exited, killed with its node, or still being created or
    removed by the engine when the unit stopped) would make `docker run --name` fail with a name
    conflict. One `docker rm --force` is not always enough while the engine is still busy with it,
    so this checks again at once after each removal (usually the name is free: no wait), and only
    while it is still taken removes it again once a second; it fails the start naming the container
    when the name is still taken after ``tries`` removals."""
    d = c.DOCKER
    return (f"i=0; while {d} container inspect {name} >/dev/null 2>&1; do "
            f"if [ $i -ge {int(tries)} ]; then "
            f"echo \"container {name} still exists after {int(tries)} removals: "
            f"$({d} container inspect --format '{{{{.State.Status}}}}' {name} 2>&1)\" >&2; exit 1; fi; "
            "if [ $i -gt 0 ]; then sleep 1; fi; "
            f"{d} rm --force {name} >/dev/null 2>&1 && echo \"removed the earlier container {name}\"; "
            "i=$((i + 1)); done")


def rank_unit(cluster: Cluster, node: Node) -> str:
    """The systemd unit that runs this node's rank. It is started by `sparkctl up`, never at boot."""
    profile = cluster.profile
    kind = cluster.runtime.kind
    timeout = stop_timeout_s(cluster, node)
    after = ["network-online.target"]
    if cluster.fabric.host_qos:
        after.append(c.QOS_UNIT_NAME)
    if kind == "container":
        after.append("docker.service")
    role = "head: rendezvous and HTTP API" if node.rank == 0 else "worker"
    lines = [
        c.header(f"SGLang rank {node.rank} of {cluster.name} on {node.name}"),
        "[Unit]",
        f"Description=sparkctl SGLang rank {node.rank}/{len(cluster.nodes)} ({role}), "
        f"profile {profile.name}",
        "Wants=network-online.target",
        f"After={' '.join(after)}",
    ]
    if kind == "container":
        lines.append("Requires=docker.service")
    lines += [
        "",
        "[Service]",
        "Type=exec",
        f"EnvironmentFile={c.RANK_ENV_FILE}",
        f"WorkingDirectory={cluster.paths.run_dir}",
    ]
    name = container_name(cluster, node) if kind == "container" else None
    if name:
        lines.append("ExecStartPre=" + c.systemd_command(["/bin/sh", "-c", free_name_script(name)]))
    lines.append("ExecStart=" + c.systemd_command(launch_command(cluster, node)))
    if name:
        lines.append(f"ExecStop={c.DOCKER} stop --time {timeout - 15} {name}")
    lines += [
        "# Any exit fails the whole group: `sparkctl up` restarts all four ranks together, never one.",
        "Restart=no",
        "KillMode=mixed",
        f"TimeoutStopSec={timeout}",
        "LimitMEMLOCK=infinity",
        "LimitNOFILE=1048576",
        "SyslogIdentifier=sparkctl-rank",
        "",
        "# No [Install] section: after a reboot the node waits for `sparkctl up`, so a lone rank",
        "# never joins a half-started group.",
    ]
    return "\n".join(lines) + "\n"


def rank_env_text(cluster: Cluster, node: Node) -> str:
    return c.env_file_text(rank_env(cluster, node), f"environment of SGLang rank {node.rank} (mode 0600)")


def rank_secret_names(cluster: Cluster) -> list[str]:
    """The inventory secrets the rank's --config file holds."""
    return [name for name in c.RANK_SECRET_KEYS if name in cluster.secrets]


def rank_secrets_text(cluster: Cluster, values: Mapping[str, str] | None = None) -> str:
    """The --config file: with ``values`` (name -> resolved secret) what the rank role writes
    (mode 0600), without them the same file with ``<secret:NAME>`` markers (what `plan` shows).

    Each value is a JSON string, which YAML reads back unchanged whatever characters it holds.
    """
    lines = [c.header("SGLang arguments that must not appear on a command line (mode 0600)")]
    for name in rank_secret_names(cluster):
        value = c.secret_mark(name) if values is None else values[name]
        lines.append(f"{c.RANK_SECRET_KEYS[name]}: {json.dumps(value)}\n")
    return "".join(lines)


@dataclass(frozen=True)
class RankLaunch:
    """How one node's rank is launched: the ``rank_launch`` entry of `plan --json` (design.md), typed.

    ``rank_launch`` builds it from the cluster; ``as_json`` is the entry the plan document, the vars
    plugin and the spark_rank role read (key order and values as they always were); ``from_json``
    reads an entry back (a plan document handed to the boot watch, the probe or the stop path).
    """

    argv: tuple[str, ...]  # SGLang's argv (what `plan` shows; a launcher kit builds the same values)
    env: Mapping[str, str]  # the rank's environment (the env file's content)
    runtime: RuntimeKind
    unit: str  # the systemd unit text
    command: tuple[str, ...]  # what the unit's ExecStart runs
    stop_timeout_s: int
    drain_s: int  # the profile's drain period after SIGTERM (rank 0)
    leave_s: int = LEAVE_S  # a worker's time to leave once its rank 0 is gone
    unit_name: str = c.RANK_UNIT_NAME
    env_file: str = c.RANK_ENV_FILE
    # The container runtime only: the container's name, the image it runs, the rendered kit files.
    container: str | None = None
    image: str | None = None
    kit_files: tuple[str, ...] = field(default=())
    # With a mounted kit: where the role installs the pre-start script (sparkctl.nodeside.prestart).
    prestart: str | None = None

    @property
    def unit_file(self) -> str:
        return f"/etc/systemd/system/{self.unit_name}"

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "argv": list(self.argv),
            "env": dict(self.env),
            "runtime": self.runtime,
            "unit": self.unit,
            "unit_name": self.unit_name,
            "command": list(self.command),
            "env_file": self.env_file,
            "stop_timeout_s": self.stop_timeout_s,
            "drain_s": self.drain_s,
            "leave_s": self.leave_s,
        }
        if self.runtime == "container":
            out["container"] = self.container
            out["image"] = self.image
            out["kit_files"] = list(self.kit_files)
            if self.prestart is not None:
                out["prestart"] = self.prestart
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RankLaunch:
        """An entry read back; a key it lacks takes the value a rendered entry would have had."""
        runtime = data.get("runtime", "container")
        if runtime not in ("container", "venv", "lab"):
            raise InputError(f"rank_launch.runtime: {runtime!r} is not container, venv or lab")
        container, image = data.get("container"), data.get("image")
        return cls(
            argv=tuple(str(a) for a in data.get("argv") or ()),
            env={str(k): str(v) for k, v in (data.get("env") or {}).items()},
            runtime=runtime,
            unit=str(data.get("unit", "")),
            command=tuple(str(a) for a in data.get("command") or ()),
            stop_timeout_s=int(data.get("stop_timeout_s", 60)),
            drain_s=int(data.get("drain_s", 60)),
            leave_s=int(data.get("leave_s", LEAVE_S)),
            unit_name=str(data.get("unit_name") or c.RANK_UNIT_NAME),
            env_file=str(data.get("env_file") or c.RANK_ENV_FILE),
            container=None if container is None else str(container),
            image=None if image is None else str(image),
            kit_files=tuple(str(f) for f in data.get("kit_files") or ()),
            prestart=None if data.get("prestart") is None else str(data["prestart"]),
        )


def rank_launch(cluster: Cluster, node: Node) -> RankLaunch:
    """Everything about launching this node's rank, in one record."""
    container = cluster.runtime.kind == "container"
    return RankLaunch(
        argv=tuple(rank_argv(cluster, node)),
        env=rank_env(cluster, node),
        runtime=cluster.runtime.kind,
        unit=rank_unit(cluster, node),
        command=tuple(launch_command(cluster, node)),
        stop_timeout_s=stop_timeout_s(cluster, node),
        drain_s=drain_s(cluster),
        container=container_name(cluster, node) if container else None,
        image=run_image(cluster) if container else None,
        kit_files=tuple(sorted(kit.rendered_files(cluster))) if container else (),
        prestart=prestart_script(cluster),
    )
