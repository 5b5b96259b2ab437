"""Fakes for the serving code: a lab-shaped cluster on disk (``lab_cluster``, ``container_site``), a
scripted fleet of nodes (``GpuNodes`` adds a GPU reading), a fake rank-0 API.

``FakeNodes`` answers the probe scripts of sparkctl.serve.probe (it decodes the parameters embedded in
the script) and the journalctl/bundle scripts from a per-node scenario that tests change between
rounds; ``FakeApi`` is an httpx.MockTransport handler for the ranks' HTTP endpoints.
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from sparkctl.model import load_inventory
from sparkctl.render import plan_document
from sparkctl.serve import faststop
from sparkctl.ssh.fleet import PART_END, HostResult, Target

GIB = 1024**3
API_KEY = "sk-lab-7f3a9c2e1b5d4f60a8e9"
KIT_VERSION = "a" * 40  # the serving kit's commit in container_site


def lab_cluster(tmp: Path, overrides: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
    """A lab inventory written the way `sparkctl lab up` writes it, loaded; plus its plan document."""
    import yaml

    from sparkctl_lab import inventory as lab_inventory

    key = tmp / "api-key"
    key.write_text(API_KEY + "\n")
    key.chmod(0o600)
    inv = lab_inventory.LabInventory(
        inventory_dir=tmp / "lab",
        private_key=tmp / "id_ed25519",
        api_key_file=key,
        checkpoint_dir=tmp / "checkpoint",
        host_keys={},
        nvme_gib={},
    )
    lab_inventory.write(inv)
    if overrides:
        gv = inv.inventory_dir / lab_inventory.GROUP_VARS_FILE
        doc = yaml.safe_load(gv.read_text())
        doc["sparkctl_profile_overrides"] = overrides
        gv.write_text(yaml.safe_dump(doc))
    cluster = load_inventory(inv.inventory_dir)
    return cluster, plan_document(cluster)


def container_site(tmp: Path, image_id: str | None = None) -> tuple[Any, dict[str, Any]]:
    """The lab's inventory with its kit (commit KIT_VERSION) and engine image (runtime container),
    loaded, the image pinned to ``image_id`` when given; plus its plan document."""
    from sparkctl_lab import inventory as lab_inventory

    key = tmp / "api-key"
    key.write_text(API_KEY + "\n")
    key.chmod(0o600)
    inv = lab_inventory.LabInventory(
        inventory_dir=tmp / "lab", private_key=tmp / "id_ed25519", api_key_file=key,
        checkpoint_dir=tmp / "checkpoint", host_keys={}, nvme_gib={},
        kit_url=str(tmp / "kit"), kit_commit=KIT_VERSION,
    )
    lab_inventory.write(inv)
    cluster = load_inventory(inv.inventory_dir)
    if image_id is not None:
        runtime = cluster.runtime.model_copy(update={"image_id": image_id})
        cluster = cluster.model_copy(update={"runtime": runtime})
    return cluster, plan_document(cluster)


def clean_upcheck(cluster: Any, entry: dict[str, Any], image_id: str = "sha256:" + "1" * 64,
                  kit_version: str | None = None) -> dict[str, Any]:
    """What fastup's node check answers on a node holding exactly what the up playbook installs."""
    from sparkctl.serve import fastup

    want = fastup.expected_digests(cluster, entry)
    modes = entry["file_modes"]
    out: dict[str, Any] = {
        "mode": "upcheck",
        # The pre-start script is copied by the role (0644), not rendered into the plan's files.
        "files": {p: {"file": True, "dir": False, "mode": modes.get(p, "0644"), "uid": 0, "gid": 0,
                      "digest": want[p]}
                  for p in fastup.installed_files(entry)},
        "dirs": {d: {"file": False, "dir": True, "mode": m or "0755", "uid": 0, "gid": 0}
                 for d, m in fastup.required_dirs(cluster, entry).items()},
        "unit": {"NeedDaemonReload": "no", "LoadState": "loaded"},
    }
    if kit_version is not None:
        out["kit"] = {"version": kit_version, "current": kit_version, "problems": [], "count": 0}
    if cluster.runtime.kind == "container":
        out["image"] = {"found": {"id": image_id, "size": 1, "by": "ref"}}
    return out


@dataclass
class NodeState:
    unit: str = "inactive"
    result: str = "success"
    mem: int = 3 * GIB
    reachable: bool = True
    links_up: bool = True
    mtu: int = 9000
    shards_ok: bool = True
    ports: list[int] = field(default_factory=list)
    procs: list[dict[str, Any]] = field(default_factory=list)
    gpu_apps: list[str] = field(default_factory=list)
    identity: str = "sha256:abc"
    gids: dict[str, int | None] | None = None
    markers: dict[str, int] = field(default_factory=dict)
    marker_lines: dict[str, list[str]] = field(default_factory=dict)  # text after each match
    container: dict[str, Any] | None = None  # docker's view, answered where the probe names one
    restarts: int = 0                         # systemd's NRestarts
    invocation: str = "abc"                   # the unit's InvocationID
    file_sha: dict[str, str] | None = None
    journal: str = "2026-11-29T10:00:00+0000 spark rank[1]: started\n"
    upcheck: dict[str, Any] | None = None  # the answer to fastup's check (None: nothing recognisable)
    start_fails: bool = False              # fastup's start script fails on this node
    stop_fails: bool = False               # faststop's stop script fails on this node
    router: str = "inactive"               # sparkctl-router.service's ActiveState (the router node's)


_PARAMS = re.compile(r"main\(json\.loads\((\".*\")\)\)")
# The parts of a script made by sparkctl.ssh.fleet.joined_script
_JOINED = re.compile(r"\(\n(.*?)\n\)\necho " + PART_END + r" \$\?\necho " + PART_END + r" >&2\n", re.S)


class FakeNodes:
    """A fleet whose nodes answer from ``self.state``; ``on_round`` may change state per probe round."""

    def __init__(self, names: list[str], ranks: dict[str, int]):
        self.targets = {n: Target(n, f"10.250.0.{10 + ranks[n]}", rank=ranks[n]) for n in names}
        self.state = {n: NodeState() for n in names}
        self.calls: list[tuple[str, str]] = []  # (node, mode or command)
        self.sent: list[str] = []                 # every script text sent to a node
        self.sent_to: list[str] = []              # ... and the node it was sent to
        self.rounds: dict[str, int] = {}
        self.joined: list[list[str]] = []         # each joined round's parts (modes), in order
        self.on_round: Any = None
        self.closed = False

    def run(self, script: Any, timeout: float = 10.0, only: Any = None) -> dict[str, HostResult]:
        names = list(only) if only is not None else list(self.targets)
        texts = {n: script if isinstance(script, str) else script(self.targets[n]) if callable(script)
                 else script[n] for n in names}
        if any(PART_END in t for t in texts.values()):
            return self._joined(texts, timeout)
        out = {}
        mode = None
        for n in names:
            text = script if isinstance(script, str) else script(self.targets[n]) if callable(script) \
                else script[n]
            m = _PARAMS.search(text)
            if m:
                params = json.loads(json.loads(m.group(1)))
                mode = params["mode"]
        if mode is not None:
            self.rounds[mode] = self.rounds.get(mode, 0) + 1
            if self.on_round is not None:
                self.on_round(mode, self.rounds[mode], self.state)
        for n in names:
            text = script if isinstance(script, str) else script(self.targets[n]) if callable(script) \
                else script[n]
            self.sent.append(text)
            self.sent_to.append(n)
            out[n] = self._answer(n, text)
        return out

    def _joined(self, texts: dict[str, str], timeout: float) -> dict[str, HostResult]:
        """A round of ``ssh.fleet.joined_script``s: each part answered as a round of its own, in order
        (``on_round`` sees each), the answers joined as the node's shell would print them."""
        parts = {n: _JOINED.findall(t) for n, t in texts.items()}
        count = len(next(iter(parts.values())))
        first = next(iter(parts.values()))
        self.joined.append([json.loads(json.loads(m.group(1)))["mode"] if (m := _PARAMS.search(p)) else "?"
                            for p in first])
        dark = [n for n in texts if not self.state[n].reachable]
        answers = [self.run({n: parts[n][i] for n in texts if n not in dark}, timeout,
                            [n for n in texts if n not in dark]) for i in range(count)]
        out = {}
        for n in texts:
            if n in dark:
                out[n] = self._answer(n, texts[n])
                continue
            got = [a[n] for a in answers]
            out[n] = HostResult(n, got[-1].rc, "".join(f"{r.stdout}{PART_END} {r.rc}\n" for r in got),
                                "".join(f"{r.stderr}{PART_END}\n" for r in got))
        return out

    def _answer(self, name: str, text: str) -> HostResult:
        st = self.state[name]
        if not st.reachable:
            self.calls.append((name, "unreachable"))
            return HostResult(name, error=f"timed out connecting to {self.targets[name].address}:22")
        m = _PARAMS.search(text)
        if m is None:
            self.calls.append((name, text.split()[0] if text.split() else ""))
            if text.startswith("journalctl"):
                return HostResult(name, 0, st.journal)
            if text.startswith(faststop.MARK):  # sparkctl.serve.faststop.stop_script
                self.calls[-1] = (name, "stop")
                if st.stop_fails:
                    said = "stop: sparkctl-rank.service is still active 30 s after its stop\n"
                    return HostResult(name, 1, said)
                was, st.unit = st.unit, "inactive"
                return HostResult(name, 0, "stop: inactive\n" if was == "inactive"
                                  else f"stop: stopped (was {was}, forced: no)\n")
            if "systemctl start" in text:  # sparkctl.serve.fastup.start_script
                self.calls[-1] = (name, "start")
                if st.start_fails:
                    return HostResult(name, 1, "sparkctl-rank.service failed right after its start\n")
                st.unit = "active"
                return HostResult(name, 0, "active\n")
            if text.startswith("systemctl show --property ActiveState"):  # serve.router_status
                self.calls[-1] = (name, "router")
                sub = "running" if st.router == "active" else "dead"
                result = "exit-code" if st.router == "failed" else "success"
                return HostResult(name, 0, f"ActiveState={st.router}\nSubState={sub}\nResult={result}\n"
                                           "NRestarts=0\n")
            if "--- uname" in text:
                body = (f"--- uname\nLinux {name}\n--- journal\n{st.journal}"
                        f"--- links\n2: enp1s0f0np0: mtu {st.mtu}\n    RX: bytes 100\n")
                return HostResult(name, 0, body)
            return HostResult(name, 0, "")
        params = json.loads(json.loads(m.group(1)))
        mode = params["mode"]
        self.calls.append((name, mode))
        if mode == "upcheck" and st.upcheck is not None:
            return HostResult(name, 0, json.dumps(st.upcheck) + "\n")
        data: dict[str, Any] = {
            "mode": mode,
            "host": name,
            "unit": {"active": st.unit, "sub": "running" if st.unit == "active" else "dead", "pid": 0,
                     "result": st.result, "exit_status": "0", "up_s": 5.0 if st.unit == "active" else None,
                     "invocation": st.invocation, "restarts": st.restarts},
            "mem": {"MemTotal": 4 * GIB, "MemAvailable": st.mem},
        }
        if params.get("container"):
            data["container"] = st.container
        if mode == "markers":
            data["markers"] = {p: st.markers.get(p, 0) for p in params.get("patterns", [])}
            data["marker_lines"] = {p: st.marker_lines.get(p, []) for p in params.get("records", [])}
        elif mode in ("status", "preflight"):
            data["links"] = {
                dev: {"present": True, "state": "up" if st.links_up else "down", "mtu": st.mtu}
                for dev in params.get("netdevs", [])
            }
            data["gpu"] = None
            data["file_digest"] = st.file_sha or {f: None for f in params.get("hash_files", [])}
            if "engram_dir" in params:
                data["shards"] = ({"verified": True, "files": 2, "bytes": 100} if st.shards_ok
                                  else {"verified": False, "problem": "manifest-r0of4.json missing"})
        if mode == "preflight":
            data.update(caches_dropped=True, ports_listening=st.ports, rank_processes=st.procs,
                        model={"config": True, "safetensors": 3}, identity=st.identity, gids=st.gids,
                        gpu_apps=st.gpu_apps, gpu_containers=[])
        return HostResult(name, 0, json.dumps(data) + "\n")

    def stream(self, name: str, command: str, on_line: Any, stop: Any = None) -> int:
        for line in self.state[name].journal.splitlines():
            on_line(name, line)
        return 0

    def close(self) -> None:
        self.closed = True


class GpuNodes(FakeNodes):
    """FakeNodes whose probe answers carry a GPU reading per node (``self.gpu``)."""

    def __init__(self, names: list[str], ranks: dict[str, int]):
        super().__init__(names, ranks)
        self.gpu: dict[str, dict[str, Any] | None] = dict.fromkeys(names)

    def _answer(self, name: str, text: str) -> HostResult:
        res = super()._answer(name, text)
        if res.rc != 0 or not res.stdout.startswith("{"):
            return res
        data = json.loads(res.stdout)
        if data["mode"] in ("status", "thermals"):
            g = self.gpu[name]
            data["gpu"] = {"source": "pynvml", "devices": [g]} if g else None
        return HostResult(name, 0, json.dumps(data) + "\n")


class FakeApi:
    """Rank HTTP endpoints by node address; flip ``ready``/``health`` per address in tests."""

    def __init__(self, cluster: Any, doc: dict[str, Any]):
        self.head = str(cluster.head.mgmt_ip)
        self.health = {str(n.mgmt_ip): True for n in cluster.nodes}
        self.ready = True
        argv = next(e for e in doc["nodes"] if e["rank"] == 0)["rank_launch"]["argv"]
        self.server_info = self._info(argv)
        self.chat_text = "42"
        self.requests: list[httpx.Request] = []

    @staticmethod
    def _info(argv: list[str]) -> dict[str, Any]:
        info: dict[str, Any] = {}
        for i, word in enumerate(argv):
            if word.startswith("--") and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                value: Any = argv[i + 1]
                with contextlib.suppress(ValueError):
                    value = int(value)
                info[word[2:].replace("-", "_")] = value
        # SGLang builds /server_info from its server arguments: the API key is in it, in clear.
        info["api_key"] = API_KEY
        info["admin_api_key"] = None
        return info

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        host = request.url.host
        path = request.url.path
        if not self.health.get(host, False):
            raise httpx.ConnectError("connection refused", request=request)
        if path == "/health":
            return httpx.Response(200, text="ok")
        if host != self.head:
            return httpx.Response(404)
        if path == "/ready":
            return httpx.Response(200 if self.ready else 503, text="")
        if path == "/server_info":
            return httpx.Response(200, json=self.server_info)
        if path == "/v1/models":
            if request.headers.get("authorization") != f"Bearer {API_KEY}":
                return httpx.Response(401, json={"error": "bad key"})
            return httpx.Response(200, json={"data": [{"id": "deepseek-v41-flash"}]})
        if path == "/v1/chat/completions":
            return httpx.Response(200, json={"choices": [{"message": {"content": self.chat_text},
                                                          "finish_reason": "stop"}]})
        return httpx.Response(404)

    def client(self) -> httpx.Client:
        return httpx.Client(transport=httpx.MockTransport(self))


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


# --- the serving kit's readiness markers, as a good rank logs them --------------------------------

READY_LINE = "The server is fired up and ready to roll!"


def engram_line(rank: int, layer: int, /, **changed: Any) -> str:
    """One ``NVME_ENGRAM_READY`` line in the fields R4's kit prints (``changed`` replaces some)."""
    doc = {"layer": layer, "rank": rank, "tp_size": 4, "packed": True, "empty_weight_parameters": True,
           "cache_bytes": 0, "scale_bytes": 0, "rows": [0, 10],
           "path": f"/engram/engram-l{layer}-r{rank}of4.bin"}
    doc.update(changed)
    return "NVME_ENGRAM_READY " + json.dumps(doc)


def kit_lines(rank: int, roce: bool = True) -> list[str]:
    """A good TP4/EP4 rank's marker lines: RoCE and MoE layout from the lab simulator's own marker
    code, Engram lines as R4's kit prints them, and SGLang's ready line on rank 0."""
    from sparkctl_sim.config import parse_argv
    from sparkctl_sim.kit import moe_layout_marker, roce_markers

    cfg = parse_argv(["serve", "--model-path", "/m", "--tp-size", "4", "--ep-size", "4", "--nnodes", "4",
                      "--node-rank", str(rank), "--dist-init-addr", "127.0.0.1:1",
                      "--speculative-algorithm", "DSPARK", "--moe-runner-backend", "flashinfer_mxfp4",
                      "--speculative-moe-runner-backend", "flashinfer_mxfp4"])
    lines = roce_markers(cfg, {"SGLANG4_ROCE_ALLREDUCE": "1" if roce else "0"})
    lines += [engram_line(rank, 1), engram_line(rank, 14), moe_layout_marker(cfg)]
    if rank == 0:
        lines.append(READY_LINE)
    return [f"[sim rank {rank}] {line}" for line in lines]


def marker_reading(markers: list[Any], lines: list[str]) -> tuple[dict[str, int], dict[str, list[str]]]:
    """What the node probe's markers mode reads from these log lines for the profile's markers."""
    from sparkctl.nodeside.probe import match_lines

    patterns = sorted({m.pattern for m in markers} | {r for m in markers for r in m.requires})
    records = [m.pattern for m in markers if m.record is not None]
    counts, texts = match_lines("\n".join(lines), patterns, records)
    return counts, texts
