"""A profile's boot smoke, warm-up and garbage-output guard (``gates.smoke``), run by `up` on rank 0
once it is ready: the publisher's own readiness requests, sent as the profile writes them.

Order, as the publisher's launcher runs them: every smoke request (any failure is fatal), then the
warm-up prompts (answers unchecked, failures reported), then one concurrent batch of
``--max-running-requests`` whose every answer must read as Latin-script prose.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx

from sparkctl.serve.http import http_reason

if TYPE_CHECKING:
    from sparkctl.profiles import Smoke, SmokeBatch


@dataclass
class SmokeResult:
    """What the smoke found: ``ok`` decides the gate; ``warnings`` never do."""

    ok: bool
    detail: str
    warnings: list[str] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)


def looks_like_latin_prose(text: str | None, min_ratio: float = 0.7,
                           punctuation: str = ".,;:'\"!?-()") -> bool:
    """True when ``text`` reads as Latin-script prose: something besides blanks, no CJK or Hangul,
    and at least ``min_ratio`` of the non-blank characters ASCII letters, digits or ``punctuation``."""
    body = [ch for ch in (text or "") if not ch.isspace()]
    if not body:
        return False
    if any("\u3000" <= ch <= "\u9fff" or "\uac00" <= ch <= "\ud7af" for ch in body):
        return False
    latin = sum(1 for ch in body if ch.isascii() and (ch.isalnum() or ch in punctuation))
    return latin / len(body) >= min_ratio


def batch_prompts(batch: SmokeBatch, size: int) -> list[str]:
    """The batch's prompts, cycled to ``size`` (at least one)."""
    n = max(1, size)
    return [batch.prompts[i % len(batch.prompts)] for i in range(n)]


def warmup_prompt(filler: str, suffix: str, words: int) -> str:
    """A warm-up prompt of about ``words`` words: the filler (20 words) repeated, then the suffix."""
    return filler * (words // 20 + 1) + suffix


class _Chat:
    def __init__(self, http: httpx.Client, url: str, headers: Mapping[str, str], model: str | None,
                 smoke: Smoke) -> None:
        self.http, self.url, self.headers, self.smoke = http, url, dict(headers), smoke
        self.model = model

    def body(self, prompt: str, max_tokens: int) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if self.model is not None:
            body["model"] = self.model
        body.update(temperature=self.smoke.temperature, max_tokens=max_tokens)
        if self.smoke.chat_template_kwargs:
            body["chat_template_kwargs"] = dict(self.smoke.chat_template_kwargs)
        body["messages"] = [{"role": "user", "content": prompt}]
        return body

    def ask(self, prompt: str, max_tokens: int, timeout: float) -> tuple[str | None, dict[str, Any]]:
        """(error, the answer's choice) of one chat completion; error None on an answer."""
        try:
            resp = self.http.post(f"{self.url}/v1/chat/completions", json=self.body(prompt, max_tokens),
                                  headers=self.headers, timeout=timeout)
        except httpx.HTTPError as exc:
            return http_reason(exc), {}
        if resp.status_code != 200:
            return f"HTTP {resp.status_code}: {resp.text[:200]}", {}
        try:
            choice = resp.json()["choices"][0]
            if not isinstance(choice["message"], dict):
                raise TypeError("message is not an object")
        except (ValueError, KeyError, IndexError, TypeError):
            return f"not a chat completion: {resp.text[:200]}", {}
        return None, choice


def run_smoke(http: httpx.Client, url: str, headers: Mapping[str, str], model: str | None,
              smoke: Smoke, batch_size: int) -> SmokeResult:
    """Send the profile's smoke, warm-up and batch to ``url`` (rank 0's API root)."""
    chat = _Chat(http, url, headers, model, smoke)
    records: list[dict[str, Any]] = []
    for req in smoke.requests:
        error, choice = chat.ask(req.prompt, req.max_tokens, smoke.timeout_s)
        content = (choice.get("message") or {}).get("content") if choice else None
        reason = choice.get("finish_reason") if choice else None
        records.append({"phase": "smoke", "name": req.name, "error": error, "content": content,
                        "finish_reason": reason})
        if error:
            return SmokeResult(False, f"smoke {req.name}: {error}", records=records)
        if req.expect is not None and (content or "").strip() != req.expect:
            return SmokeResult(False, f"smoke {req.name}: answered {(content or '')[:60]!r}, "
                                      f"expected exactly {req.expect!r}", records=records)
        if req.finish_reason is not None and reason != req.finish_reason:
            return SmokeResult(False, f"smoke {req.name}: finish_reason {reason!r}, "
                                      f"expected {req.finish_reason!r}", records=records)
    warnings: list[str] = []
    if smoke.warmup is not None:
        w = smoke.warmup
        for words in w.prompt_words:
            error, _choice = chat.ask(warmup_prompt(w.filler, w.suffix, words), w.max_tokens, w.timeout_s)
            records.append({"phase": "warmup", "words": words, "error": error})
            if error:
                warnings.append(f"warm-up prompt (~{words} words) failed: {error}")
    detail = f"smoke passed ({', '.join(r.name for r in smoke.requests)})"
    if smoke.batch is None:
        return SmokeResult(True, detail, warnings, records)
    b = smoke.batch
    prompts = batch_prompts(b, batch_size)
    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
        answers = list(pool.map(lambda p: chat.ask(p, b.max_tokens, b.timeout_s), prompts))
    garbled: list[str] = []
    for prompt, (error, choice) in zip(prompts, answers, strict=True):
        text = (choice.get("message") or {}).get("content") if choice else None
        records.append({"phase": "batch", "prompt": prompt, "error": error, "content": text})
        if error:
            warnings.append(f"batch request failed: {error}")
        elif not looks_like_latin_prose(text, b.min_latin_ratio, b.punctuation):
            garbled.append(f"{prompt[:40]!r} -> {(text or '')[:60]!r}")
    if garbled:
        what = (f"{len(garbled)}/{len(prompts)} requests of a concurrent batch of {len(prompts)} did not "
                f"answer Latin prose: " + "; ".join(garbled[:3]))
        if b.fatal:
            return SmokeResult(False, what, warnings, records)
        warnings.append(what)
        return SmokeResult(True, detail + f"; batch of {len(prompts)} garbled (warning)", warnings, records)
    return SmokeResult(True, detail + f"; batch of {len(prompts)} answered prose", warnings, records)
