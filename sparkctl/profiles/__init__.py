"""Serving profiles: the SGLang flags, environment, memory arithmetic and readiness gates of one
published way to serve DeepSeek-V4.1-Flash on four Sparks, kept as YAML data next to this file.

A profile holds only what does not depend on the site. Everything derived from the inventory
(model path, node count and rank, rendezvous address, listen address and port, API key, network
environment) is added by ``sparkctl.render`` and is refused here, so no fact lives in two places.

Sites tune a profile with ``sparkctl_profile_overrides`` (same shape as the file): mappings merge
per key (``args``, ``env``, ``memory``, ``gates``, ``simulator``, ``container``, ``kit``,
``thermals``), lists
and scalars replace. In ``args`` a value of ``false`` drops a flag; in ``env`` a value of ``null``
drops a variable.

Size: one module on purpose — the profile schema and its loader (merge, validation, messages)
describe one YAML file; SGLang's own flag catalogue lives apart in ``flags``.
"""

from __future__ import annotations

import copy
import re
import string
from collections.abc import Mapping
from importlib import resources
from typing import Any, ClassVar, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sparkctl import yamltext
from sparkctl.errors import InputError
from sparkctl.profiles import flags as sglang_flags
from sparkctl.profiles.shape import Engram, FabricNeeds, Pad, StagedArtifact, shape_problems

GIB = 1024**3

# Flags that sparkctl renders from the inventory; a profile that sets them is refused.
CLUSTER_FLAGS: dict[str, str] = {
    "--model-path": "from sparkctl_paths.model_dir",
    "--model": "from sparkctl_paths.model_dir",
    "--nnodes": "the number of hosts in the sparks group",
    "--node-rank": "from sparkctl_rank of each host",
    "--dist-init-addr": "the head's address and sparkctl_ports.dist_init",
    "--nccl-init-addr": "the head's address and sparkctl_ports.dist_init",
    "--host": "always 0.0.0.0, so every rank's /health is reachable",
    "--port": "from sparkctl_ports.api",
    "--api-key": "from sparkctl_secrets.api_key, in a 0600 file, never on the command line",
    "--config": "the rank's 0600 secrets file",
}

# Environment variables that sparkctl renders per node from the inventory.
CLUSTER_ENV: dict[str, str] = {
    "SGLANG_HOST_IP": "each node's bootstrap address",
    "HOST_IP": "each node's bootstrap address, as SGLANG_HOST_IP",
    "NCCL_SOCKET_IFNAME": "from sparkctl_fabric.bootstrap_over and the fabric ports",
    "GLOO_SOCKET_IFNAME": "from sparkctl_fabric.bootstrap_over and the fabric ports",
    "NCCL_IB_HCA": "from the hca of every sparkctl_fabric_ports entry",
    "NCCL_IB_TC": "from sparkctl_fabric.host_qos and the switch's lossless class",
    "B12X_ROCE_TRAFFIC_CLASS": "from sparkctl_fabric.host_qos and the switch's lossless class",
}

# Placeholders allowed in string values of args and env; the renderer fills them per runtime
# (container paths inside the container, host paths for venv and lab).
PLACEHOLDERS = frozenset({"model_dir", "engram_dir", "cache_dir", "state_dir"})

# Sections whose keys an override merges one by one (the rest replace whole).
MERGED_SECTIONS = ("args", "env", "memory", "gates", "simulator", "container", "kit", "thermals")

_FLAG_RE = re.compile(r"^--[a-z0-9][a-z0-9-]*$")
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

ArgValue = bool | int | float | str | list[int | float | str] | dict[str, Any] | None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Memory(_Strict):
    """Per-rank memory arithmetic of GB10 unified memory (GiB unless the name says otherwise)."""

    unified_gib: float = Field(gt=0, description="memory the OS sees per node (CPU and GPU share it)")
    weights_gib_per_rank: float = Field(gt=0, description="resident weights per rank, draft included")
    kv_bytes_per_token_rank: float = Field(1670.75, gt=0, description="KV bytes per token per rank")
    prefill_transient_bytes_per_token2: float = Field(
        14, gt=0, description="indexer transient: bytes x chunk x prefix"
    )
    outside_pool_limit_gib: float | None = Field(
        None,
        gt=0,
        description="room for the prefill transient; null = unified - floor - weights - KV pin",
    )
    floor_gib: float = Field(2, ge=0, description="MemAvailable below this stops the ranks")
    engram_packed_gib: float = Field(47.21, ge=0, description="packed Engram shards per rank on NVMe")
    disk_margin_gib: float = Field(8, ge=0, description="free NVMe kept beyond checkpoint and shards")
    # A bound on the prefill transient that the profile's own code enforces (Mia's chunked indexer,
    # DSV41_INDEXER_CHUNKED=1: logits scored in row chunks of at most 2 GiB); null = the formula.
    prefill_transient_cap_gib: float | None = Field(
        None, gt=0, description="the transient's bound when the profile chunks the indexer; null = formula"
    )


# Names a marker's expected values may use, filled per rank from the rendered launch: the rank,
# --tp-size, --ep-size and what follows from them (MoE tensor parallel = tp / ep, and where a rank
# sits in it). ``${384 / ep}``: whole-number arithmetic (* and /, left to right) on these names.
MARKER_VARS = ("rank", "tp", "ep", "moe_tp", "moe_rank", "ep_rank")
_MARKER_REF = re.compile(r"\$\{([^}]*)\}")
_MARKER_TERM = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*|\d+)\s*")


def marker_vars(rank: int, tp: int, ep: int) -> dict[str, int]:
    """The values a rank's marker expectations are filled with (``MARKER_VARS``)."""
    ep = max(1, ep)
    moe_tp = max(1, tp // ep)
    return {"rank": rank, "tp": tp, "ep": ep, "moe_tp": moe_tp, "moe_rank": rank % moe_tp,
            "ep_rank": rank // moe_tp}


def _marker_expr(expr: str, values: Mapping[str, int]) -> int:
    """``a * b / c`` over whole numbers and ``values``, left to right; a division must be exact."""
    parts = re.split(r"([*/])", expr)
    total: int | None = None
    op = ""
    for i, part in enumerate(parts):
        if i % 2:
            op = part
            continue
        m = _MARKER_TERM.fullmatch(part)
        if m is None:
            raise ValueError(f"${{{expr}}}: write names ({', '.join(MARKER_VARS)}) and whole numbers "
                             "joined by * or /")
        word = m.group(1)
        if word.isdigit():
            term = int(word)
        elif word in values:
            term = int(values[word])
        else:
            raise ValueError(f"${{{expr}}}: unknown name {word!r} (known: {', '.join(MARKER_VARS)})")
        if total is None:
            total = term
        elif op == "*":
            total *= term
        elif term == 0 or total % term:
            raise ValueError(f"${{{expr}}}: {total} / {term} is not a whole number with {_shown(values)}")
        else:
            total //= term
    assert total is not None
    return total


def _shown(values: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={values[k]}" for k in ("tp", "ep") if k in values)


def fill_marker_value(value: Any, values: Mapping[str, int]) -> Any:
    """An expected value with its ``${...}`` filled: a string that is one placeholder becomes the
    number, lists and mappings are filled item by item, anything else is kept."""
    if isinstance(value, list):
        return [fill_marker_value(v, values) for v in value]
    if isinstance(value, Mapping):
        return {k: fill_marker_value(v, values) for k, v in value.items()}
    if not isinstance(value, str) or "${" not in value:
        return value
    whole = _MARKER_REF.fullmatch(value.strip())
    if whole:
        return _marker_expr(whole.group(1), values)
    return _MARKER_REF.sub(lambda m: str(_marker_expr(m.group(1), values)), value)


class MarkerRole(_Strict):
    """One role of a marker record that maps entry names to entries (the MoE layout's ``target``)."""

    count: int = Field(ge=0, description="how many entries the role holds")
    each: dict[str, Any] = Field(description="every entry equals this mapping exactly")


class MarkerJson(_Strict):
    """What the JSON object after the marker must hold (R4's scripts/cluster.py ``layout()`` checks)."""

    # each: every record is checked; last: only the last one (the publisher's layout receipt).
    records: Literal["each", "last"] = "each"
    fields: dict[str, Any] = Field(default_factory=dict, description="key -> expected value")
    distinct: dict[str, list[Any]] = Field(
        default_factory=dict, description="key -> the set of values the records carry together"
    )
    roles: dict[str, MarkerRole] = Field(default_factory=dict)


class MarkerWhen(_Strict):
    """The marker is expected only when the rank's rendered environment has ``env`` = ``equals``."""

    env: str = Field(min_length=1)
    equals: str
    # forbidden: a rank that logs it the other way fails (R4: RoCEnante active in the NCCL control).
    otherwise: Literal["forbidden", "ignored"] = "ignored"


class LogMarker(_Strict):
    """A line the rank logs during a good boot."""

    pattern: str = Field(min_length=1, description="regular expression searched in the rank log")
    ranks: Literal["head", "all"] = "all"
    count: int | None = Field(None, ge=1, description="exact number of matches, null = at least one")
    # true: a boot without it fails; false: informational; "with-kit": printed by the serving kit,
    # so required when the site configures one (sparkctl_kit) and informational otherwise.
    required: bool | Literal["with-kit"] = True
    # The JSON object that follows the pattern on the line, checked field by field.
    record: MarkerJson | None = Field(None, alias="json")
    # Other lines (regular expressions) that must appear whenever this marker is expected.
    requires: list[str] = Field(default_factory=list)
    when: MarkerWhen | None = None

    def required_for(self, has_kit: bool) -> bool:
        """Whether a boot without this marker fails, given whether the site mounts the serving kit."""
        return has_kit if self.required == "with-kit" else bool(self.required)

    def expected_for(self, env: Mapping[str, str]) -> bool:
        """Whether the rank (its rendered environment) should log this marker at all."""
        return self.when is None or env.get(self.when.env) == self.when.equals

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, v: str) -> str:
        try:
            re.compile(v)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from exc
        return v

    @field_validator("requires")
    @classmethod
    def _requires_compile(cls, v: list[str]) -> list[str]:
        for pat in v:
            try:
                re.compile(pat)
            except re.error as exc:
                raise ValueError(f"{pat!r}: not a regular expression: {exc}") from exc
        return v

    def fill_problems(self, tp: int, ep: int) -> list[str]:
        """Why the expected values cannot be filled for some rank of a tp x ep group (empty: fine)."""
        if self.record is None:
            return []
        spec = self.record.model_dump()
        problems: list[str] = []
        for rank in range(max(1, tp)):
            try:
                fill_marker_value(spec, marker_vars(rank, tp, ep))
            except ValueError as exc:
                problems.append(f"{self.pattern}: {exc}")
                break
        return problems


_SMOKE_NAME = r"^[a-z0-9][a-z0-9-]*$"


class SmokeRequest(_Strict):
    """One chat completion of the boot smoke and what its answer must be."""

    name: str = Field(pattern=_SMOKE_NAME)
    prompt: str = Field(min_length=1, description="the user message, sent as is")
    max_tokens: int = Field(gt=0)
    expect: str | None = Field(None, description="the answer's content, exactly (blanks around stripped)")
    finish_reason: str | None = Field(None, description="the finish_reason the answer must have")


class SmokeWarmup(_Strict):
    """Prompts of a few sizes sent once each before the batch: prefill tiers, JIT, first-touch pages.
    Their answers are not checked (a failed request is reported, not fatal)."""

    prompt_words: list[int] = Field(min_length=1, description="approximate prompt sizes in words")
    filler: str = Field(min_length=1, description="repeated words // 20 + 1 times")
    suffix: str = Field(min_length=1, description="appended after the filler")
    max_tokens: int = Field(gt=0)
    timeout_s: float = Field(600, gt=0, description="per request")


class SmokeBatch(_Strict):
    """One concurrent batch of ``--max-running-requests`` requests whose every answer must read as
    Latin-script prose: no CJK or Hangul, and at least ``min_latin_ratio`` of the non-blank characters
    ASCII letters, digits or ``punctuation`` (the garbage-output guard)."""

    prompts: list[str] = Field(min_length=1, description="cycled to fill the batch")
    max_tokens: int = Field(gt=0)
    timeout_s: float = Field(600, gt=0, description="per request")
    min_latin_ratio: float = Field(0.7, gt=0, le=1)
    punctuation: str = ".,;:'\"!?-()"
    # true: garbage from any request fails `up`; false: reported as a warning only.
    fatal: bool = True


class Smoke(_Strict):
    """What `up` sends rank 0 once it is ready, before it calls the cluster ready (a profile's own
    boot smoke and warm-up, replacing the one-question chat gate)."""

    source: str = Field(min_length=1, description="where these requests and checks are published")
    temperature: float = Field(0, ge=0)
    chat_template_kwargs: dict[str, Any] = Field(default_factory=dict)
    timeout_s: float = Field(300, gt=0, description="per request")
    requests: list[SmokeRequest] = Field(min_length=1, description="sent in order; any failure is fatal")
    warmup: SmokeWarmup | None = None
    batch: SmokeBatch | None = None


class Gates(_Strict):
    """What `up` waits for before it calls the cluster ready."""

    boot_timeout_s: int = Field(gt=0, description="deadline from first start to rank-0 ready")
    health_timeout_s: int = Field(gt=0, description="per-request timeout of health probes")
    log_markers: list[LogMarker] = Field(default_factory=list)
    server_info_fields: list[str] = Field(
        default_factory=list, description="/server_info keys that must equal the rendered flags"
    )
    qualify_on_up: bool = False
    # The profile's boot smoke, warm-up and garbage-output guard (null: one chat question).
    smoke: Smoke | None = None
    drain_s: int = Field(
        75, gt=0, le=3600,
        description="seconds rank 0 may drain in-flight requests after SIGTERM before the forced shutdown "
                    "(`down`'s default grace, the container's stop time)",
    )


class Thermals(_Strict):
    """When `status`, `watch`, `bench` and `qualify` call a GPU hot or throttled (warnings: they never
    change the verdict). The defaults are a starting point for stacked Sparks; tune them per site."""

    gpu_temp_warn_c: float = Field(85.0, gt=0, le=150, description="GPU temperature (°C) warned about")
    gpu_temp_crit_c: float = Field(
        92.0, gt=0, le=150, description="GPU temperature (°C) warned about as critical (act now)"
    )
    sm_clock_ratio_warn: float = Field(
        0.75, gt=0, le=1, description="SM clock / its maximum below this, under load, is throttling"
    )
    load_util_pct: float = Field(
        50.0, ge=0, le=100, description="GPU utilization (%) from which the GPU counts as under load"
    )

    @model_validator(mode="after")
    def _ordered(self) -> Thermals:
        if self.gpu_temp_crit_c <= self.gpu_temp_warn_c:
            raise ValueError(f"gpu_temp_crit_c {self.gpu_temp_crit_c:g} must be above "
                             f"gpu_temp_warn_c {self.gpu_temp_warn_c:g}")
        return self


def _relative(value: str) -> str:
    parts = value.split("/")
    if not value or value.startswith("/") or any(part in ("", ".", "..") for part in parts):
        raise ValueError(f"{value!r}: must be a relative path inside the kit (no '..', no leading '/')")
    return value


def _absolute(value: str) -> str:
    if not value.startswith("/") or any(part in (".", "..") for part in value.split("/")):
        raise ValueError(f"{value!r}: must be an absolute path without '..'")
    return value.rstrip("/") or "/"


class KitFile(_Strict):
    """A file sparkctl renders from the inventory and mounts read-only where the kit expects it."""

    render: Literal["r4-cluster-json"] = Field(description="which renderer writes it (render/kit.py)")
    dst: str = Field(description="where the container sees it")

    @field_validator("dst")
    @classmethod
    def _dst(cls, v: str) -> str:
        return _absolute(v)


class KitExtract(_Strict):
    """Unpack an archive of the kit into a directory of it, every member checked against a manifest
    (``{name: sha256}``; the archive's members must be exactly the manifest's keys)."""

    archive: str = Field(description="the archive inside the kit (tar, any compression)")
    manifest: str = Field(description="JSON {member name: sha256} inside the kit")
    into: str = Field(description="the directory of the kit the members are written under")

    @field_validator("archive", "manifest", "into")
    @classmethod
    def _rel(cls, v: str) -> str:
        return _relative(v)


class KitRecord(_Strict):
    """The publisher's own record of a compile: ``{<key>: <product sha256>, "image": <image ID>}``."""

    path: str = Field(description="the record file inside the kit")
    key: str = Field(min_length=1, description="the key holding the product's SHA-256")

    @field_validator("path")
    @classmethod
    def _rel(cls, v: str) -> str:
        return _relative(v)


class KitCompile(_Strict):
    """A command run in the profile's engine image (no network, the kit version bound read-write at
    the kit's mount) that must leave ``product`` in the kit."""

    argv: list[str] = Field(min_length=1, description="the command in the image; argv[0] is the entrypoint")
    product: str = Field(description="the file it writes, inside the kit")
    record: KitRecord | None = Field(None, description="the publisher's record file of the build")

    @field_validator("product")
    @classmethod
    def _rel(cls, v: str) -> str:
        return _relative(v)

    @field_validator("argv")
    @classmethod
    def _argv(cls, v: list[str]) -> list[str]:
        if any(not a for a in v):
            raise ValueError("an empty argument")
        return v


class KitBuildStep(_Strict):
    """One step `sparkctl stage kit` performs on every node after the kit's files are verified and
    before ``current`` switches: exactly one of ``extract`` and ``compile``."""

    extract: KitExtract | None = None
    compile: KitCompile | None = None

    @model_validator(mode="after")
    def _one(self) -> KitBuildStep:
        if (self.extract is None) == (self.compile is None):
            raise ValueError("a build step is exactly one of extract {archive, manifest, into} or "
                             "compile {argv, product, record}")
        return self

    def as_fact(self) -> dict[str, Any]:
        """The step as the spark_kit role and the node-side build take it (``nodeside.kitbuild``)."""
        return self.model_dump(exclude_none=True)


class Kit(_Strict):
    """How the published serving kit (sparkctl_kit in the inventory) is mounted into the rank's container.

    The kit is the publisher's repository at a pinned commit: adapters and runtime under ``mount``,
    and SGLang source overlays (``manifest``: rel -> before/after SHA-256) bound read-only, one file
    each, over ``overlay_target`` in the image.
    """

    required: bool = Field(False, description="the profile cannot serve without its kit")
    mount: str = Field(description="where the container sees the kit (read-only)")
    manifest: str = Field(description="the overlay manifest inside the kit")
    overlay_source: str = Field(description="directory of the overlay files inside the kit")
    overlay_target: str = Field(description="the SGLang source tree in the image the overlays replace")
    overlays: list[str] = Field(min_length=1, description="every overlay, as the manifest lists it")
    adapters: list[str] = Field(
        default_factory=list, description="kit directories that must be on PYTHONPATH"
    )
    dockerfile: str | None = Field(None, description="Dockerfile inside the kit (image_source: build)")
    # The kit's lock file (R4's versions.lock.json: runtime configuration, checkpoint config, SGLang
    # commit and adapter digests), checked in the rank's container before the engine starts
    # (sparkctl.nodeside.prestart). Without one the pre-start checks only the overlays.
    lock: str | None = Field(None, description="the kit's lock file (pinned digests), inside the kit")
    files: list[KitFile] = Field(default_factory=list)
    # engine: the container runs `sglang serve <argv>` as sparkctl renders it (the API key through
    # --config). launcher: it runs the kit's own launcher (``launcher``, ``${rank}`` filled), which
    # re-checks the kit and builds SGLang's arguments itself from the rendered cluster file.
    entrypoint: Literal["engine", "launcher"] = "engine"
    launcher: list[str] = Field(default_factory=list, description="the kit's launcher argv")
    # What the kit's publisher builds on every node when it stages the kit (sparkctl stage kit
    # runs the same steps, in order; nodeside/kitbuild.py).
    build: list[KitBuildStep] = Field(default_factory=list, description="the kit's build steps")

    @model_validator(mode="after")
    def _launcher(self) -> Kit:
        if self.entrypoint == "launcher" and not self.launcher:
            raise ValueError("entrypoint launcher needs the launcher argv ([python3, <mount>/launch.py])")
        return self

    @model_validator(mode="after")
    def _build(self) -> Kit:
        products: list[str] = []
        for i, step in enumerate(self.build):
            if step.compile is not None:
                c = step.compile
                if f"{self.mount}/{c.product}" not in c.argv:
                    raise ValueError(f"build.{i}.compile.product: {c.product} must be what argv writes, "
                                     f"{self.mount}/{c.product} (the kit is mounted at {self.mount})")
                products += [c.product] + ([c.record.path] if c.record else [])
            elif step.extract is not None:
                products.append(step.extract.into)
        dup = sorted({p for p in products if products.count(p) > 1})
        if dup:
            raise ValueError(f"build: produced twice: {', '.join(dup)}")
        return self

    @field_validator("mount", "overlay_target")
    @classmethod
    def _abs(cls, v: str) -> str:
        return _absolute(v)

    @field_validator("manifest", "overlay_source", "dockerfile", "lock")
    @classmethod
    def _rel(cls, v: str | None) -> str | None:
        return None if v is None else _relative(v)

    @field_validator("overlays", "adapters")
    @classmethod
    def _rel_list(cls, v: list[str]) -> list[str]:
        for item in v:
            _relative(item)
        dup = sorted({x for x in v if v.count(x) > 1})
        if dup:
            raise ValueError(f"listed twice: {', '.join(dup)}")
        return v


class ImageRequirement(_Strict):
    """The engine image a profile cannot serve without (``image``): the publisher's, built by
    `sparkctl stage image` (``sparkctl_runtime.image_source: build``) from ``dockerfile`` of the
    serving kit (``sparkctl_kit``, the publisher's repository at a pinned commit, used only as the
    build context, never mounted), on ``base``; or that build pinned by ``sparkctl_runtime.image_id``.
    `validate` refuses any other source; `preflight` checks ``env`` in the image on every node."""

    requires: Literal["build-from-kit"]
    source: str = Field(min_length=1, description="the publisher's repository the image is built from")
    dockerfile: str = Field(description="the Dockerfile inside the kit")
    base: str = Field(pattern=r"^[^@\s]+@sha256:[0-9a-f]{64}$", description="the FROM image, by digest")
    env: dict[str, str] = Field(
        default_factory=dict, description="Config.Env entries the image must carry (what loads the adapters)"
    )

    @field_validator("dockerfile")
    @classmethod
    def _rel(cls, v: str) -> str:
        return _relative(v)


class Bind(_Strict):
    """A directory of the rank's run directory bound into the container, kept across restarts."""

    src: Literal["cache", "state"] = Field(description="<run_dir>/<src> on the node (sparkctl creates it)")
    dst: str = Field(description="where the container sees it")
    readonly: bool = False

    @field_validator("dst")
    @classmethod
    def _dst(cls, v: str) -> str:
        return _absolute(v)


class Container(_Strict):
    """What the rank's container gets from the host besides its mounts (``docker run`` options)."""

    gpus: str | None = Field("all", description="--gpus value; null on a node without NVIDIA's runtime")
    devices: list[str] = Field(default_factory=lambda: ["/dev/infiniband"], description="--device paths")
    ulimits: dict[str, str] = Field(
        default_factory=lambda: {"memlock": "-1", "nofile": "1048576:1048576"},
        description="--ulimit NAME=VALUE, in this order",
    )
    privileged: bool = Field(False, description="--privileged: every host device, no seccomp confinement")
    shm_size: str | None = Field(
        None, pattern=r"^[0-9]+[bkmg]?$", description="--shm-size; null = Docker's default"
    )
    binds: list[Bind] = Field(default_factory=list, description="run-directory binds (after /cache, /state)")
    # A host NCCL build used instead of the image's: bound read-only at nccl_mount with LD_LIBRARY_PATH
    # pointing there. null = the image's own NCCL (a site sets it in sparkctl_profile_overrides).
    host_nccl_dir: str | None = None
    nccl_mount: str = "/nccl"

    @field_validator("host_nccl_dir", "nccl_mount")
    @classmethod
    def _nccl_paths(cls, v: str | None) -> str | None:
        return None if v is None else _absolute(v)

    @field_validator("devices")
    @classmethod
    def _devices(cls, v: list[str]) -> list[str]:
        return [_absolute(d) for d in v]

    @field_validator("ulimits", mode="before")
    @classmethod
    def _ulimits(cls, v: Any) -> Any:
        if isinstance(v, Mapping):
            return {str(k): str(val) for k, val in v.items()}
        return v


class Needle(_Strict):
    tokens: int = Field(gt=0)
    seconds: float | None = Field(None, gt=0)
    passed: bool = True


class Published(_Strict):
    """The figures the publisher measured with this profile (tok/s), for comparison only."""

    source: str
    date: str | None = None
    coding: dict[int, float] = Field(default_factory=dict, description="concurrency -> tok/s")
    prose: dict[int, float] = Field(default_factory=dict, description="concurrency -> tok/s")
    needle: list[Needle] = Field(default_factory=list)
    notes: str | None = None
    # The measured samples behind a coding figure (concurrency -> samples); the figure is their mean.
    coding_samples: dict[int, list[float]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _samples_make_the_figure(self) -> Published:
        for level, samples in self.coding_samples.items():
            if level not in self.coding:
                raise ValueError(f"coding_samples.{level}: no coding figure at concurrency {level}")
            if not samples:
                raise ValueError(f"coding_samples.{level}: no samples")
            mean = sum(samples) / len(samples)
            if round(mean, 2) != round(self.coding[level], 2):
                raise ValueError(f"coding_samples.{level}: the samples average {mean:.2f}, "
                                 f"not the published {self.coding[level]:g}")
        return self


class Simulator(_Strict):
    """Behaviour of the lab's rank simulator (the lab profile only)."""

    boot_delay_s: float = Field(ge=0, description="seconds from start to ready")
    token_rate: float = Field(gt=0, description="decode tokens per second per stream")
    hold_mem_mib: int = Field(ge=0, description="memory each simulated rank holds while up")
    faults: list[str] = Field(
        default_factory=list,
        description="misbehaviours to inject for negative tests (see `sparkctl-sim-rank --sim-help`)",
    )

    # The simulator's environment variable for each setting: the one contract between the profile
    # and the simulator (a test checks it against the simulator's own knob table).
    ENV: ClassVar[dict[str, str]] = {
        "boot_delay_s": "SPARKCTL_SIM_BOOT_DELAY_S",
        "token_rate": "SPARKCTL_SIM_TOKEN_RATE",
        "hold_mem_mib": "SPARKCTL_SIM_HOLD_MIB",
        "faults": "SPARKCTL_SIM_FAULT",
    }

    # Where the serving kit is, for the simulator's launcher checks (the same contract).
    KIT_ENV: ClassVar[dict[str, str]] = {
        "mount": "SPARKCTL_SIM_KIT_DIR",
        "manifest": "SPARKCTL_SIM_KIT_MANIFEST",
        "overlay_target": "SPARKCTL_SIM_KIT_TARGET",
        "adapters": "SPARKCTL_SIM_KIT_ADAPTERS",
    }

    def kit_environment(self, kit: Kit) -> dict[str, str]:
        """The rank's environment telling the simulator where the mounted kit is."""
        return {
            self.KIT_ENV["mount"]: kit.mount,
            self.KIT_ENV["manifest"]: kit.manifest,
            self.KIT_ENV["overlay_target"]: kit.overlay_target,
            self.KIT_ENV["adapters"]: ",".join(kit.adapters),
        }

    def environment(self) -> dict[str, str]:
        """The rank's environment for these settings (no faults, no variable)."""
        env: dict[str, str] = {}
        for key, value in self.model_dump().items():
            if isinstance(value, list):
                if not value:
                    continue
                text = ",".join(str(v) for v in value)
            else:
                text = str(value)
            env[self.ENV[key]] = text
        return env


class Profile(_Strict):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    description: str
    args: dict[str, ArgValue]
    env: dict[str, str] = Field(default_factory=dict)
    memory: Memory
    gates: Gates
    published: Published | None = None
    simulator: Simulator | None = None
    container: Container = Field(default_factory=lambda: Container.model_validate({}))
    kit: Kit | None = None
    image: ImageRequirement | None = None
    thermals: Thermals = Field(default_factory=lambda: Thermals.model_validate({}))
    # What the profile needs of the site's shape (sparkctl.profiles.shape): the topologies it was
    # published on, the model dimensions it pads, where the Engram tables live, and the files every
    # node holds beside the image.
    fabric: FabricNeeds = Field(default_factory=lambda: FabricNeeds.model_validate({}))
    padding: list[Pad] = Field(default_factory=list)
    engram: Engram = "nvme"
    artifacts: list[StagedArtifact] = Field(default_factory=list)

    @field_validator("args")
    @classmethod
    def _check_args(cls, args: dict[str, ArgValue]) -> dict[str, ArgValue]:
        problems = []
        for flag, value in args.items():
            if not _FLAG_RE.match(flag):
                problems.append(f"{flag}: not a long flag (--lower-case-words)")
            elif flag in CLUSTER_FLAGS:
                problems.append(f"{flag}: sparkctl renders it ({CLUSTER_FLAGS[flag]}); remove it")
            elif value is False:
                problems.append(f"{flag}: false only removes a flag in overrides")
            else:
                problems.extend(f"{flag}: {p}" for p in _placeholder_problems(value))
                problems.extend(sglang_flags.problems(flag, value))
        if problems:
            raise ValueError("\n".join(problems))
        return {flag: sglang_flags.plain(flag, value) for flag, value in args.items()}

    @field_validator("env", mode="before")
    @classmethod
    def _env_strings(cls, env: Any) -> Any:
        if not isinstance(env, Mapping):
            return env
        out: dict[str, Any] = {}
        problems = []
        for key, value in env.items():
            if not isinstance(key, str) or not _ENV_RE.match(key):
                problems.append(f"{key}: not an environment variable name")
            elif key in CLUSTER_ENV:
                problems.append(f"{key}: sparkctl renders it ({CLUSTER_ENV[key]}); remove it")
            elif isinstance(value, bool) or value is None or not isinstance(value, str | int | float):
                problems.append(f"{key}: value must be a string (quote it)")
            else:
                out[key] = str(value)
                problems.extend(f"{key}: {p}" for p in _placeholder_problems(out[key]))
        if problems:
            raise ValueError("\n".join(problems))
        return out

    @model_validator(mode="after")
    def _check_required(self) -> Profile:
        missing = [f for f in ("--tp-size", "--context-length", "--max-total-tokens",
                               "--chunked-prefill-size", "--mem-fraction-static") if f not in self.args]
        if missing:
            raise ValueError(f"args must set {', '.join(missing)} (the memory checks need them)")
        for i, marker in enumerate(self.gates.log_markers):
            for problem in marker.fill_problems(self.tp_size, self.ep_size):
                raise ValueError(f"gates.log_markers.{i}.json: {problem}")
        for field in self.gates.server_info_fields:
            if _field_flag(field) not in self.args:
                raise ValueError(f"gates.server_info_fields: {field} has no flag --{field.replace('_', '-')}"
                                 " in args to compare with")
        return self

    @model_validator(mode="after")
    def _check_shape(self) -> Profile:
        problems = shape_problems(
            tp=self.tp_size, ep=self.ep_size, padding=self.padding, fabric=self.fabric, env=self.env,
            engram=self.engram, engram_packed_gib=self.memory.engram_packed_gib, artifacts=self.artifacts,
        )
        if problems:
            raise ValueError("\n".join(problems))
        return self

    # -- values the rest of sparkctl reads ---------------------------------------------------

    def _int(self, flag: str, default: int | None = None) -> int:
        value = self.args.get(flag, default)
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise InputError(f"profile {self.name}: {flag} must be a number, got {value!r}")
        return int(value)

    @property
    def tp_size(self) -> int:
        return self._int("--tp-size")

    @property
    def ep_size(self) -> int:
        return self._int("--ep-size", 1)

    @property
    def context_length(self) -> int:
        return self._int("--context-length")

    @property
    def max_total_tokens(self) -> int:
        return self._int("--max-total-tokens")

    @property
    def chunk(self) -> int:
        return self._int("--chunked-prefill-size")

    @property
    def max_running_requests(self) -> int | None:
        return self._int("--max-running-requests") if "--max-running-requests" in self.args else None

    @property
    def served_model_name(self) -> str | None:
        value = self.args.get("--served-model-name")
        return str(value) if value is not None else None

    @property
    def mem_fraction_static(self) -> float:
        value = self.args["--mem-fraction-static"]
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise InputError(f"profile {self.name}: --mem-fraction-static must be a number, got {value!r}")
        return float(value)

    # -- memory arithmetic (one place; `validate` reports these) -------------------------------

    @property
    def kv_pool_gib(self) -> float:
        """KV pool pinned by --max-total-tokens, per rank."""
        return self.max_total_tokens * self.memory.kv_bytes_per_token_rank / GIB

    @property
    def resident_weights_gib(self) -> float:
        """Weights per rank with the padding the publisher states apart from them."""
        return self.memory.weights_gib_per_rank + sum(p.gib_per_rank or 0 for p in self.padding)

    @property
    def prefill_transient_gib(self) -> float:
        """Peak indexer transient of one prefill chunk at the full context, per rank (at most the
        profile's own bound, where it chunks the indexer)."""
        formula = self.memory.prefill_transient_bytes_per_token2 * self.chunk * self.context_length / GIB
        cap = self.memory.prefill_transient_cap_gib
        return formula if cap is None else min(formula, cap)

    @property
    def static_pool_gib(self) -> float:
        """Memory SGLang may take for weights and KV (--mem-fraction-static of the total)."""
        return self.memory.unified_gib * self.mem_fraction_static

    @property
    def transient_limit_gib(self) -> float:
        """Room left for the prefill transient once weights, the KV pin and the floor are taken."""
        if self.memory.outside_pool_limit_gib is not None:
            return self.memory.outside_pool_limit_gib
        m = self.memory
        return m.unified_gib - m.floor_gib - self.resident_weights_gib - self.kv_pool_gib

    def memory_problems(self) -> list[str]:
        """Why this profile cannot fit a node, with the arithmetic; empty when it fits."""
        m = self.memory
        problems = []
        need = self.resident_weights_gib + self.kv_pool_gib
        if need > self.static_pool_gib:
            problems.append(
                f"KV pin does not fit: weights {self.resident_weights_gib:.2f} GiB + KV "
                f"{self.max_total_tokens:,} tokens x {m.kv_bytes_per_token_rank} B = "
                f"{self.kv_pool_gib:.2f} GiB "
                f"= {need:.2f} GiB > static pool {m.unified_gib} GiB x {self.mem_fraction_static} = "
                f"{self.static_pool_gib:.2f} GiB; lower --max-total-tokens to at most "
                f"{self.max_kv_tokens():,}"
            )
        if self.prefill_transient_gib > self.transient_limit_gib:
            problems.append(
                f"prefill transient does not fit: {m.prefill_transient_bytes_per_token2:g} B x chunk "
                f"{self.chunk:,} x context {self.context_length:,} = {self.prefill_transient_gib:.2f} GiB > "
                f"{self.transient_limit_gib:.2f} GiB outside the pool; use --chunked-prefill-size "
                f"{self.max_chunk()} or less, or a shorter --context-length"
            )
        return problems

    def max_kv_tokens(self) -> int:
        """Largest --max-total-tokens the static pool holds."""
        room = (self.static_pool_gib - self.resident_weights_gib) * GIB
        return max(0, int(room // self.memory.kv_bytes_per_token_rank))

    def max_chunk(self) -> int:
        """Largest power-of-two chunk whose transient fits at the full context."""
        per_chunk_token = self.memory.prefill_transient_bytes_per_token2 * self.context_length
        limit = self.transient_limit_gib * GIB
        if per_chunk_token > limit:
            return 0
        chunk = 1
        while per_chunk_token * chunk * 2 <= limit:
            chunk *= 2
        return chunk

    def expected_server_info(self) -> dict[str, Any]:
        """The /server_info values the gates compare, taken from the rendered flags."""
        return {f: self.args[_field_flag(f)] for f in self.gates.server_info_fields}


def _field_flag(field: str) -> str:
    return "--" + field.replace("_", "-")


def _placeholder_problems(value: Any) -> list[str]:
    if isinstance(value, list):
        return [p for v in value for p in _placeholder_problems(v)]
    if not isinstance(value, str):
        return []
    problems = []
    for match in string.Template.pattern.finditer(value):
        name = match.group("named") or match.group("braced")
        if match.group("invalid") is not None:
            problems.append(f"stray '$' in {value!r} (write $$ for a literal $)")
        elif name is not None and name not in PLACEHOLDERS:
            problems.append(f"unknown placeholder ${{{name}}} (known: {', '.join(sorted(PLACEHOLDERS))})")
    return problems


# -- loading -------------------------------------------------------------------------------------


def list_profiles() -> list[str]:
    """Names of the profiles shipped with sparkctl."""
    root = resources.files(__name__)
    return sorted(p.name[: -len(".yml")] for p in root.iterdir() if p.name.endswith(".yml"))


def profile_text(name: str) -> str:
    """The YAML text of a shipped profile (comments included)."""
    if name not in list_profiles():
        raise InputError(
            f"unknown profile {name!r}",
            hint=f"choose one of: {', '.join(list_profiles())} (`sparkctl profiles` lists them)",
        )
    return resources.files(__name__).joinpath(f"{name}.yml").read_text(encoding="utf-8")


def _merge(base: dict[str, Any], overrides: Mapping[str, Any], where: str) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in overrides.items():
        if key == "name":
            raise InputError(f"{where}.name: the profile is chosen with sparkctl_profile, not overridden")
        if key in MERGED_SECTIONS and isinstance(value, Mapping):
            current = merged.get(key)
            section: dict[str, Any] = dict(current) if isinstance(current, Mapping) else {}
            for k, v in value.items():
                if (key == "args" and v is False) or (key == "env" and v is None):
                    section.pop(k, None)
                else:
                    section[k] = copy.deepcopy(v)
            merged[key] = section
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _loc(loc: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in loc if not (isinstance(p, str) and p.startswith(("function-", "union["))))


def load_profile(name: str, overrides: Mapping[str, Any] | None = None, *,
                 where: str = "sparkctl_profile_overrides") -> Profile:
    """The named profile with site overrides merged in.

    Raises InputError (exit 2) listing every problem, each naming its field path.
    """
    try:
        data = yamltext.safe_load(profile_text(name))
    except yaml.YAMLError as exc:  # a shipped file is broken: still a clear message
        raise InputError(f"profile {name}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise InputError(f"profile {name}: the file is not a mapping")
    if overrides:
        if not isinstance(overrides, Mapping):
            raise InputError(f"{where}: must be a mapping like {{args: {{...}}, env: {{...}}}}")
        data = _merge(data, overrides, where)
    try:
        return Profile.model_validate(data)
    except ValidationError as exc:
        prefix = where if overrides else f"profile {name}"
        details = []
        for e in exc.errors():
            path = ".".join(filter(None, (prefix, _loc(e["loc"]))))
            for line in e["msg"].removeprefix("Value error, ").splitlines():
                key, sep, text = line.partition(": ")
                keyed = sep and e["loc"] in (("args",), ("env",))
                details.append(f"{path}.{key}: {text}" if keyed else f"{path}: {line}")
        raise InputError(
            f"profile {name}: {len(details)} problem(s) in the profile or its overrides",
            hint=f"fix {where} in group_vars (same shape as `sparkctl profiles show {name}`)",
            details=details,
        ) from None
