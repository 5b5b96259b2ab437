"""The qualification suite: does the served model answer correctly, not only answer?

Each check sends fixed requests to rank 0, judges the answers, and saves every request and response
under the results directory (``<check>.json``). The prompts follow R4's published acceptance fixture
(greedy, thinking off, 256-token budget) and its judging: exact answers (``17 × 19`` → ``"323"``,
``{"answer": 42}``, the image colours as a JSON array), never "looks like text". The full suite runs
the acceptance list (text, C8 arithmetic, one and four images, structured JSON, tool round trip)
**before and after** the long-context ladder, as R4 did (``<check>-after.json``), then determinism.
The tool check's value is an eight-digit number rather than R4's 42, so a coincidental 42 cannot pass.

``run_qualify(cluster, suite, results_dir)`` is the entry point other commands use (``up`` calls it as
its last gate); ``qualify_endpoint`` does the same against a bare endpoint (tests, the simulator).

Size: one module on purpose — every check is a small function over the same endpoint, report and
JSON-reading helpers; split, each would only import all of them back.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from sparkctl.errors import InputError
from sparkctl.qa import haystack, images
from sparkctl.qa.endpoint import Endpoint, for_cluster
from sparkctl.qa.published import needle_points
from sparkctl.qa.schema import validate

if TYPE_CHECKING:
    from openai import OpenAI

    from sparkctl.model.cluster import Cluster

Suite = Literal["quick", "full"]

ACCEPTANCE: dict[str, str] = {
    "text": 'text: 17 × 19 → "323" exactly',
    "arithmetic": "arithmetic at C8 (2 waves × 8 distinct)",
    "image-one": "one image: colours left to right, exact",
    "image-four": "four images: colours in order, exact",
    "json": 'structured JSON: {"answer": 42} exactly',
    "tool": "tool call round trip",
}
AFTER = "-after"  # suffix of an acceptance check repeated after the long-context ladder
CHECKS: dict[str, str] = {
    **ACCEPTANCE,
    "needle": "needle-in-a-haystack ladder",
    **{f"{name}{AFTER}": f"{title} (after the long request)" for name, title in ACCEPTANCE.items()},
    "determinism": "greedy determinism",
}
SUITES: dict[str, tuple[str, ...]] = {
    "quick": ("text", "arithmetic", "json", "determinism"),
    "full": tuple(CHECKS),
}

MAX_TOKENS = 256
REQUEST_TIMEOUT_S = 600.0
NEEDLE_TIMEOUT_S = 1200.0
ARITHMETIC = tuple((17 + i, 19) for i in range(8))
JSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"type": "integer"}},
    "required": ["answer"],
    "additionalProperties": False,
}
JSON_EXPECTED = {"answer": 42}
TOOL = {
    "type": "function",
    "function": {
        "name": "lookup_fixture",
        "description": "Look up the stored value for a key.",
        "parameters": {
            "type": "object",
            "properties": {"key": {"type": "string"}},
            "required": ["key"],
            "additionalProperties": False,
        },
    },
}
TOOL_VALUE = "73914062"  # what the tool "returns"; the final answer must repeat it
TEXT_PROMPT = "What is 17 times 19? Return only the integer."
TEXT_EXPECTED = "323"
DETERMINISM_PROMPT = "Write three sentences about the history of the printing press."


@dataclass
class CheckResult:
    name: str
    title: str
    passed: bool
    seconds: float
    detail: str
    evidence: str | None = None
    data: dict[str, Any] = field(default_factory=dict)
    skipped: str | None = None  # why the check did not apply to this server; neither pass nor fail
    phase: str | None = None  # "before" / "after" the long-context request (full suite), else None


@dataclass
class QualifyReport:
    suite: str
    endpoint: str
    model: str
    simulator: bool
    results_dir: Path
    started: str
    seconds: float = 0.0
    checks: list[CheckResult] = field(default_factory=list)
    thermals: dict[str, Any] | None = None  # GPU maxima per node during the run, when sampled

    @property
    def passed(self) -> bool:
        return any(c.passed for c in self.checks) and not self.failed

    @property
    def failed(self) -> list[str]:
        return [c.name for c in self.checks if not c.passed and not c.skipped]

    @property
    def skipped(self) -> list[str]:
        return [c.name for c in self.checks if c.skipped]

    def to_dict(self) -> dict[str, Any]:
        return {
            "suite": self.suite,
            "passed": self.passed,
            "failed": self.failed,
            "skipped": self.skipped,
            "simulator": self.simulator,
            "endpoint": self.endpoint,
            "model": self.model,
            "results_dir": str(self.results_dir),
            "started": self.started,
            "seconds": round(self.seconds, 3),
            "checks": [asdict(c) for c in self.checks],
            "thermals": self.thermals,
        }


ProgressFn = Callable[[str, CheckResult | None], None]


class _Evidence:
    """Every exchange of one check, written to ``<results>/<check>.json``."""

    def __init__(self) -> None:
        self.exchanges: list[dict[str, Any]] = []

    def add(self, request: dict[str, Any], response: Any, seconds: float) -> None:
        body = response.model_dump(mode="json") if hasattr(response, "model_dump") else response
        self.exchanges.append({"request": request, "response": body, "seconds": round(seconds, 4)})


@dataclass
class _Context:
    endpoint: Endpoint
    client: OpenAI
    evidence: _Evidence
    needle_targets: list[int]
    needle_seed: int

    def chat(
        self, record: dict[str, Any] | None = None, timeout: float = REQUEST_TIMEOUT_S, **request: Any
    ) -> Any:
        """One greedy, thinking-off chat completion, recorded as evidence (``record`` replaces the
        request in the evidence, for prompts too large to keep)."""
        body = {"model": self.endpoint.model, "temperature": 0, "max_tokens": MAX_TOKENS, **request}
        extra = {"chat_template_kwargs": {"thinking": False}}
        start = time.perf_counter()
        try:
            resp = self.client.chat.completions.create(**body, extra_body=extra, timeout=timeout)
        except Exception as exc:
            self.evidence.add(
                {**(record or body), **extra},
                {"error": _describe(exc)},
                time.perf_counter() - start,
            )
            raise
        self.evidence.add({**(record or body), **extra}, resp, time.perf_counter() - start)
        return resp


def _text(resp: Any) -> str:
    return (resp.choices[0].message.content or "") if resp.choices else ""


def _user(content: Any) -> list[dict[str, Any]]:
    return [{"role": "user", "content": content}]


def _strip_fence(text: str) -> str:
    text = text.strip()
    match = re.match(r"^```(?:json)?\s*(.*?)\s*```$", text, re.S)
    return match.group(1) if match else text


def _describe(exc: BaseException) -> str:
    """``Type: message (cause)``: the client's own error hides the socket-level reason in its cause."""
    text = f"{type(exc).__name__}: {exc}"
    if getattr(exc, "status_code", None) is not None:
        return text  # the server answered: its own message says why
    cause = exc.__cause__ or exc.__context__
    if cause is not None and str(cause) and str(cause) not in text:
        text += f" ({cause})"
    return text


def _short(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ----------------------------------------------------------------------------------------- checks
CheckFn = Callable[[_Context], tuple[bool, str, dict[str, Any]]]


def check_text(ctx: _Context) -> tuple[bool, str, dict[str, Any]]:
    """R4's text check: the answer, stripped, is exactly ``"323"``; the usage block is sane."""
    resp = ctx.chat(messages=_user(TEXT_PROMPT))
    text = _text(resp)
    problems = []
    if text.strip() != TEXT_EXPECTED:
        problems.append(f"expected exactly {TEXT_EXPECTED!r}")
    usage = resp.usage
    if usage is None or not 1 <= usage.completion_tokens <= MAX_TOKENS or usage.prompt_tokens < 1:
        problems.append(f"implausible usage {usage.model_dump() if usage else None}")
    detail = f"17 × 19 → {_short(text, 40)!r}"
    return not problems, detail + (" — " + "; ".join(problems) if problems else ""), {"answer": text}


def check_arithmetic(ctx: _Context) -> tuple[bool, str, dict[str, Any]]:
    def ask(pair: tuple[int, int]) -> tuple[int, int, str]:
        a, b = pair
        resp = ctx.chat(messages=_user(f"What is {a} times {b}? Return only the integer."))
        return a, b, _text(resp)

    wrong: list[str] = []
    total = 0
    for wave in (1, 2):
        with ThreadPoolExecutor(max_workers=len(ARITHMETIC)) as pool:
            answers = list(pool.map(ask, ARITHMETIC))
        for a, b, text in answers:
            total += 1
            if text.strip().rstrip(".").strip() != str(a * b):
                wrong.append(f"wave {wave}: {a}×{b} → {_short(text, 24)!r} (expected {a * b})")
    if wrong:
        return False, f"{len(wrong)}/{total} wrong: " + "; ".join(wrong[:3]), {"wrong": wrong}
    return True, f"{total}/{total} exact at concurrency {len(ARITHMETIC)}", {}


def _image_check(
    ctx: _Context, fixtures: list[images.ImageFixture], question: str, expected: list[str]
) -> tuple[bool, str, dict[str, Any]]:
    """R4's image checks compare parsed JSON with the expected answer exactly (markdown fence stripped)."""
    content: list[dict[str, Any]] = [
        {"type": "image_url", "image_url": {"url": f.data_url()}} for f in fixtures
    ]
    content.append({"type": "text", "text": question})
    text = _text(ctx.chat(messages=_user(content)))
    data = {"answer": text, "expected": expected}
    try:
        value = json.loads(_strip_fence(text))
    except json.JSONDecodeError:
        return False, f"not a JSON array: {_short(text)!r}", data
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        value = [v.strip().lower() for v in value]
    if value != expected:
        return False, f"answered {json.dumps(value)}, expected {json.dumps(expected)}", data
    return True, f"exact {json.dumps(value)}", data


def check_image_one(ctx: _Context) -> tuple[bool, str, dict[str, Any]]:
    fixture = images.one_image()
    question = (
        "Name the colour of each shape in this image from left to right. Return only a JSON array "
        "of lower-case colour names."
    )
    return _image_check(ctx, [fixture], question, fixture.colours)


def check_image_four(ctx: _Context) -> tuple[bool, str, dict[str, Any]]:
    fixtures = images.four_images()
    question = (
        f"Name the colour of the shape in each of the {len(fixtures)} images, in order. Return only a JSON "
        f"array of {len(fixtures)} lower-case colour names."
    )
    return _image_check(ctx, fixtures, question, [c for f in fixtures for c in f.colours])


def check_json(ctx: _Context) -> tuple[bool, str, dict[str, Any]]:
    resp = ctx.chat(
        messages=_user("Return an object whose answer is the integer 42."),
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "answer", "strict": True, "schema": JSON_SCHEMA},
        },
    )
    text = _text(resp)
    try:
        value = json.loads(_strip_fence(text))
    except json.JSONDecodeError as exc:
        return False, f"not JSON ({exc.msg}): {_short(text)!r}", {"answer": text}
    errors = validate(value, JSON_SCHEMA)
    if errors:
        return False, "schema violations: " + "; ".join(errors), {"answer": value}
    if value != JSON_EXPECTED:
        return (
            False,
            f"valid JSON but {json.dumps(value)}, expected {json.dumps(JSON_EXPECTED)}",
            {"answer": value},
        )
    return True, f"schema-valid {json.dumps(value)}", {"answer": value}


def check_tool(ctx: _Context) -> tuple[bool, str, dict[str, Any]]:
    messages: list[dict[str, Any]] = _user(
        "Use lookup_fixture to retrieve the value for key alpha. Do not guess."
    )
    first = ctx.chat(messages=messages, tools=[TOOL])
    calls = (first.choices[0].message.tool_calls or []) if first.choices else []
    if len(calls) != 1:
        return False, f"expected exactly one tool call, got {len(calls)}: {_short(_text(first))!r}", {}
    call = calls[0]
    try:
        args = json.loads(call.function.arguments or "{}")
    except json.JSONDecodeError:
        return False, f"tool arguments are not JSON: {call.function.arguments!r}", {}
    if call.function.name != "lookup_fixture" or args != {"key": "alpha"}:
        return False, f"wrong call {call.function.name}({call.function.arguments})", {}
    messages.append(
        {
            "role": "assistant",
            "content": first.choices[0].message.content,
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.function.name, "arguments": call.function.arguments},
                }
            ],
        }
    )
    messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps({"value": TOOL_VALUE})})
    final = ctx.chat(messages=messages, tools=[TOOL])
    text = _text(final)
    if TOOL_VALUE not in text:
        return False, f"final answer lacks the tool result {TOOL_VALUE}: {_short(text)!r}", {"answer": text}
    return True, f"lookup_fixture(key=alpha) → {TOOL_VALUE} → {_short(text, 48)!r}", {"answer": text}


def _parse_records(text: str) -> dict[str, str] | None:
    try:
        value = json.loads(_strip_fence(text))
    except json.JSONDecodeError:
        match = re.search(r"\{.*\}", text, re.S)
        if not match:
            return None
        try:
            value = json.loads(match.group(0))
        except json.JSONDecodeError:
            return None
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else None


def check_needle(ctx: _Context) -> tuple[bool, str, dict[str, Any]]:
    if not ctx.needle_targets:
        return False, "no needle targets (unknown context length)", {}
    fit = haystack.TokenFit()
    # Two short calibration prompts (1 output token each) give tokens per filler word; capped so a
    # 1M-token ladder does not pay a long prefill just to learn the tokenizer.
    smallest = min(ctx.needle_targets)
    for words in sorted({min(2000, max(16, smallest // 16)), min(8000, max(64, smallest // 4))}):
        hs = haystack.build(words, ctx.needle_seed, label="calibration")
        resp = ctx.chat(record=_needle_record(hs, 1), messages=_user(hs.prompt), max_tokens=1)
        fit.add(words, resp.usage.prompt_tokens)
    rungs: list[dict[str, Any]] = []
    for target in ctx.needle_targets:
        rung: dict[str, Any] = {"target_tokens": target}
        rungs.append(rung)
        for attempt in range(1, 4):
            hs = haystack.build(
                fit.words_for(target + haystack.AIM_ABOVE), ctx.needle_seed, label=str(target)
            )
            start = time.perf_counter()
            try:
                resp = ctx.chat(
                    record=_needle_record(hs, MAX_TOKENS), messages=_user(hs.prompt), timeout=NEEDLE_TIMEOUT_S
                )
            except Exception as exc:
                rung.update(passed=False, error=_short(_describe(exc), 160), words=hs.words)
                break
            seconds = time.perf_counter() - start
            tokens = resp.usage.prompt_tokens
            fit.add(hs.words, tokens)
            answer = _parse_records(_text(resp))
            rung.update(
                words=hs.words,
                prompt_tokens=tokens,
                seconds=round(seconds, 3),
                attempts=attempt,
                window=list(haystack.window(target)),
                sized=haystack.within(target, tokens),
                found=answer == hs.expected,
                answer=_short(_text(resp), 120),
                expected=hs.expected,
                haystack_sha256=hs.sha256,
            )
            if rung["sized"]:
                break
        rung["passed"] = bool(rung.get("sized") and rung.get("found"))
        if not rung["passed"]:
            break  # larger rungs cost minutes on real hardware and would fail the same way
    for target in ctx.needle_targets[len(rungs) :]:
        rungs.append({"target_tokens": target, "passed": False, "skipped": "a smaller rung failed"})
    ok = all(r["passed"] for r in rungs)
    parts = []
    for r in rungs:
        if "prompt_tokens" in r:
            mark = "✓" if r["passed"] else ("wrong size" if not r["sized"] else "not found")
            parts.append(f"{r['prompt_tokens']:,} {mark} {r['seconds']:.1f}s")
        else:
            parts.append(f"{r['target_tokens']:,} {r.get('error') or 'skipped'}")
    return ok, " · ".join(parts), {"rungs": rungs, "seed": ctx.needle_seed, "fit": fit.samples}


def _needle_record(hs: haystack.Haystack, max_tokens: int) -> dict[str, Any]:
    """The evidence form of a needle request: the haystack is regenerated from (seed, words), not stored."""
    head, tail = hs.prompt[:240], hs.prompt[-240:]
    return {
        "messages": [
            {"role": "user", "content": f"{head} … [{len(hs.prompt):,} characters elided] … {tail}"}
        ],
        "max_tokens": max_tokens,
        "haystack": {
            "seed": hs.seed,
            "words": hs.words,
            "sha256": hs.sha256,
            "expected": hs.expected,
            "regenerate": "sparkctl.qa.haystack.build(words, seed, label)",
        },
    }


def check_determinism(ctx: _Context) -> tuple[bool, str, dict[str, Any]]:
    first = _text(ctx.chat(messages=_user(DETERMINISM_PROMPT), max_tokens=64))
    second = _text(ctx.chat(messages=_user(DETERMINISM_PROMPT), max_tokens=64))
    if not first.strip():
        return False, "empty answer", {}
    if first != second:
        at = next(
            (i for i, (a, b) in enumerate(zip(first, second, strict=False)) if a != b),
            min(len(first), len(second)),
        )
        return (
            False,
            f"two greedy runs differ from character {at}: {_short(first[at:], 30)!r} vs "
            f"{_short(second[at:], 30)!r}",
            {"first": first, "second": second},
        )
    return True, f"identical ({len(first)} characters) across 2 runs", {}


CHECK_FUNCTIONS: dict[str, CheckFn] = {
    "text": check_text,
    "arithmetic": check_arithmetic,
    "image-one": check_image_one,
    "image-four": check_image_four,
    "json": check_json,
    "tool": check_tool,
    "needle": check_needle,
    "determinism": check_determinism,
}


def _function(name: str) -> CheckFn:
    return CHECK_FUNCTIONS[name.removesuffix(AFTER)]


def _phase(name: str, names: Sequence[str]) -> str | None:
    if name.endswith(AFTER):
        return "after"
    if name in ACCEPTANCE and "needle" in names and any(n.endswith(AFTER) for n in names):
        return "before"
    return None


# ----------------------------------------------------------------------------------------- runner
def _stamp() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")


def new_results_dir(parent: Path, kind: str) -> Path:
    """``<parent>/<kind>-<UTC timestamp>``, made unique if two runs start in the same second."""
    base = parent / f"{kind}-{_stamp()}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    path.mkdir(parents=True)
    return path


def qualify_endpoint(
    endpoint: Endpoint,
    suite: str,
    results_dir: Path,
    needle_targets: Sequence[int] = (),
    needle_seed: int = haystack.DEFAULT_SEED,
    on_progress: ProgressFn | None = None,
    checks: Sequence[str] | None = None,
    skip: Mapping[str, str] | None = None,
    thermals: Callable[[], dict[str, Any]] | None = None,
) -> QualifyReport:
    """Run ``suite`` (or the named ``checks``) against ``endpoint``; evidence goes into ``results_dir``.

    ``skip`` maps a check to the reason it does not apply to this server (it is reported, not run).
    ``thermals`` gives the GPU maxima seen during the run, recorded in report.json.
    """
    if suite not in SUITES:
        raise InputError(f"unknown suite {suite!r}", hint=f"choose one of: {', '.join(SUITES)}")
    names = list(checks) if checks else list(SUITES[suite])
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        raise InputError(f"unknown check(s): {', '.join(unknown)}", hint=f"checks: {', '.join(CHECKS)}")
    results_dir.mkdir(parents=True, exist_ok=True)
    report = QualifyReport(
        suite=suite,
        endpoint=endpoint.base_url,
        model=endpoint.model,
        simulator=endpoint.simulator,
        results_dir=results_dir,
        started=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    client = endpoint.client(timeout=REQUEST_TIMEOUT_S)
    begin = time.perf_counter()
    for name in names:
        if skip and name in skip:
            result = CheckResult(
                name,
                CHECKS[name],
                False,
                0.0,
                f"skipped: {skip[name]}",
                skipped=skip[name],
                phase=_phase(name, names),
            )
            report.checks.append(result)
            if on_progress:
                on_progress(name, result)
            continue
        if on_progress:
            on_progress(name, None)
        evidence = _Evidence()
        ctx = _Context(endpoint, client, evidence, list(needle_targets), needle_seed)
        start = time.perf_counter()
        try:
            passed, detail, data = _function(name)(ctx)
        except Exception as exc:  # a check that cannot complete has failed; the reason is its evidence
            passed, detail, data = False, f"error: {_short(_describe(exc), 200)}", {}
        seconds = time.perf_counter() - start
        path = results_dir / f"{name}.json"
        path.write_text(
            json.dumps(
                {
                    "check": name,
                    "passed": passed,
                    "detail": detail,
                    "seconds": round(seconds, 3),
                    "simulator": endpoint.simulator,
                    "data": data,
                    "exchanges": evidence.exchanges,
                },
                indent=2,
                default=str,
            )
        )
        result = CheckResult(
            name, CHECKS[name], passed, seconds, detail, str(path), data, phase=_phase(name, names)
        )
        report.checks.append(result)
        if on_progress:
            on_progress(name, result)
    report.seconds = time.perf_counter() - begin
    report.thermals = thermals() if thermals is not None else None
    summary = {**report.to_dict(), "server_info": endpoint.server_info}
    (results_dir / "report.json").write_text(json.dumps(summary, indent=2, default=str))
    return report


def needle_targets(cluster: Cluster, endpoint: Endpoint) -> list[int]:
    """The ladder for this cluster: the profile's published rungs, else points scaled to its context."""
    context = endpoint.context_length
    arg = cluster.profile.args.get("--context-length")
    if context is None and arg:
        context = int(str(arg))
    if context is None:
        return []
    return haystack.ladder(context, needle_points(cluster.profile))


def run_qualify(
    cluster: Cluster, suite: str, results_dir: Path, on_progress: ProgressFn | None = None,
    thermals: Callable[[], dict[str, Any]] | None = None,
) -> QualifyReport:
    """Qualify the cluster's rank-0 endpoint; evidence under ``results_dir/qualify-<timestamp>/``.

    The report says whether every check passed (``report.passed``) and which failed (``report.failed``);
    an unreachable endpoint raises ``UnhealthyError`` (exit 3), a refused key ``InputError``.
    """
    if suite not in SUITES:
        raise InputError(f"unknown suite {suite!r}", hint=f"choose one of: {', '.join(SUITES)}")
    endpoint = for_cluster(cluster)
    targets = needle_targets(cluster, endpoint) if "needle" in SUITES[suite] else []
    skip = {}
    if not cluster.profile.args.get("--enable-multimodal"):
        reason = f"profile {cluster.profile.name} does not set --enable-multimodal"
        skip = {name: reason for name in CHECKS if name.removesuffix(AFTER) in ("image-one", "image-four")}
    return qualify_endpoint(
        endpoint, suite, new_results_dir(results_dir, "qualify"), targets, on_progress=on_progress, skip=skip,
        thermals=thermals,
    )
