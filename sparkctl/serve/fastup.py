"""The fast path of `sparkctl up`: start the installed ranks over SSH when nothing needs installing.

`up` normally runs playbooks/up.yml (preflight, the kit and image checks, install the rank files,
start in order): two Ansible plays and ~30 s before the first unit starts. When every node already
holds exactly what that playbook would leave there, the same start can be made in one SSH round per
wave. One check per node (:func:`check`; `up` runs it in the same SSH round as the preflight probe,
right after it: ``serve.up.Up.preflight_and_check``) compares, against what sparkctl renders now:

* the rank unit, environment file, secrets config and the kit's rendered files — keyed digests
  (``probe.HASH_KEY``, HMAC-SHA256: the secrets config is compared without its value leaving the
  controller's memory or any digest being usable to test guesses), each file's mode and owner, the
  configuration directory (0700) and the run directories; and that systemd has loaded the unit;
* the staged serving kit — every file against the kit's file manifest and ``current`` pointing at
  it (``sparkctl.nodeside.kit.verify_tree``, what the spark_kit role's verify runs);
* the engine image — the ID under the configured reference the same on every node and equal to the
  pin when there is one (``sparkctl.stage.image.node_image``, what the spark_image role's check runs).

Any difference is a reason (node, path, what differs), and `up` runs the playbook instead, which
repairs the files or refuses as it always did. Otherwise :func:`start` starts the units wave by wave
in ``sparkctl.render.rank.start_waves`` order — the list the role's start tasks loop over — each
wave only after every unit of the one before is active.

The node-side code travels as source inside the script (``sparkctl.nodeside.ship``): the check
itself (``sparkctl.nodeside.upcheck``) and the kit and image modules it reads with, under their own
package names, so their relative imports resolve as on the controller.
"""

from __future__ import annotations

import hashlib
import hmac
import shlex
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from sparkctl.ansible.roledefaults import role_default
from sparkctl.errors import SparkctlError
from sparkctl.nodeside import images as images_
from sparkctl.nodeside import kit as nodekit
from sparkctl.nodeside import kitbuild, prestart, ship
from sparkctl.render.common import RANK_UNIT_NAME
from sparkctl.render.kit import build_steps as kit_build_steps
from sparkctl.render.rank import run_image, start_waves
from sparkctl.serve import probe
from sparkctl.serve.probe import FleetLike

if TYPE_CHECKING:
    from sparkctl.model import Cluster

# Shipped to the node (sparkctl.nodeside.ship), dependencies first; the last is the check it runs.
NODE_MODULES = ("nodeside.kit", "nodeside.kitbuild", "nodeside.images", "nodeside.manifests",
                "nodeside.progress", "stage.manifest", "stage.image", "nodeside.upcheck")


def start_wait_s() -> int:
    """Seconds a started unit may take to become active: the spark_rank role's own default
    (``spark_rank_start_wait_s``), so the playbook and this start wait alike."""
    return int(role_default("spark_rank", "spark_rank_start_wait_s"))


def start_tries() -> int:
    """Tries of `systemctl start` (a start right after a stop can meet a cgroup still being torn
    down): the spark_rank role's own default (``spark_rank_start_tries``)."""
    return int(role_default("spark_rank", "spark_rank_start_tries"))


def check_script(params: Mapping[str, Any]) -> str:
    """Shell text that runs the node check with ``params`` under python3 (on stdin, not in argv)."""
    return ship.python_script(NODE_MODULES, params, "SPARKCTL_UPCHECK_EOF")


# --- what the node must hold --------------------------------------------------------------------


def installed_files(entry: Mapping[str, Any]) -> list[str]:
    """Every file the spark_rank role's install writes on this node: unit, env, secrets, kit files,
    and the kit's pre-start checks the rank's container runs first."""
    rl = probe.launch(entry)
    unit = f"/etc/systemd/system/{rl.get('unit_name', RANK_UNIT_NAME)}"
    prestart_ = [str(rl["prestart"])] if rl.get("prestart") else []
    return [unit, *probe.rank_files(entry), *(rl.get("kit_files") or []), *prestart_]


def expected_digests(cluster: Cluster, entry: Mapping[str, Any]) -> dict[str, str]:
    """Keyed digests (``probe.HASH_KEY``) of what the install writes: the probe's own for the unit,
    env and secrets files (a secret is resolved here only to be digested), plus the kit's files."""
    out = dict(probe.expected_hashes(cluster, entry))
    key = bytes.fromhex(probe.HASH_KEY)
    for path in probe.launch(entry).get("kit_files") or []:
        text = str(entry.get("files", {}).get(path, ""))
        out[path] = hmac.new(key, text.encode(), hashlib.sha256).hexdigest()
    if probe.launch(entry).get("prestart"):
        # The role copies sparkctl/nodeside/prestart.py itself: the same bytes as this package's.
        source = Path(prestart.__file__).read_bytes()
        out[str(probe.launch(entry)["prestart"])] = hmac.new(key, source, hashlib.sha256).hexdigest()
    return out


def required_dirs(cluster: Cluster, entry: Mapping[str, Any]) -> dict[str, str | None]:
    """Directories the install creates: path -> the mode it must have (None: only present)."""
    rl = probe.launch(entry)
    run_dir = str(cluster.paths.run_dir)
    out: dict[str, str | None] = {}
    if rl.get("env_file"):
        out[str(PurePosixPath(str(rl["env_file"])).parent)] = "0700"
    for d in (run_dir, f"{run_dir}/cache", f"{run_dir}/state"):
        out[d] = None
    return out


@dataclass
class KitReference:
    """The configured kit as the spark_kit role's verify sees it: where, which version, every file."""

    store: str
    version: str
    manifest: dict[str, Any]


def check_params(cluster: Cluster, entry: Mapping[str, Any], kit: KitReference | None) -> dict[str, Any]:
    params: dict[str, Any] = {
        "mode": "upcheck",
        "files": installed_files(entry),
        "dirs": list(required_dirs(cluster, entry)),
        "unit": probe.unit_name({"nodes": [entry]}),
        "hash_key": probe.HASH_KEY,
    }
    if kit is not None:
        params["kit"] = {"store": kit.store, "version": kit.version, "expected": kit.manifest}
        steps = kit_build_steps(cluster)
        if steps:  # the kit's build products, against each node's build record and image
            params["kit"].update(build_steps=steps, build_image=run_image(cluster))
    if cluster.runtime.kind == "container":
        params["image"] = {"ref": cluster.runtime.image, "want_id": cluster.runtime.image_id}
    return params


# --- the verdict ---------------------------------------------------------------------------------


class FastCheck(ship.Verdict):
    """Whether `up` may start the installed units without the playbook, and if not, why."""


def judge(cluster: Cluster, doc: Mapping[str, Any], answers: Mapping[str, Mapping[str, Any] | str],
          kit_needed: bool) -> list[str]:
    """Reasons the fast path may not be taken (empty: it may). Pure; ``answers`` maps each node to
    its check's JSON, or to a string saying why there is none."""
    reasons: list[str] = []
    router = doc.get("router")
    if router and any(e.get("name") == router["node"] for e in doc["nodes"]):
        # The router's wheel, key and unit are the spark_router role's: the playbook installs and
        # starts it after the groups (render.router).
        reasons.append(f"{router['node']}: the router in front of the groups starts with the playbook")
    images: dict[str, str] = {}
    pin = cluster.runtime.image_id if cluster.runtime.kind == "container" else None
    head = cluster.head.name
    for entry in sorted(doc["nodes"], key=lambda e: int(e["rank"])):
        name = str(entry["name"])
        ans = answers.get(name, "no answer")
        if isinstance(ans, str):
            reasons.append(f"{name}: {ans}")
            continue
        want = expected_digests(cluster, entry)
        modes = entry.get("file_modes", {})
        for path in installed_files(entry):
            st = (ans.get("files") or {}).get(path)
            if not st or not st.get("file"):
                reasons.append(f"{name}: {path} is not installed")
            elif st.get("error"):
                reasons.append(f"{name}: {path} cannot be read ({st['error']})")
            elif not hmac.compare_digest(str(st.get("digest", "")), want[path]):
                reasons.append(f"{name}: {path} differs from the rendered file")
            elif modes.get(path) and st.get("mode") != modes[path]:
                reasons.append(f"{name}: {path} has mode {st.get('mode')}, rendered {modes[path]}")
            elif (st.get("uid"), st.get("gid")) != (0, 0):
                reasons.append(f"{name}: {path} is owned by {st.get('uid')}:{st.get('gid')}, not root")
        for path, mode in required_dirs(cluster, entry).items():
            st = (ans.get("dirs") or {}).get(path)
            if not st or not st.get("dir"):
                reasons.append(f"{name}: directory {path} is missing")
            elif mode is not None and st.get("mode") != mode:
                reasons.append(f"{name}: directory {path} has mode {st.get('mode')}, want {mode}")
        unit = ans.get("unit") or {}
        if unit.get("error"):
            reasons.append(f"{name}: systemd does not answer ({unit['error']})")
        elif unit.get("NeedDaemonReload") == "yes":
            reasons.append(f"{name}: systemd has not loaded the installed unit (daemon-reload pending)")
        elif unit.get("LoadState") not in (None, "loaded"):
            reasons.append(f"{name}: the rank unit is {unit.get('LoadState')}")
        if kit_needed:
            k = ans.get("kit")
            if not isinstance(k, Mapping):
                reasons.append(f"{name}: the kit was not checked")
            elif k.get("problems"):
                shown = "; ".join(nodekit.describe(p) for p in k["problems"][:3])
                more = f" (and {int(k.get('count', 0)) - 3} more)" if int(k.get("count", 0)) > 3 else ""
                reasons.append(f"{name}: kit {k.get('version')} fails verification: {shown}{more}")
        if cluster.runtime.kind == "container":
            why, ident = images_.judge_answer(name, ans.get("image"), cluster.runtime.image or "")
            if why:
                reasons.append(why)
            elif ident:
                images[name] = ident
    reasons += images_.mismatches(images, pin or images.get(head), bool(pin), cluster.runtime.image or "")
    if kit_needed:
        reasons += kit_product_reasons(doc, answers)
    return reasons


def kit_product_reasons(doc: Mapping[str, Any], answers: Mapping[str, Mapping[str, Any] | str]) -> list[str]:
    """The kit's build products of every node that answered, in rank order, the same everywhere
    (``nodeside.kitbuild.product_reasons``: the odd nodes named)."""
    kits: dict[str, Any] = {}
    for entry in sorted(doc["nodes"], key=lambda e: int(e["rank"])):
        ans = answers.get(str(entry["name"]))
        if isinstance(ans, Mapping):
            kits[str(entry["name"])] = ans.get("kit")
    return list(kitbuild.product_reasons(kits))


# Seconds the check may take on a node (it reads every kit file and asks docker for the image).
CHECK_TIMEOUT_S = 120.0


def check(cluster: Cluster, doc: Mapping[str, Any], fleet: FleetLike, kit: KitReference | str | None,
          timeout: float = CHECK_TIMEOUT_S) -> FastCheck:
    """One check round on every node; ``kit`` is the configured kit's reference, None without a
    kit, or a string saying why its reference could not be had (then the playbook runs)."""
    t0 = time.monotonic()
    scripts = check_scripts(cluster, doc, kit)
    results = fleet.run(scripts, timeout=timeout, only=list(scripts))
    return verdict(cluster, doc, results, kit, time.monotonic() - t0)


def check_scripts(cluster: Cluster, doc: Mapping[str, Any], kit: KitReference | str | None) -> dict[str, str]:
    """The check's script for every node, by node name (``kit`` as for :func:`check`)."""
    ref = kit if isinstance(kit, KitReference) else None
    return {str(e["name"]): check_script(check_params(cluster, e, ref)) for e in doc["nodes"]}


def verdict(cluster: Cluster, doc: Mapping[str, Any], results: Mapping[str, Any],
            kit: KitReference | str | None, seconds: float) -> FastCheck:
    """The fast path's verdict from each node's check round (``HostResult`` by node name), which
    took ``seconds``."""
    answers = ship.answers(results, "upcheck")
    reasons = [f"kit: {kit}"] if isinstance(kit, str) else []
    reasons += judge(cluster, doc, answers, kit_needed=kit is not None)
    return FastCheck(reasons, seconds,
                     {n: dict(a) if isinstance(a, Mapping) else {"error": a} for n, a in answers.items()})


# --- the start -----------------------------------------------------------------------------------


_START = """\
n=0
until out=$(systemctl start UNIT 2>&1); do
  n=$((n + 1))
  if [ $n -ge TRIES ]; then echo "systemctl start failed TRIES times: $out"; exit 1; fi
  sleep DELAY
done
i=0
while :; do
  s=$(systemctl show -p ActiveState --value UNIT)
  if [ "$s" = active ]; then echo active; exit 0; fi
  if [ "$s" = failed ]; then echo "UNIT failed right after its start"; exit 1; fi
  i=$((i + 1))
  if [ $i -gt POLLS ]; then echo "UNIT is $s after WAIT s"; exit 1; fi
  sleep 0.2
done
"""


def start_script(unit: str, wait_s: int | None = None, tries: int | None = None, delay_s: float = 2) -> str:
    """Start the unit (``tries`` times, ``delay_s`` apart), then wait until it is active; say why not.
    Unless given, both counts are the spark_rank role's (``start_wait_s``, ``start_tries``)."""
    wait_s = start_wait_s() if wait_s is None else wait_s
    tries = start_tries() if tries is None else tries
    return (_START.replace("UNIT", shlex.quote(unit)).replace("TRIES", str(int(tries)))
            .replace("DELAY", f"{float(delay_s):g}")
            .replace("POLLS", str(int(wait_s) * 5)).replace("WAIT", str(int(wait_s))))


def start(cluster: Cluster, doc: Mapping[str, Any], fleet: FleetLike, on_wave: Any = None) -> list[float]:
    """Start every rank unit wave by wave (``start_waves``); the seconds each wave took.

    Raises SparkctlError naming the node(s) whose unit did not start (details ``node: why``); the
    caller stops every rank, as after a failed playbook."""
    unit = probe.unit_name(doc)
    by_rank = {int(e["rank"]): str(e["name"]) for e in doc["nodes"]}
    script = start_script(unit)
    took: list[float] = []
    for wave in start_waves(cluster):
        names = [by_rank[r] for r in wave if r in by_rank]
        if not names:
            continue
        t0 = time.monotonic()
        results = fleet.run(script, timeout=start_wait_s() + 3 * start_tries() + 15, only=names)
        bad = []
        for name in names:
            res = results[name]
            if not res.reachable:
                bad.append(f"{name}: {res.error}")
            elif res.rc != 0:
                lines = (res.stdout.strip() or res.stderr.strip() or f"exit {res.rc}").splitlines()
                bad.append(f"{name}: {lines[-1][:300]}")
        took.append(time.monotonic() - t0)
        if bad:
            ranks = ", ".join(str(r) for r in wave)
            raise SparkctlError(f"starting the rank units failed (ranks {ranks}, over SSH)", details=bad)
        if on_wave is not None:
            on_wave(wave, took[-1])
    return took


__all__ = ["FastCheck", "KitReference", "check", "check_script", "check_scripts", "expected_digests",
           "installed_files", "judge", "start", "start_script", "verdict"]
