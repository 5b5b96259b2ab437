"""Where qualify and bench send their requests: rank 0's OpenAI-compatible API, and what it says it is."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx

from sparkctl.errors import InputError, UnhealthyError
from sparkctl.model.redaction import strip_secrets
from sparkctl.render.rank import api_url, served_model_name

if TYPE_CHECKING:
    from openai import AsyncOpenAI, OpenAI

    from sparkctl.model.cluster import Cluster

# The OpenAI client refuses an empty key; a server started without --api-key ignores whatever is sent.
_NO_KEY = "sparkctl-no-key"


@dataclass(frozen=True)
class Endpoint:
    """Rank 0's API as discovered: URL, key, served model name, and whether it is the simulator."""

    root: str  # http://host:port, no trailing slash
    api_key: str
    model: str
    simulator: bool
    context_length: int | None = None
    server_info: dict[str, Any] = field(default_factory=dict)

    @property
    def base_url(self) -> str:
        return f"{self.root}/v1"

    def client(self, timeout: float = 600.0) -> OpenAI:
        # openai costs ~0.75 s to import (python -X importtime); only qualify and bench talk to it,
        # and every other verb that imports this module (status, up) must not pay for it.
        from openai import OpenAI

        return OpenAI(base_url=self.base_url, api_key=self.api_key or _NO_KEY, timeout=timeout, max_retries=0)

    def async_client(self, timeout: float = 600.0) -> AsyncOpenAI:
        from openai import AsyncOpenAI  # on use: see client()

        return AsyncOpenAI(
            base_url=self.base_url, api_key=self.api_key or _NO_KEY, timeout=timeout, max_retries=0
        )

    def label(self) -> str:
        """How outputs name what they measured."""
        return f"{self.model} (simulator)" if self.simulator else self.model


def discover(root: str, api_key: str = "", model: str | None = None, timeout: float = 10.0) -> Endpoint:
    """Ask the server what it serves: ``/server_info`` (simulator flag, context) and ``/v1/models``."""
    root = root.rstrip("/")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        with httpx.Client(timeout=timeout, headers=headers) as http:
            info_resp = http.get(f"{root}/server_info")
            models_resp = http.get(f"{root}/v1/models")
    except httpx.HTTPError as exc:
        raise UnhealthyError(
            f"rank 0 API at {root} is not reachable: {exc}",
            hint="check `sparkctl status`; start the ranks with `sparkctl up`",
        ) from exc
    for resp in (info_resp, models_resp):
        if resp.status_code in (401, 403):
            raise InputError(
                f"rank 0 API at {root} refused the API key ({resp.request.url.path} → {resp.status_code})",
                hint="set the secret the inventory's sparkctl_secrets.api_key points to",
            )
        if resp.status_code != 200:
            raise UnhealthyError(
                f"rank 0 API at {root}: {resp.request.url.path} answered {resp.status_code}",
                hint="wait for `sparkctl status` to show the cluster ready",
            )
    info = info_resp.json()
    cards = models_resp.json().get("data") or []
    served = [str(c.get("id")) for c in cards if c.get("id")]
    if model is None:
        if not served:
            raise UnhealthyError(f"rank 0 API at {root} lists no model in /v1/models")
        model = served[0]
    elif served and model not in served:
        raise UnhealthyError(
            f"rank 0 serves {', '.join(served)}, not the served model name the ranks were given ({model})",
            hint="the running ranks were started from another profile; run `sparkctl up` again",
        )
    context = info.get("context_length")
    if context is None:
        for card in cards:
            if card.get("id") == model and card.get("max_model_len"):
                context = card["max_model_len"]
    return Endpoint(
        root=root,
        api_key=api_key,
        model=model,
        simulator=info.get("simulator") is True,
        context_length=int(context) if context else None,
        server_info=strip_secrets(info, [api_key]),  # results record it: SGLang's carries api_key
    )


def for_cluster(cluster: Cluster, timeout: float = 10.0) -> Endpoint:
    """The endpoint of an inventory: rank 0's API URL, ``secrets.api_key`` and the served name,
    as rendered for the ranks (``sparkctl.render.rank``)."""
    api_key = cluster.secrets["api_key"].resolve() if "api_key" in cluster.secrets else ""
    return discover(api_url(cluster), api_key=api_key, model=served_model_name(cluster), timeout=timeout)
