"""The fast path of `sparkctl down`: the rank units stopped over SSH, in SGLang's order, without the
playbook, when every node answers.

playbooks/down.yml (the spark_rank role's stop tasks) spends two Ansible plays, ~9 s on the lab, on
what is per node a handful of systemctl calls. When every node answered the probe, :func:`stop` does
the same steps in two SSH rounds. First each group's rank 0 (and the router's node, whose router
stops first): SIGTERM, and up to the grace period to drain and leave — it tells every scheduler to
exit before it does. Then the workers (they ignore SIGTERM): up to the leave period
(``rank_launch.leave_s``) for the unit to leave once its rank 0 is gone, since nothing will tell it
to later. Whatever still runs is forced (SIGKILL to the unit, `docker kill` of its container, which
lives outside the unit's cgroup); then the unit is stopped for good, a failed state cleared, the
unit waited for until inactive, and a container that outlived its unit (a unit killed without its
container) killed — the role's steps, in the role's order, with the role's running states and wait
(:data:`RUNNING_STATES`, :data:`STOP_WAIT_S`; a test holds them equal).

A node that does not answer, or whose stop fails, is the playbook's to handle and report: the caller
runs it then (`--full` always does).
"""

from __future__ import annotations

import shlex
from collections.abc import Collection, Mapping
from typing import Any

from sparkctl.errors import SparkctlError
from sparkctl.serve import probe
from sparkctl.serve.probe import FleetLike

# The spark_rank role's spark_rank_running_states and spark_rank_stop_wait_s (roles/spark_rank/
# defaults/main.yml): tests/unit/test_faststop.py fails when the two drift apart.
RUNNING_STATES = ("active", "activating", "deactivating", "reloading")
STOP_WAIT_S = 30
# The first line of every stop script (what the CLI tests' fake fleet recognises).
MARK = "# sparkctl down: stop the rank unit (sparkctl.serve.faststop)"

_STOP = r"""MARK
unit=UNIT container=CONTAINER head=HEAD grace=GRACE wait=WAIT
state() { systemctl show -p ActiveState --value "$unit"; }
running() { case "$1" in RUNNING) return 0;; esac; return 1; }
before=$(state)
if [ "$before" = inactive ]; then echo "stop: inactive"; exit 0; fi
forced=no
if running "$before"; then
  if [ "$head" = 1 ]; then systemctl stop --no-block "$unit"; fi
  i=0
  while running "$(state)" && [ $i -lt $((grace * 5)) ]; do i=$((i + 1)); sleep 0.2; done
  if running "$(state)"; then
    systemctl kill --signal=SIGKILL "$unit" || true
    if [ -n "$container" ]; then docker kill "$container" >/dev/null 2>&1 || true; fi
    forced=yes
  fi
fi
if ! out=$(systemctl stop "$unit" 2>&1); then echo "stop: systemctl stop $unit failed: $out"; exit 1; fi
systemctl reset-failed "$unit" >/dev/null 2>&1 || true
i=0
while s=$(state); running "$s"; do
  i=$((i + 1))
  if [ $i -gt $((wait * 5)) ]; then echo "stop: $unit is still $s $wait s after its stop"; exit 1; fi
  sleep 0.2
done
if [ -n "$container" ] && [ -n "$(docker ps -q --filter "name=^/$container\$" 2>/dev/null)" ]; then
  docker kill "$container" >/dev/null 2>&1 || true
  forced="yes, its container had outlived it"
fi
echo "stop: stopped (was $before, forced: $forced)"
"""


def stop_script(unit: str, container: str | None, grace_s: int, head: bool, wait_s: int = STOP_WAIT_S) -> str:
    """Shell text that stops this node's rank unit as the spark_rank role's stop tasks do."""
    return (_STOP.replace("MARK", MARK).replace("UNIT", shlex.quote(unit))
            .replace("CONTAINER", shlex.quote(container or ""))
            .replace("HEAD", "1" if head else "0").replace("GRACE", str(max(0, int(grace_s))))
            .replace("WAIT", str(int(wait_s))).replace("RUNNING", "|".join(RUNNING_STATES)))


def _head(entry: Mapping[str, Any]) -> bool:
    return int(entry["rank"]) == 0


def scripts(doc: Mapping[str, Any], grace_s: int | None = None,
            outsiders: Collection[str] = ()) -> dict[str, str]:
    """Every node's rank stop script (the router's stop is :func:`stop`'s to add): the unit and
    container the plan renders; rank 0's sends SIGTERM and waits the profile's drain period
    (``rank_launch.drain_s``) unless ``grace_s`` overrides it, a worker's waits its leave period
    (``rank_launch.leave_s``, at most the grace). ``outsiders``: nodes whose rank is no longer the
    group's (restarted or OOM-killed since `up` made it ready: ``verdict.rank_faults``); nothing
    will tell them to exit and they serve nothing, so no wait."""
    out = {}
    for entry in doc["nodes"]:
        rl = probe.rank_launch(entry)
        grace = grace_s if grace_s is not None else rl.drain_s
        if not _head(entry):
            grace = min(grace, rl.leave_s)
        if entry["name"] in outsiders:
            grace = 0
        out[str(entry["name"])] = stop_script(rl.unit_name, rl.container, grace, head=_head(entry))
    return out


def router_stop(unit: str) -> str:
    """Shell text that stops the router's unit (nothing when it does not run or is not installed)."""
    return f"systemctl stop {shlex.quote(unit)} 2>/dev/null || true\n"


def stop(doc: Mapping[str, Any], fleet: FleetLike, grace_s: int | None = None,
         outsiders: Collection[str] = ()) -> dict[str, str]:
    """Stop every rank unit over SSH: each group's rank 0 first (with the router's node), then the
    workers (see the module text); what each node did (``inactive``: nothing ran, else ``stopped
    ...``). Raises SparkctlError naming every node that did not answer or whose stop failed
    (details ``node: why``); the workers are stopped even when a rank 0 was not. ``outsiders``: as
    for :func:`scripts`."""
    texts = scripts(doc, grace_s, outsiders)
    entries = {str(e["name"]): e for e in doc["nodes"]}
    heads = [n for n in texts if _head(entries[n])]
    workers = [n for n in texts if n not in heads]
    first: dict[str, str] = {n: texts[n] for n in heads}
    router = doc.get("router")
    if router and str(router["node"]) in texts:  # the router in front of the groups stops first, as
        # down.yml stops it (with the group whose node runs it: another group's doc has no such node)
        node, text = str(router["node"]), router_stop(router["unit"])
        first[node] = f"{MARK}\n{text}{first[node].split(chr(10), 1)[1]}" if node in first else text
    longest = max((probe.rank_launch(entries[n]).drain_s for n in heads), default=60)
    leave = max((probe.rank_launch(entries[n]).leave_s for n in workers), default=0)
    rounds = [(first, (grace_s if grace_s is not None else longest) + STOP_WAIT_S + 30),
              ({n: texts[n] for n in workers}, leave + STOP_WAIT_S + 30)]
    done: dict[str, str] = {}
    bad: list[str] = []
    for sent, timeout in rounds:
        if not sent:
            continue
        results = fleet.run(sent, timeout=timeout, only=list(sent))
        for name, text in sent.items():
            if not text.startswith(MARK):  # the router's stop alone: its node's rank stops next round
                continue
            res = results[name]
            lines = [ln for ln in res.stdout.splitlines() if ln.startswith("stop: ")] if res.reachable else []
            if not res.reachable:
                bad.append(f"{name}: {res.error}")
            elif res.rc != 0 or not lines:
                said = lines[-1][len("stop: "):] if lines else (res.stderr.strip() or f"exit {res.rc}")
                bad.append(f"{name}: {said.splitlines()[-1][:300]}")
            else:
                done[name] = lines[-1][len("stop: "):]
    if bad:
        raise SparkctlError("stopping the rank units over SSH failed", details=sorted(bad))
    return done


__all__ = ["MARK", "RUNNING_STATES", "STOP_WAIT_S", "scripts", "stop", "stop_script"]
