"""The node probe: one SSH round per node runs ``sparkctl.nodeside.probe`` and returns its facts."""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from sparkctl.render.monitoring import LAB_NVML_MODULE, LAB_SIM_PATH
from sparkctl.render.rank import RankLaunch, rank_secret_names, rank_secrets_text
from sparkctl.ssh.fleet import HostResult, Target

if TYPE_CHECKING:
    from sparkctl.model import Cluster

NODESIDE = Path(__file__).resolve().parent.parent / "nodeside"
# The probe and the readers it imports, dependencies first (each module's relative imports resolve
# against the ones loaded before it).
PROBE_MODULES = ("system", "links", "rdma", "manifests", "probe")
# Command-line words of a rank process, whatever the runtime (an earlier run still alive).
RANK_PROCESS_WORDS = ("sglang serve", "sglang.launch_server", "sparkctl-sim-rank", "sparkctl_sim.rank")



class FleetLike(Protocol):
    @property
    def targets(self) -> Mapping[str, Target]: ...

    def run(
        self, script: Any, timeout: float = ..., only: Iterable[str] | None = ...
    ) -> dict[str, HostResult]: ...


# --- the node probe -----------------------------------------------------------------------------


# Runs on the node: loads the sources as the modules of an in-memory package ``nodeside`` (so their
# relative imports work exactly as in sparkctl and in module_utils), then calls the probe.
_LOADER = """import json, sys, types
pkg = types.ModuleType("nodeside"); pkg.__path__ = []; sys.modules["nodeside"] = pkg
for name, source in json.loads(SOURCES):
    mod = types.ModuleType("nodeside." + name); mod.__package__ = "nodeside"
    sys.modules[mod.__name__] = mod; setattr(pkg, name, mod)
    exec(compile(source, "<nodeside/" + name + ".py>", "exec"), mod.__dict__)
"""


def probe_sources() -> list[tuple[str, str]]:
    return [(name, (NODESIDE / f"{name}.py").read_text()) for name in PROBE_MODULES]


def probe_script(params: Mapping[str, Any]) -> str:
    """Shell text that runs the node probe with ``params`` under python3 (sent on stdin, not argv).

    Self-contained: the probe's modules travel inside the script, so a read costs one SSH round
    and needs nothing installed on the node but python3.
    """
    body = (
        f"SOURCES = {json.dumps(json.dumps(probe_sources()))}\n"
        + _LOADER
        + f"pkg.probe.main(json.loads({json.dumps(json.dumps(dict(params)))}))\n"
    )
    return "exec python3 - <<'SPARKCTL_PROBE_EOF'\n" + body + "SPARKCTL_PROBE_EOF\n"


def launch(entry: Mapping[str, Any]) -> Mapping[str, Any]:
    """The node entry's ``rank_launch`` as raw data (prefer :func:`rank_launch`, the typed record)."""
    return entry.get("rank_launch") or {}


def rank_launch(entry: Mapping[str, Any]) -> RankLaunch:
    """The node entry's rank launch, read back into the record render built it from."""
    return RankLaunch.from_json(launch(entry))


def unit_name(doc: Mapping[str, Any]) -> str:
    return rank_launch(doc["nodes"][0]).unit_name


def probe_params(cluster: Cluster, entry: Mapping[str, Any], mode: str) -> dict[str, Any]:
    """What the probe needs to know about one node (all from the plan document and the model)."""
    rl = rank_launch(entry)
    params: dict[str, Any] = {"mode": mode, "unit": rl.unit_name}
    if rl.container and mode in ("watch", "status", "preflight"):
        params["container"] = rl.container  # docker's OOMKilled, RestartCount and StartedAt
    if mode == "watch":
        params["health_port"] = cluster.ports.api
        return params
    if mode == "markers":
        return params
    params.update(nvml_params(cluster))
    if mode == "thermals":
        return params
    unit_file = rl.unit_file
    params.update(
        unit_file=unit_file,
        hash_files=[unit_file, *rank_files(entry)],
        hash_key=HASH_KEY,
        netdevs=[p["netdev"] for p in entry.get("fabric", [])],
        rank=int(entry["rank"]),
        tp=int(cluster.profile.tp_size),
    )
    if _needs_shards(cluster):
        params["engram_dir"] = str(cluster.paths.engram_dir)
    if mode == "preflight":
        argv = rl.argv
        params.update(
            model_dir=str(cluster.paths.model_dir),
            runtime=cluster.runtime.kind,
            image=cluster.runtime.image,
            venv_path=str(cluster.runtime.venv_path) if cluster.runtime.venv_path else None,
            program=argv[0] if argv else None,
            process_words=list(RANK_PROCESS_WORDS),
            gid_ports=[[p["hca"], p["netdev"], p["ip"]] for p in entry.get("fabric", [])],
        )
        if cluster.runtime.kind == "container" and cluster.profile.image is not None:
            params["image_env"] = True  # the profile's image requirement is checked against it
    return params


def nvml_params(cluster: Cluster) -> dict[str, Any]:
    """Where the probe reads the GPU: pynvml (else nvidia-smi), or on the lab the simulator's NVML
    stand-in, loaded as the node exporter loads it."""
    if cluster.profile.simulator is None:
        return {}
    return {"nvml_module": LAB_NVML_MODULE, "nvml_path": LAB_SIM_PATH}


def rank_files(entry: Mapping[str, Any]) -> list[str]:
    """The rank's files besides the unit: its environment file and its secrets config(s)."""
    rl = rank_launch(entry)
    return [rl.env_file] + [f for f in entry.get("secret_files", []) if f in rl.argv]


# The key of the probe's file digests (HMAC-SHA256): made up per sparkctl process, never written,
# so a digest in `status --json` or a bundle cannot be used to test guesses of the API key.
HASH_KEY = secrets.token_hex(32)


def expected_hashes(cluster: Cluster, entry: Mapping[str, Any]) -> dict[str, str]:
    """Keyed digests (HASH_KEY) of what the rank role writes (secrets substituted here, only to
    digest them), comparable with the probe's ``file_digest``."""
    rl = rank_launch(entry)
    texts = {rl.unit_file: rl.unit}
    for path in rank_files(entry):
        text = str(entry.get("files", {}).get(path, ""))
        if path in entry.get("secret_files", []):
            # The same text the spark_rank role's lookup writes: the model resolves, render quotes.
            values = {n: cluster.secrets[n].resolve() for n in rank_secret_names(cluster)}
            text = rank_secrets_text(cluster, values)
        texts[path] = text
    key = bytes.fromhex(HASH_KEY)
    return {path: hmac.new(key, text.encode(), hashlib.sha256).hexdigest() for path, text in texts.items()}


def _needs_shards(cluster: Cluster) -> bool:
    """A profile whose ranks read packed Engram shards (DSV41_PACKED_DIR) needs them staged."""
    return "DSV41_PACKED_DIR" in (cluster.profile.env or {})


@dataclass
class NodeFacts:
    """One node as the probe saw it."""

    name: str
    rank: int
    reachable: bool
    error: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def unit(self) -> dict[str, Any]:
        return dict(self.data.get("unit") or {})

    @property
    def active(self) -> str:
        unit = self.unit
        if "error" in unit:
            return "unknown"
        return str(unit.get("active", "unknown"))

    @property
    def container(self) -> dict[str, Any] | None:
        """Docker's view of the rank's container (container runtime only; None elsewhere)."""
        value = self.data.get("container")
        return dict(value) if isinstance(value, Mapping) else None

    @property
    def mem_available(self) -> int | None:
        mem = self.data.get("mem") or {}
        value = mem.get("MemAvailable")
        return int(value) if value is not None else None

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "rank": self.rank, "reachable": self.reachable, "error": self.error,
                **self.data}


def collect(cluster: Cluster, doc: Mapping[str, Any], fleet: FleetLike, mode: str,
            timeout: float = 15.0, only: Iterable[str] | None = None,
            extra: Mapping[str, Any] | None = None) -> dict[str, NodeFacts]:
    """Run the probe in ``mode`` on every node (or ``only`` some) at once; parse what came back."""
    scripts = probe_scripts(cluster, doc, mode, only, extra)
    return parse_facts(doc, fleet.run(scripts, timeout=timeout, only=list(scripts)))


def probe_scripts(cluster: Cluster, doc: Mapping[str, Any], mode: str, only: Iterable[str] | None = None,
                  extra: Mapping[str, Any] | None = None) -> dict[str, str]:
    """The probe's script in ``mode`` for every node (or ``only`` some), by node name."""
    entries = {e["name"]: e for e in doc["nodes"]}
    names = list(only) if only is not None else [e["name"] for e in doc["nodes"]]
    scripts = {}
    for n in names:
        params = probe_params(cluster, entries[n], mode)
        params.update(extra or {})
        scripts[n] = probe_script(params)
    return scripts


# What the probe's ``status`` mode answers; the ``preflight`` mode answers all of it and more
# (sparkctl.nodeside.probe.main), so one preflight read also gives the status facts (:func:`as_status`).
STATUS_FIELDS = ("host", "time", "unit", "mem", "container", "links", "gpu", "unit_sha256", "file_digest",
                 "shards")


def as_status(facts: Mapping[str, NodeFacts]) -> dict[str, NodeFacts]:
    """The status facts within each node's preflight facts (a node without facts stays as it is)."""
    out: dict[str, NodeFacts] = {}
    for name, f in facts.items():
        data = {"mode": "status", **{k: f.data[k] for k in STATUS_FIELDS if k in f.data}} if f.data else {}
        out[name] = NodeFacts(f.name, f.rank, f.reachable, f.error, data)
    return out


def parse_facts(doc: Mapping[str, Any], results: Mapping[str, HostResult]) -> dict[str, NodeFacts]:
    """Each node's facts from its probe round's result (its answer's last line), or why there are none."""
    ranks = {e["name"]: int(e["rank"]) for e in doc["nodes"]}
    out: dict[str, NodeFacts] = {}
    for n, res in results.items():
        rank = ranks[n]
        if not res.reachable:
            out[n] = NodeFacts(n, rank, False, res.error)
            continue
        try:
            data = json.loads(res.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            why = (res.stderr.strip().splitlines() or [f"probe exited {res.rc} with no output"])[-1]
            out[n] = NodeFacts(n, rank, True, f"probe failed: {why[:200]}")
            continue
        out[n] = NodeFacts(n, rank, True, None, data)
    return out
