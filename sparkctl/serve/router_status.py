"""The router's row of `status`: its unit on its node (one SSH round, that node only), its /health,
and the workers it sees against the groups it should route to.

The router's values come from the plan document (``render.router.entry``: its node, URL, unit and
the groups' rank-0 URLs). The gateway lists its workers at ``/workers`` (smg:
``{"workers": [{"url": …}, …]}``) or, in its earlier releases, ``/list_workers``
(``{"urls": […]}``); either is read. A router that is not active, does not answer /health, or does
not list a group's rank 0 is a reason, and the site is not ready.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx

    from sparkctl.serve.probe import FleetLike

UNIT_KEYS = ("ActiveState", "SubState", "Result", "NRestarts")
WORKER_PATHS = ("/workers", "/list_workers")


@dataclass
class RouterFacts:
    node: str
    url: str
    policy: str
    expected: dict[str, str]  # group -> its rank 0's URL
    reachable: bool = True  # the router node answered SSH
    unit: dict[str, str] = field(default_factory=dict)  # systemctl show's UNIT_KEYS
    health: int | None = None  # /health's status code
    workers: list[str] | None = None  # the URLs the router lists (None: it listed none we could read)
    error: str | None = None  # why the node or the router could not be read

    @property
    def active(self) -> str:
        return self.unit.get("ActiveState", "unknown")

    @property
    def missing(self) -> list[str]:
        """Groups whose rank 0 the router does not list."""
        if self.workers is None:
            return []
        seen = {w.rstrip("/") for w in self.workers}
        return [g for g, u in self.expected.items() if u.rstrip("/") not in seen]

    def reasons(self) -> list[str]:
        """What keeps the router from serving, one line each (none: it routes to every group)."""
        who = f"router on {self.node}"
        if not self.reachable:
            return [f"{who}: node did not answer ({self.error})"]
        out = []
        if self.active != "active":
            detail = f"{self.active}/{self.unit.get('SubState', '')}"
            if self.unit.get("Result") not in (None, "", "success"):
                detail += f", result {self.unit.get('Result')}"
            out.append(f"{who}: unit not running ({detail})")
        if self.health != 200:
            out.append(f"{who}: /health {self.health if self.health is not None else self.error}")
        for group in self.missing:
            out.append(f"{who}: does not list group {group}'s rank 0 ({self.expected[group]})")
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "node": self.node, "url": self.url, "policy": self.policy, "reachable": self.reachable,
            "unit": self.active, "restarts": _int(self.unit.get("NRestarts")), "health": self.health,
            "workers": self.workers, "expected": dict(self.expected), "missing": self.missing,
            "reasons": self.reasons(), "error": self.error,
        }


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def unit_script(unit: str) -> str:
    return f"systemctl show --property {','.join(UNIT_KEYS)} {shlex.quote(unit)}\n"


def parse_unit(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key in UNIT_KEYS:
            out[key] = value.strip()
    return out


def worker_urls(body: Any) -> list[str] | None:
    """The worker URLs in either answer of the gateway (None when the body is neither)."""
    if isinstance(body, Mapping):
        if isinstance(body.get("urls"), list):
            return [str(u) for u in body["urls"]]
        if isinstance(body.get("workers"), list):
            return [str(w.get("url")) for w in body["workers"] if isinstance(w, Mapping) and w.get("url")]
    return None


def _http(entry: Mapping[str, Any], http: httpx.Client, api_key: str | None,
          timeout: float) -> tuple[int | None, list[str] | None, str | None]:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        health = http.get(entry["health_url"], headers=headers, timeout=timeout).status_code
    except Exception as exc:  # any transport error is the row's answer, not a crash of status
        return None, None, type(exc).__name__
    for path in WORKER_PATHS:
        try:
            resp = http.get(entry["url"].rstrip("/") + path, headers=headers, timeout=timeout)
            if resp.status_code == 200:
                found = worker_urls(resp.json())
                if found is not None:
                    return health, found, None
        except Exception:  # an older or newer gateway without this path: try the other
            continue
    return health, None, None


def probe(doc: Mapping[str, Any], fleet: FleetLike, http: httpx.Client, api_key: str | None,
          timeout: float = 5.0) -> RouterFacts | None:
    """The router's row (None on a site without a router): its unit over SSH and its HTTP answers,
    read side by side."""
    entry = doc.get("router")
    if not entry:
        return None
    facts = RouterFacts(node=entry["node"], url=entry["url"], policy=entry["policy"],
                        expected={w["group"]: w["url"] for w in entry["workers"]})
    with ThreadPoolExecutor(max_workers=1) as pool:
        answers = pool.submit(_http, entry, http, api_key, min(timeout, 2.0))
        node = entry["node"]
        found = (fleet.run(unit_script(entry["unit"]), timeout=timeout, only=[node]).get(node)
                 if node in fleet.targets else None)
        facts.health, facts.workers, facts.error = answers.result()
    if found is None or not found.reachable:
        facts.reachable = False
        facts.error = found.error if found is not None else "not among the nodes probed"
    else:
        facts.unit = parse_unit(found.stdout)
    return facts


def covers(doc: Mapping[str, Any]) -> bool:
    """Whether a status over ``doc`` speaks for the whole site behind the router: the document names
    a router, and holds its node and every group's rank 0 (a one-group view under --group does not)."""
    entry = doc.get("router")
    if not entry:
        return False
    names = {e.get("name") for e in doc.get("nodes") or []}
    return entry["node"] in names and all(w["node"] in names for w in entry["workers"])
