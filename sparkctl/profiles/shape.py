"""What a profile needs of the site's shape, and the model dimensions tensor parallelism splits.

A profile says which fabric topologies it was published on (``fabric``), how it pads the model's
dimensions that its --tp-size does not divide (``padding``), where the Engram tables live
(``engram``: packed shards on NVMe, or resident in unified memory) and which files beyond the image
every node must hold (``artifacts``: the switchless ring's patched NCCL). The model validation
(``sparkctl.model.topology``) holds a site's topology and groups to these.

Everything here is data about the published profiles and about DeepSeek-V4.1-Flash itself; nothing
depends on the site.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

# The fabric topologies sparkctl knows. switch: every node's ConnectX-7 port (both PCIe halves) on
# one RoCE switch. triangle: three nodes, each with both physical ports, one cable and one subnet
# per pair. ring: four nodes, each cabled to its two neighbours only (no direct path to the
# opposite node). pair: two nodes on one cable.
Topology = Literal["switch", "triangle", "ring", "pair"]
TOPOLOGIES: tuple[Topology, ...] = ("switch", "triangle", "ring", "pair")
# Nodes each cabled topology has, by construction (switch: any number).
TOPOLOGY_NODES: dict[str, int] = {"triangle": 3, "ring": 4, "pair": 2}
# The only tensor-parallel size a ring carries: NCCL must run ring-only there (a patched NCCL that
# skips the tree and PAT transports, whose queue pairs want the opposite node directly), and the
# publisher's ring profile is TP4 (MiaAI-Lab docs/switchless-ring.md; .env.tp8.example: "a
# switchless ring is TP4-only").
RING_TP = 4
# The environment the publisher's ring profile sets to run NCCL ring-only (the patched library's
# switch; stock NCCL ignores it and the boot fails in the tree transport setup).
RING_ONLY_ENV = "NCCL_SWITCHLESS_RING_ONLY"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# DeepSeek-V4.1-Flash's dimensions that tensor parallelism splits across ranks, as the publishers
# name them (MiaAI-Lab .env.example: "Heads=64 ... are not divisible by 3"; .env.tp8.example:
# "heads=64 / o_groups=8 / draft experts=128 ... all divide by 4"; docs/tp8.md: the shared expert's
# K is 2304 / TP). A --tp-size that does not divide one of the split dimensions needs the profile to
# pad it (``padding``); the experts are split by --ep-size.
MODEL_DIMS: dict[str, int] = {
    "attention_heads": 64,
    "output_groups": 8,
    "shared_expert_k": 2304,
    "draft_experts": 128,
}
# What must divide by --tp-size (after padding) for a rank to get a whole share.
TP_SPLIT = ("attention_heads", "output_groups")
MODEL_EXPERTS = 384  # routed experts of the target model


class FabricNeeds(_Strict):
    """The topologies a profile was published on (``fabric``)."""

    # null: switch, triangle and pair (what the cabling rules and the group size allow); a ring must
    # be listed explicitly, since it needs a ring-only NCCL the profile has to declare.
    topologies: list[Topology] | None = Field(None, min_length=1)

    @field_validator("topologies")
    @classmethod
    def _once(cls, v: list[str] | None) -> list[str] | None:
        if v is not None:
            dup = sorted({t for t in v if v.count(t) > 1})
            if dup:
                raise ValueError(f"listed twice: {', '.join(dup)}")
        return v

    def carried_on(self, topology: str) -> bool:
        """Whether a site of this topology may serve the profile."""
        if self.topologies is None:
            return topology != "ring"
        return topology in self.topologies


class Pad(_Strict):
    """One model dimension the profile pads: in the checkpoint ``size``, served as ``to``.

    ``per: model``: the whole dimension is padded so that --tp-size divides it (TP3: attention heads
    64 -> 96, output groups 8 -> 12, the third rank's attention shard entirely padding).
    ``per: rank``: each rank's share (``size`` / --tp-size) is padded to ``to`` (Mia's TP8: the
    shared expert's K 288 -> 384, a multiple of 128 for the b12x kernel).
    """

    dim: str = Field(description="the model dimension (MODEL_DIMS)")
    per: Literal["model", "rank"]
    to: int = Field(gt=0)
    env: str | None = Field(None, description="the variable that switches the padding on (KEY=VALUE)")
    # Memory the padding adds per rank, when the publisher states it apart from the weights;
    # null: already inside memory.weights_gib_per_rank (the published resident figure).
    gib_per_rank: float | None = Field(None, ge=0)

    @field_validator("dim")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in MODEL_DIMS:
            raise ValueError(f"{v!r} is not a model dimension (known: {', '.join(MODEL_DIMS)})")
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=\S+", v):
            raise ValueError(f"{v!r}: write KEY=VALUE")
        return v

    def problems(self, tp: int) -> list[str]:
        """Why this padding cannot serve --tp-size ``tp`` (empty: it can)."""
        size = MODEL_DIMS[self.dim]
        if self.per == "model":
            if self.to < size:
                return [f"{self.dim}: pads {size} to {self.to}, which is smaller"]
            if self.to % tp:
                return [f"{self.dim}: {self.to} does not divide by --tp-size {tp}"]
            return []
        if size % tp:
            return [f"{self.dim}: {size} does not divide by --tp-size {tp}, so no rank share to pad"]
        if self.to < size // tp:
            return [f"{self.dim}: pads each rank's {size // tp} to {self.to}, which is smaller"]
        return []

    def shown(self, tp: int) -> str:
        size = MODEL_DIMS[self.dim]
        before = size if self.per == "model" else size // max(1, tp)
        return f"{self.dim} {before} -> {self.to}"


class StagedArtifact(_Strict):
    """A file every node holds beside the image and the ranks' containers mount (``artifacts``):
    the switchless ring's patched NCCL. Declared with where it comes from; sparkctl stages it,
    checks its digest on every node and binds it read-only over ``mount`` in the container."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    what: str = Field(min_length=1)
    # Where it comes from: the repository holding the patch set and build script, the upstream
    # source it patches, and the publisher's page that documents it.
    source: str = Field(min_length=1, description="owner/name of the repository with the patches")
    patches: list[str] = Field(min_length=1, description="the patch files, as paths in that repository")
    build: str = Field(min_length=1, description="the build script in that repository")
    upstream: str = Field(min_length=1, description="the source it patches, owner/name@commit")
    documented: str = Field(min_length=1, description="the publisher's page, repository path@commit")
    file: str = Field(pattern=r"^[A-Za-z0-9._+-]+$", description="the file name on the node")
    mount: str = Field(description="the absolute path the container sees it at (read-only)")
    # The markers a good build carries (`strings FILE | grep`), as the publisher checks it.
    must_contain: list[str] = Field(default_factory=list)
    # The binary the publisher used, as it describes it (no SHA-256 is published; the site pins
    # one with sparkctl_profile_overrides once it has built the file).
    published_size: int | None = Field(None, gt=0)
    published_md5: str | None = Field(None, pattern=r"^[0-9a-f]{32}$")
    published_build_id: str | None = Field(None, pattern=r"^[0-9a-f]{40}$")
    sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$", description="the pinned digest")

    @field_validator("mount")
    @classmethod
    def _abs(cls, v: str) -> str:
        if not v.startswith("/") or any(p in (".", "..") for p in v.split("/")):
            raise ValueError(f"{v!r}: must be an absolute path without '..'")
        return v


Engram = Literal["nvme", "resident"]


def tp_split_problems(tp: int, ep: int, padding: list[Pad]) -> list[str]:
    """Why --tp-size ``tp`` / --ep-size ``ep`` cannot split the model with ``padding`` (empty: fine)."""
    problems: list[str] = []
    padded = {p.dim: p for p in padding if p.per == "model"}
    for dim in TP_SPLIT:
        pad = padded.get(dim)
        if pad is None and MODEL_DIMS[dim] % tp:
            problems.append(
                f"args.--tp-size: {tp} does not divide the model's {MODEL_DIMS[dim]} "
                f"{dim.replace('_', ' ')}: "
                f"pad it (padding: [{{dim: {dim}, per: model, to: <a multiple of {tp}>}}]) as the "
                "publisher's TP3 profile does, or use a --tp-size that divides it"
            )
    for pad in padding:
        problems.extend(f"padding: {p}" for p in pad.problems(tp))
    if ep < 1 or tp % ep:
        problems.append(f"args.--ep-size: {ep} does not divide --tp-size {tp} (SGLang splits each TP group "
                        "into EP groups of equal size)")
    else:
        if MODEL_EXPERTS % ep:
            problems.append(f"args.--ep-size: {ep} does not divide the model's {MODEL_EXPERTS} routed "
                            "experts")
    return problems


def shape_problems(*, tp: int, ep: int, padding: list[Pad], fabric: FabricNeeds, env: dict[str, str],
                   engram: Engram, engram_packed_gib: float, artifacts: list[StagedArtifact]) -> list[str]:
    """The cross-field rules of a profile's shape sections, each line ``<section>: <what>``."""
    out = tp_split_problems(tp, ep, padding)
    dims = [p.dim for p in padding]
    for dim in sorted({d for d in dims if dims.count(d) > 1}):
        out.append(f"padding: {dim} padded twice")
    for pad in padding:
        if pad.env is not None:
            key, _, value = pad.env.partition("=")
            if env.get(key) != value:
                out.append(f"padding: {pad.dim} is switched on by {pad.env}, but env sets "
                           f"{key}={env.get(key, '(nothing)')}")
    if fabric.topologies is not None and "ring" in fabric.topologies:
        if tp != RING_TP:
            out.append(f"fabric.topologies: a ring carries --tp-size {RING_TP} only, this profile has {tp}")
        if env.get(RING_ONLY_ENV) != "1":
            out.append(f"fabric.topologies: a ring needs {RING_ONLY_ENV}=1 in env (NCCL's tree transport "
                       "wants the opposite node directly)")
        if not artifacts:
            out.append("fabric.topologies: a ring needs the patched NCCL declared under artifacts "
                       f"(stock NCCL ignores {RING_ONLY_ENV})")
    if engram == "resident":
        if engram_packed_gib:
            out.append(f"memory.engram_packed_gib: {engram_packed_gib:g} with engram: resident (the tables "
                       "live in unified memory; no shards are packed): set 0")
        if env.get("OFFLOAD_MODE") == "nvme":
            out.append("env.OFFLOAD_MODE: nvme with engram: resident; remove it")
        for key, value in env.items():
            if "${engram_dir}" in value:
                out.append(f"env.{key}: names ${{engram_dir}} with engram: resident (nothing is packed there "
                           "and the rank does not mount it); remove it")
    names = [a.name for a in artifacts]
    for name in sorted({n for n in names if names.count(n) > 1}):
        out.append(f"artifacts: {name} declared twice")
    return out
