"""HTTP checks of rank 0's API: /health, /ready, /v1/models; the auth header.

The API's URL is ``sparkctl.render.rank.api_url`` (one place, shared with `qualify` and `bench`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import httpx

from sparkctl.render.rank import api_url

if TYPE_CHECKING:
    from sparkctl.model import Cluster

# --- HTTP checks of the ranks -------------------------------------------------------------------


@dataclass
class HttpAnswer:
    code: int | None
    body: Any = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.code == 200


def get(http: httpx.Client, url: str, timeout: float, headers: Mapping[str, str] | None = None) -> HttpAnswer:
    try:
        resp = http.get(url, timeout=timeout, headers=dict(headers or {}))
    except httpx.HTTPError as exc:
        return HttpAnswer(None, None, http_reason(exc))
    try:
        body: Any = resp.json()
    except ValueError:
        body = resp.text[:500]
    return HttpAnswer(resp.status_code, body)


def http_reason(exc: Exception) -> str:
    if isinstance(exc, httpx.ConnectError):
        return "connection refused" if "refused" in str(exc).lower() else f"cannot connect ({exc})"
    if isinstance(exc, httpx.TimeoutException):
        return "timed out"
    return f"{type(exc).__name__}: {exc}"


def auth_headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


@dataclass
class HeadFacts:
    url: str
    health: HttpAnswer
    ready: HttpAnswer
    models: HttpAnswer

    @property
    def served(self) -> list[str]:
        body = self.models.body if isinstance(self.models.body, dict) else {}
        return [str(c.get("id")) for c in body.get("data") or [] if isinstance(c, dict)]

    def as_dict(self) -> dict[str, Any]:
        return {"url": self.url, "health": asdict(self.health) | {"body": None},
                "ready": asdict(self.ready) | {"body": None},
                "models": {"code": self.models.code, "error": self.models.error, "served": self.served}}


def head_checks(cluster: Cluster, http: httpx.Client, api_key: str | None, timeout: float) -> HeadFacts:
    url = api_url(cluster)
    return HeadFacts(
        url,
        get(http, f"{url}/health", timeout),
        get(http, f"{url}/ready", timeout),
        get(http, f"{url}/v1/models", timeout, auth_headers(api_key)),
    )


