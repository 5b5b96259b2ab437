"""Where qualify and bench send their requests: rank 0's OpenAI-compatible API, and what it says it is.

On a site of several serving groups each group is measured as its own cluster (its rank 0); the site
itself, every group together, is measured through its front door, the router (``sparkctl_router``):
``for_cluster`` of the whole site answers the router's endpoint (``for_router``), and a site of
several groups without a router has no one endpoint (docs/router.md: which endpoint bench and
qualify use)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx

from sparkctl.errors import InputError, UnhealthyError
from sparkctl.model.redaction import strip_secrets
from sparkctl.render import groups as rgroups
from sparkctl.render import router as rrouter
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
    # Through a router: each group's rank 0 behind it (their /server_info, their idleness: the
    # gateway answers neither), in the site's group order. Empty for a rank 0 itself.
    workers: tuple[Endpoint, ...] = ()
    group: str | None = None  # the serving group whose rank 0 this is (a router's workers)

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
    as rendered for the ranks (``sparkctl.render.rank``); for a whole site of several serving
    groups, its router (``for_router``)."""
    if len(cluster.groups) > 1:
        return for_router(cluster, timeout)
    return discover(api_url(cluster), api_key=_api_key(cluster), model=served_model_name(cluster),
                    timeout=timeout)


def for_router(cluster: Cluster, timeout: float = 10.0) -> Endpoint:
    """The site's front door over its serving groups: the router's client URL (``sparkctl_router``:
    its node's management address and port), the site's key (the router requires it and passes it
    on), and the served model name every group shares. Bad input (exit 2) on a site without a
    router, or whose groups serve under different names (one request would reach either)."""
    if cluster.router is None:
        names = ", ".join(g.name for g in cluster.groups)
        raise InputError(
            f"the site's serving groups ({names}) have no one endpoint: the inventory names no router "
            "(sparkctl_router)",
            hint="measure each group on its own rank 0 (--group NAME), or put the router in front of "
                 "them (sparkctl_router, docs/router.md)")
    views = [rgroups.view(cluster, g) for g in cluster.groups]
    served = {v.groups[0].name: served_model_name(v) for v in views}
    if len(set(served.values())) > 1:
        said = ", ".join(f"{g}: {name}" for g, name in served.items())
        raise InputError(
            f"the router's groups serve under different model names ({said}): a request through it "
            "would reach either", hint="measure each group on its own rank 0 (--group NAME)")
    model = next(iter(served.values()))
    # What each group says it is comes from its own rank 0 (the gateway proxies the data plane, not
    # /server_info); the router itself must list the model and take the key.
    workers = tuple(dataclasses.replace(for_cluster(v, timeout), group=g.name)
                    for g, v in zip(cluster.groups, views, strict=True))
    root = rrouter.url(cluster)
    key = _api_key(cluster)
    _check_models(root, key, model, timeout)
    contexts = [w.context_length for w in workers if w.context_length]
    return Endpoint(root=root, api_key=key, model=model, simulator=all(w.simulator for w in workers),
                    context_length=min(contexts) if contexts else None,
                    server_info=workers[0].server_info, workers=workers)


def _check_models(root: str, api_key: str, model: str, timeout: float) -> None:
    """The router's ``/v1/models`` with the site's key lists ``model`` (InputError: the key refused;
    UnhealthyError: not reachable, not ready, or another model)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        with httpx.Client(timeout=timeout, headers=headers) as http:
            resp = http.get(f"{root}/v1/models")
    except httpx.HTTPError as exc:
        raise UnhealthyError(f"the router at {root} is not reachable: {exc}",
                             hint="check `sparkctl status` (its router row)") from exc
    if resp.status_code in (401, 403):
        raise InputError(f"the router at {root} refused the API key (/v1/models → {resp.status_code})",
                         hint="set the secret the inventory's sparkctl_secrets.api_key points to")
    if resp.status_code != 200:
        raise UnhealthyError(f"the router at {root}: /v1/models answered {resp.status_code}",
                             hint="wait for `sparkctl status` to show the router routing to every group")
    listed = [str(c.get("id")) for c in resp.json().get("data") or [] if isinstance(c, dict)]
    if model not in listed:
        raise UnhealthyError(f"the router at {root} lists {', '.join(listed) or 'no model'}, not {model}",
                             hint="check `sparkctl status` (its router row)")


def _api_key(cluster: Cluster) -> str:
    return cluster.secrets["api_key"].resolve() if "api_key" in cluster.secrets else ""
