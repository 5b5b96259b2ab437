"""Idle and identity checks before and after each bench suite and around qualify, as R4's repeat
client makes them.

R4 ``bench/repeat-client.py`` asserts, before it measures, that every entry of ``GET /v1/loads``
has zero running and zero waiting requests and that ``GET /server_info`` holds the profile's
values (TP, EP, context, KV pool, slots, DSpark block, chunk); after the suite it asserts idle again.
Here the same: a server with requests running or waiting is refused before a suite (named: how many,
read where), a ``/server_info`` that differs from the profile's rendered flags is refused (named:
field, served, rendered), and a server busy after a suite marks the run as failed (someone else's
requests shared the timed windows). Where ``/v1/loads`` is missing, the Prometheus gauges
``sglang:num_running_reqs`` and ``sglang:num_queue_reqs`` are read instead. ``verb`` (bench,
qualify) names in the refusal what measures an idle server only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from sparkctl.errors import SparkctlError
from sparkctl.qa.endpoint import Endpoint


class BusyError(SparkctlError):
    """The server had requests running or waiting, or serves another configuration: nothing measured."""


# R4's repeat client compares these /server_info fields with its profile (the profile's own
# gates.server_info_fields choose what sparkctl compares; these are recorded with the results).
IDENTITY_FIELDS = (
    "tp_size",
    "ep_size",
    "context_length",
    "max_total_tokens",
    "max_running_requests",
    "speculative_dspark_block_size",
    "chunked_prefill_size",
)


@dataclass(frozen=True)
class Load:
    running: int
    waiting: int
    source: str  # where it was read: /v1/loads or /metrics

    @property
    def idle(self) -> bool:
        return self.running == 0 and self.waiting == 0

    def describe(self) -> str:
        return f"{self.running} running, {self.waiting} waiting (GET {self.source})"


def parse_loads(doc: Any) -> tuple[int, int]:
    """(running, waiting) from ``/v1/loads``: SGLang's ``{"loads": [{num_running_reqs,
    num_waiting_reqs}, …]}`` (summed over its entries, as R4 checks every one), or one flat entry."""
    entries = doc.get("loads") if isinstance(doc, Mapping) else None
    if not isinstance(entries, list):
        entries = [doc]
    running = waiting = 0
    for entry in entries:
        if (
            not isinstance(entry, Mapping)
            or "num_running_reqs" not in entry
            or "num_waiting_reqs" not in entry
        ):
            raise ValueError("no num_running_reqs / num_waiting_reqs")
        running += int(entry["num_running_reqs"])
        waiting += int(entry["num_waiting_reqs"])
    return running, waiting


def parse_metrics(text: str) -> tuple[int, int]:
    """(running, waiting) from the Prometheus gauges, summed over their label sets."""
    sums = {"sglang:num_running_reqs": 0.0, "sglang:num_queue_reqs": 0.0}
    seen = set()
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in sums:
            sums[name] += float(line.rsplit(" ", 1)[-1])
            seen.add(name)
    if len(seen) < 2:
        raise ValueError("no sglang:num_running_reqs / sglang:num_queue_reqs gauges")
    return int(sums["sglang:num_running_reqs"]), int(sums["sglang:num_queue_reqs"])


def read_load(endpoint: Endpoint, timeout: float = 20.0, verb: str = "bench") -> Load:
    """What rank 0 is doing now; SparkctlError (exit 1) when neither source says."""
    headers = {"Authorization": f"Bearer {endpoint.api_key}"} if endpoint.api_key else {}
    problems = []
    with httpx.Client(timeout=timeout, headers=headers) as http:
        for path, parse in (
            ("/v1/loads", lambda r: parse_loads(r.json())),
            ("/metrics", lambda r: parse_metrics(r.text)),
        ):
            try:
                resp = http.get(f"{endpoint.root}{path}")
                if resp.status_code != 200:
                    problems.append(f"{path} answered {resp.status_code}")
                    continue
                running, waiting = parse(resp)
                return Load(running, waiting, path)
            except (httpx.HTTPError, ValueError, TypeError) as exc:
                problems.append(f"{path}: {exc}")
    raise BusyError(
        f"cannot tell whether {_who(endpoint)} at {endpoint.root} is idle ({'; '.join(problems)})",
        hint=f"{verb} measures an idle server only; check `sparkctl status`",
    )


def _who(endpoint: Endpoint) -> str:
    return f"group {endpoint.group}'s rank 0" if endpoint.group else "rank 0"


def _loads(endpoint: Endpoint, verb: str) -> list[tuple[Endpoint, Load]]:
    """Each rank 0 behind ``endpoint`` with its load: the endpoint itself, or through the router
    each group's rank 0 (``Endpoint.workers``; the gateway reports no load of its own)."""
    return [(w, read_load(w, verb=verb)) for w in endpoint.workers or (endpoint,)]


def _record(when: str, loads: list[tuple[Endpoint, Load]]) -> dict[str, Any]:
    record: dict[str, Any] = {"when": when, "running": sum(ld.running for _, ld in loads),
                              "waiting": sum(ld.waiting for _, ld in loads),
                              "source": loads[0][1].source}
    if any(w.group for w, _ in loads):
        record["groups"] = {w.group: {"running": ld.running, "waiting": ld.waiting, "source": ld.source}
                            for w, ld in loads}
    return record


def _busy(loads: list[tuple[Endpoint, Load]]) -> str:
    return "; ".join(f"{_who(w)}: {ld.describe()}" if w.group else ld.describe()
                     for w, ld in loads if not ld.idle)


def check_idle(endpoint: Endpoint, when: str, verb: str = "bench") -> dict[str, Any]:
    """Refuse a busy server (BusyError naming the counts, and through the router each busy group)
    before ``when``; the record otherwise."""
    loads = _loads(endpoint, verb)
    if not all(ld.idle for _, ld in loads):
        who = "rank 0 is" if not endpoint.workers else "the router's groups are"
        raise BusyError(
            f"{who} busy {when}: {_busy(loads)}; {verb} measures an idle server only",
            hint=f"wait for the other clients' requests to finish (`sparkctl status`), then run {verb} again",
        )
    return _record(when, loads)


def after_suite(endpoint: Endpoint, when: str) -> tuple[dict[str, Any], str | None]:
    """The idle record after a suite and, when the server (through the router: any group's rank 0)
    is not idle, the error the run reports."""
    try:
        loads = _loads(endpoint, "bench")
    except BusyError as exc:
        return {"when": when, "error": exc.message}, exc.message
    record = _record(when, loads)
    if all(ld.idle for _, ld in loads):
        return record, None
    who = "rank 0 was" if not endpoint.workers else "the router's groups were"
    return record, f"{who} not idle {when}: {_busy(loads)} (other requests shared the suite)"


ServerCheck = Callable[[Mapping[str, Any]], list[str]]
# What a /server_info is compared with: one rank 0's check, or through the router each group's own
# check by group name (each group's rank 0 against its own profile).
Compare = ServerCheck | Mapping[str, ServerCheck]


def server_info(endpoint: Endpoint, timeout: float = 20.0) -> dict[str, Any]:
    """``GET /server_info`` now (R4's client reads it before it measures)."""
    headers = {"Authorization": f"Bearer {endpoint.api_key}"} if endpoint.api_key else {}
    try:
        resp = httpx.get(f"{endpoint.root}/server_info", headers=headers, timeout=timeout)
        resp.raise_for_status()
        info = resp.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise BusyError(
            f"{_who(endpoint)}'s /server_info could not be read: {exc}", hint="check `sparkctl status`"
        ) from None
    if not isinstance(info, dict):
        raise BusyError(f"{_who(endpoint)}'s /server_info is not a JSON object")
    return info


def check_server(endpoint: Endpoint, compare: Compare, fields: Iterable[str],
                 verb: str = "bench") -> dict[str, Any]:
    """``check_identity`` of what ``endpoint`` serves now: its own ``/server_info``, or through the
    router each group's rank 0's (the gateway answers none) against that group's check in
    ``compare``, every group's problems named together; the compared fields (by group through the
    router)."""
    if not endpoint.workers:
        assert callable(compare), "one rank 0 is compared with one check"
        return check_identity(server_info(endpoint), compare, fields, verb)
    assert not callable(compare), "through the router each group is compared with its own check"
    keys = list(fields)
    problems: list[str] = []
    seen: dict[str, Any] = {}
    for w in endpoint.workers:
        group = w.group or w.root
        info = server_info(w)
        problems += [f"group {group}: {p}" for p in compare[group](info)]
        seen[group] = {key: info.get(key) for key in keys}
    if problems:
        raise BusyError(
            "the /server_info of the router's groups does not match their profiles: " + "; ".join(problems),
            hint=f"a group runs another configuration: run `sparkctl up` with this inventory, then {verb}",
            details=problems,
        )
    return {"groups": seen}


def check_identity(
    server_info: Mapping[str, Any], compare: ServerCheck, fields: Iterable[str], verb: str = "bench"
) -> dict[str, Any]:
    """Refuse a server whose ``/server_info`` differs from the profile (BusyError naming each field,
    as ``compare`` words it: the boot watch's own comparison against the rendered flags); the
    compared fields otherwise."""
    problems = compare(server_info)
    if problems:
        raise BusyError(
            "rank 0's /server_info does not match the profile: " + "; ".join(problems),
            hint=f"the ranks run another configuration: run `sparkctl up` with this inventory, then {verb}",
            details=problems,
        )
    return {key: server_info.get(key) for key in fields}


__all__ = [
    "IDENTITY_FIELDS",
    "BusyError",
    "Compare",
    "Load",
    "ServerCheck",
    "after_suite",
    "check_identity",
    "check_idle",
    "check_server",
    "parse_loads",
    "parse_metrics",
    "read_load",
    "server_info",
]
