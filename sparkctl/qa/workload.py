"""Bench workloads: the publishers' workloads carried with their provenance, and user workloads
pinned by digest.

A workload is a JSON object::

    {"name": "mine", "kind": "coding", "max_tokens": 200, "prompts": ["…", …]}

``kind`` chooses the timing definition (coding: R4's batch aggregate; prose: sparkDash's
post-first-token aggregate). Optional keys say how the requests are built and run:

- ``request.tag``: ``v41bench`` (the community runner's tag at the front,
  ``request.tag_format``), ``sparkdash`` (C1 the exact prompt, C>1 ``request.suffix_format`` at the
  end) or ``sparkctl`` (the default: ``[bench v1 <name> c<C> s<i>]`` at the front);
  ``request.extra``: fields sent beside the prompt (default ``{"ignore_eos": true}``);
- ``regime``: ``r4-repeat`` (R4's repeat suite, the default) or ``sparkdash`` (per trial the
  ``trial`` prefills and decode warm-up, then the levels ascending);
- ``warmups``: ``[{category, prompt, max_tokens}]`` sent at C1 before the suite;
- ``source``: where the text comes from (repository, commit, path, sha256 of that file);
- ``categories``: ``[{category, prompt, max_tokens}]`` (kind ``mixed``): each level runs one batch
  per category, the category's own prompt and budget, and the level's sample is the mean of the
  categories' batch aggregates (the community runner's headline).

The built-in ``coding``, ``mixed`` and ``prose`` are written by ``scripts/extract_workloads.py`` from the
publishers' own files at their pinned commits (the prompt text is the upstream bytes; each file's
``source`` names the file, commit and digest). ``--workload FILE@SHA256`` loads a file only when its
bytes hash to the digest given, so a result always names exactly what produced it (name + sha256 of
the file's bytes); a published figure is shown only beside the workload digest it was measured with
(``published.WORKLOAD_SHA256``).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from sparkctl.errors import InputError
from sparkctl.qa.published import DEFAULT_WORKLOADS, KINDS, WORKLOADS
from sparkctl.qa.request import THINKING_OFF

_DIGEST = re.compile(r"^[0-9a-f]{64}$")
WARMUP_TOKENS = 64
STANDARD_WARMUPS = 3  # R4/community runner: the first three prompts at C1, 64 tokens each


TAGS = ("v41bench", "sparkdash", "sparkctl")
REGIMES = ("r4-repeat", "sparkdash")
DEFAULT_EXTRA: dict[str, Any] = {"ignore_eos": True}  # a user workload's requests, unless it says
SPARKCTL_TAG = "[bench v1 {name} c{c} s{i}] "


@dataclass(frozen=True)
class Warmup:
    category: str
    prompt: str
    max_tokens: int


@dataclass(frozen=True)
class Workload:
    name: str
    kind: str
    max_tokens: int
    prompts: tuple[str, ...]
    sha256: str
    version: int = 1
    origin: str = "built-in"  # "built-in" or the file it was read from
    request: dict[str, Any] = field(default_factory=lambda: {"tag": "sparkctl", "extra": dict(DEFAULT_EXTRA)})
    regime: str = "r4-repeat"
    warmups: tuple[Warmup, ...] = ()
    trial: dict[str, Any] | None = None  # the sparkdash regime's per-trial prefills and decode warm-up
    source: dict[str, Any] | None = None  # the publisher's file the text was extracted from
    title: str | None = None
    categories: tuple[Warmup, ...] = ()  # kind mixed: one batch per category at every level

    @property
    def tag(self) -> str:
        return str(self.request.get("tag", "sparkctl"))

    @property
    def extra(self) -> dict[str, Any]:
        """What each measured request sends beside messages, max_tokens, temperature and stream."""
        return dict(self.request.get("extra", DEFAULT_EXTRA))

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "title": self.title,
            "sha256": self.sha256,
            "max_tokens": self.max_tokens,
            "prompts": len(self.prompts),
            "version": self.version,
            "origin": self.origin,
            "regime": self.regime,
            "request": {k: v for k, v in self.request.items() if k != "extra_read_from"},
            "sends": {"max_tokens": self.max_tokens, "temperature": 0, **THINKING_OFF, **self.extra},
            "warmups": [{"category": w.category, "max_tokens": w.max_tokens} for w in self.warmups],
            "trial": self.trial,
            "source": self.source,
            "categories": [{"category": c.category, "max_tokens": c.max_tokens} for c in self.categories],
        }

    def batches_for(self, concurrency: int) -> list[tuple[str | None, list[str], int]]:
        """(category, the C prompts, budget) of each batch one sample at this level sends: one batch of
        the workload, or for a mix one batch per category, in the publisher's order."""
        if not self.categories:
            return [(None, self.prompts_for(concurrency), self.max_tokens)]
        return [(c.category, self.prompts_for(concurrency, category=c), c.max_tokens)
                for c in self.categories]

    def prompts_for(self, concurrency: int, phase: str = "run", category: Warmup | None = None) -> list[str]:
        """The C prompts of one batch, identical on every repeat (R4 reuses prefixes on purpose):
        the community runner's tag at the front, sparkDash's stream suffix at the end (C1: the
        exact prompt), or sparkctl's tag. ``category``: one category of a mix (its prompt and name)."""
        out = []
        for i in range(concurrency):
            prompt = category.prompt if category else self.prompts[i % len(self.prompts)]
            if self.tag == "v41bench":
                fmt = str(self.request["tag_format"])
                name = category.category if category else self.request.get("category", self.name)
                out.append(fmt.format(version=self.request.get("tag_version", "v1"), phase=phase,
                                      category=name, c=concurrency, i=i)
                           + prompt)
            elif self.tag == "sparkdash":
                suffix = str(self.request["suffix_format"]).format(i=i + 1, n=concurrency)
                out.append(prompt if concurrency <= 1 else prompt + suffix)
            else:
                out.append(SPARKCTL_TAG.format(name=self.name, c=concurrency, i=i) + prompt)
        return out

    def warmup_prompts(self) -> list[tuple[str, int]]:
        """(prompt, max_tokens) of the standard warm-ups at C1: the workload's own (the community
        runner: its first three categories at 64 tokens, tagged ``warm``), else its first three
        prompts at 64 tokens."""
        if self.warmups:
            if self.tag == "v41bench":
                fmt = str(self.request["tag_format"])
                version = self.request.get("tag_version", "v1")
                return [(fmt.format(version=version, phase="warm", category=w.category, c=1, i=0) + w.prompt,
                         w.max_tokens) for w in self.warmups]
            return [(w.prompt, w.max_tokens) for w in self.warmups]
        return [(f"[bench v1 warmup s{i}] {self.prompts[i % len(self.prompts)]}", WARMUP_TOKENS)
                for i in range(STANDARD_WARMUPS)]


def parse_workload(raw: bytes, where: str, origin: str = "built-in") -> Workload:
    """A workload from its bytes; bad content is an InputError naming the field."""
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{where}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise InputError(f"{where}: a workload is a JSON object with name, kind, max_tokens and prompts")
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise InputError(f"{where}: name must be a non-empty string")
    kind = data.get("kind")
    if kind not in KINDS:
        raise InputError(
            f"{where}: kind must be one of {', '.join(KINDS)} (it chooses the timing definition), "
            f"got {kind!r}"
        )
    max_tokens = data.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 2:
        raise InputError(f"{where}: max_tokens must be an integer >= 2, got {max_tokens!r}")
    prompts = data.get("prompts")
    if (
        not isinstance(prompts, list)
        or not prompts
        or not all(isinstance(p, str) and p.strip() for p in prompts)
    ):
        raise InputError(f"{where}: prompts must be a non-empty list of non-empty strings")
    version = data.get("version", 1)
    if not isinstance(version, int) or isinstance(version, bool):
        raise InputError(f"{where}: version must be an integer, got {version!r}")
    request = _request(data.get("request"), where)
    regime = data.get("regime", "r4-repeat")
    if regime not in REGIMES:
        raise InputError(f"{where}: regime must be one of {', '.join(REGIMES)}, got {regime!r}")
    trial = data.get("trial")
    if regime == "sparkdash":
        trial = _trial(trial, where)
    source = data.get("source")
    if source is not None and not (isinstance(source, dict) and all(
            isinstance(source.get(k), str) for k in ("repository", "commit", "path", "sha256"))):
        raise InputError(f"{where}: source must name repository, commit, path and sha256 (strings)")
    title = data.get("title")
    categories = _warmups(data.get("categories", []), where, "categories")
    if (kind == "mixed") != bool(categories):
        raise InputError(f"{where}: kind mixed needs categories, and only a mix has them "
                         "([{category, prompt, max_tokens}])")
    return Workload(
        name.strip(), kind, max_tokens, tuple(prompts), hashlib.sha256(raw).hexdigest(), version, origin,
        request, regime, _warmups(data.get("warmups", []), where), trial, source,
        title if isinstance(title, str) else None, categories,
    )


def _request(raw: Any, where: str) -> dict[str, Any]:
    if raw is None:
        return {"tag": "sparkctl", "extra": dict(DEFAULT_EXTRA)}
    if not isinstance(raw, dict):
        raise InputError(f"{where}: request must be an object (tag, extra)")
    tag = raw.get("tag", "sparkctl")
    if tag not in TAGS:
        raise InputError(f"{where}: request.tag must be one of {', '.join(TAGS)}, got {tag!r}")
    need = {"v41bench": "tag_format", "sparkdash": "suffix_format"}.get(tag)
    if need and not isinstance(raw.get(need), str):
        raise InputError(f"{where}: request.{need} must be a string with request.tag {tag}")
    extra = raw.get("extra", DEFAULT_EXTRA)
    if not isinstance(extra, dict):
        raise InputError(f"{where}: request.extra must be an object of request fields")
    return {**raw, "tag": tag, "extra": dict(extra)}


def _warmups(raw: Any, where: str, key: str = "warmups") -> tuple[Warmup, ...]:
    if not isinstance(raw, list):
        raise InputError(f"{where}: {key} must be a list of {{category, prompt, max_tokens}}")
    out = []
    for i, w in enumerate(raw):
        ok = isinstance(w, dict) and isinstance(w.get("prompt"), str) and isinstance(w.get("max_tokens"), int)
        if not ok:
            raise InputError(f"{where}: {key}[{i}] needs a prompt (string) and max_tokens (integer)")
        out.append(Warmup(str(w.get("category", "warm")), w["prompt"], int(w["max_tokens"])))
    return tuple(out)


def _trial(raw: Any, where: str) -> dict[str, Any]:
    trial = {"prefill_warmup_tokens": 512, "prefill_sizes": [4096], "prefill_max_tokens": 8,
             "decode_warmup_tokens": 32, "decode_warmup_extra": {}, "prefill_extra": {},
             **(raw if isinstance(raw, dict) else {})}
    for key in ("decode_warmup_extra", "prefill_extra"):
        if not isinstance(trial[key], dict):
            raise InputError(f"{where}: trial.{key} must be an object of request fields")
    sizes = trial["prefill_sizes"]
    if not isinstance(sizes, list) or not all(isinstance(n, int) and n > 0 for n in sizes):
        raise InputError(f"{where}: trial.prefill_sizes must be a list of token counts")
    for key in ("prefill_warmup_tokens", "prefill_max_tokens", "decode_warmup_tokens"):
        if not isinstance(trial[key], int) or trial[key] < 0:
            raise InputError(f"{where}: trial.{key} must be a whole number of tokens")
    return trial


def load_builtin(name: str) -> Workload:
    """A pinned prompt set from ``sparkctl/qa/workloads/<name>.json``."""
    if name not in WORKLOADS:
        raise InputError(f"unknown workload {name!r}", hint=f"choose one of: {', '.join(WORKLOADS)}, both")
    raw = resources.files("sparkctl.qa").joinpath("workloads", f"{name}.json").read_bytes()
    return parse_workload(raw, f"built-in workload {name}")


def read_pinned(spec: str, option: str, noun: str, example: str) -> tuple[Path, bytes, str]:
    """``FILE@SHA256`` given to ``option`` (``--workload``, ``--arrivals``): the file's path, its bytes
    and their sha256, which must be the digest; else InputError (exit 2) naming the option, the
    ``noun`` it reads and, for a malformed spec, an ``example`` file pinned the way a shell pins one."""
    path_text, sep, digest = spec.rpartition("@")
    digest = digest.strip().lower().removeprefix("sha256:")
    if not sep or not path_text or not _DIGEST.match(digest):
        raise InputError(
            f"{option} {spec!r}: a {noun} is pinned by its digest, FILE@SHA256 (64 hex digits)",
            hint=f"e.g. {option} {example}@$(sha256sum {example} | cut -d' ' -f1)",
        )
    path = Path(path_text).expanduser()
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{option} {path}: cannot read the file ({exc.strerror or exc})") from None
    actual = hashlib.sha256(raw).hexdigest()
    if actual != digest:
        raise InputError(
            f"{option} {path}: sha256 {actual} does not match the pinned {digest}",
            hint=f"the {noun} changed since it was pinned; check it, then pin the new digest",
        )
    return path, raw, actual


def load_pinned(spec: str) -> Workload:
    """``FILE@SHA256``: the file's bytes must hash to the digest, else InputError (exit 2)."""
    path, raw, _ = read_pinned(spec, "--workload", "workload file", "prompts.json")
    return parse_workload(raw, f"--workload {path}", origin=str(path))


def resolve(specs: list[str]) -> list[Workload]:
    """``coding``, ``prose``, ``mixed``, ``both`` (coding and prose) or ``FILE@SHA256`` (repeatable), in
    the order given, no repeats."""
    out: dict[str, Workload] = {}
    for spec in specs or ["both"]:
        if spec == "both":
            loaded = [load_builtin(n) for n in DEFAULT_WORKLOADS]
        elif spec in WORKLOADS:
            loaded = [load_builtin(spec)]
        elif "@" in spec:
            loaded = [load_pinned(spec)]
        else:
            raise InputError(
                f"--workload {spec!r} is not coding, prose, mixed, both or FILE@SHA256",
                hint="a workload file is pinned by its digest: --workload FILE@SHA256",
            )
        for w in loaded:
            if w.name in out and out[w.name].sha256 != w.sha256:
                raise InputError(f"--workload: two different workloads are both named {w.name!r}")
            out[w.name] = w
    return list(out.values())
