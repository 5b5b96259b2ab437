"""The qualification suite: does the served model answer correctly, not only answer?

Each check sends fixed requests to rank 0, judges the answers, and saves every request and response
under the results directory (``<check>.json``). Requests are R4's (greedy, thinking off, 256-token
budget) and so is the judging: exact answers (``17 × 19`` → ``"323"``, ``{"answer": 42}``), never
"looks like text". The vision checks send R4's prompts with images sparkctl draws to R4's description
(``images``: a 960×640 image with the printed code ``NORTH 7314``, a red square and a blue circle; four
images with four printed codes) and compare the parsed JSON with R4's expected answers exactly; the
needle is R4's long-context probe (``haystack``: ``" the"`` filler at 32,768 / 131,072 / 299,000 units,
R4's instruction and record layout), judged on the exact records and the −64/+768 prompt-token window.
Prompts and expected answers are read from ``sparkctl/qa/probes/r4.json``, which names their sources.
The full suite runs the acceptance list (text, C8 arithmetic, one and four images, structured JSON,
tool round trip) **before and after** the long-context ladder, as R4 did (``<check>-after.json``),
then determinism. The tool check's value is an eight-digit number rather than R4's 42, so a
coincidental 42 cannot pass.

``run_qualify(cluster, suite, results_dir)`` is the entry point other commands use (``up`` calls it as
its last gate); ``qualify_endpoint`` does the same against a bare endpoint (tests, the simulator).
As bench's suites (``idle``, R4's repeat client), ``run_qualify`` measures an idle server only: zero
running and waiting requests before the first check, else ``BusyError`` and nothing run; with the
boot watch's ``server_check``, ``/server_info`` must match the profile too; a server busy after
the last check fails the run (``idle-after``: other requests shared the suite).

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
from sparkctl.qa import haystack, idle, images, probedata
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
    "image-one": "one image: printed code and two shapes left to right, exact",
    "image-four": "four images: printed codes in order, exact",
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

IDLE_AFTER = "idle-after"  # what ``failed`` names when the server was busy after the suite
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
    idle: list[dict[str, Any]] = field(default_factory=list)  # the idle checks before and after
    identity_checked: dict[str, Any] | None = None  # the /server_info fields compared with the profile
    busy_after: str | None = None  # the server was not idle after the suite: the run failed

    @property
    def passed(self) -> bool:
        return any(c.passed for c in self.checks) and not self.failed

    @property
    def failed(self) -> list[str]:
        failed = [c.name for c in self.checks if not c.passed and not c.skipped]
        return [*failed, IDLE_AFTER] if self.busy_after else failed

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
            "idle": self.idle,
            "identity_checked": self.identity_checked,
            "busy_after": self.busy_after,
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
    needle_units: list[int]
    needle_tag: str
    needle_published: bool  # the rungs are R4's filler sizes (else scaled to a small context)
    needle_context: int | None = None  # the served context, when neither the server nor the profile says

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


def _parse_answer(text: str) -> Any:
    """The answer as JSON, a surrounding markdown fence removed (R4's client strips one the same way)."""
    return json.loads(_strip_fence(text))


def _image_check(
    ctx: _Context, probe: dict[str, Any], fixtures: list[images.ImageFixture]
) -> tuple[bool, str, dict[str, Any]]:
    """R4's vision check: its prompt first, then the images; the parsed JSON must equal its answer."""
    content: list[dict[str, Any]] = [{"type": "text", "text": probe["prompt"]}]
    content += [{"type": "image_url", "image_url": {"url": f.data_url()}} for f in fixtures]
    text = _text(ctx.chat(messages=_user(content)))
    expected = probe["expected"]
    data = {
        "answer": text,
        "expected": expected,
        "images": [{"number": f.number, "code": f.code, "sha256": f.sha256} for f in fixtures],
        "probes_sha256": probedata.digest(),
    }
    try:
        value = _parse_answer(text)
    except json.JSONDecodeError:
        return False, f"not JSON: {_short(text)!r}", data
    if value != expected:
        return False, f"answered {json.dumps(value)}, expected {json.dumps(expected)}", data
    return True, f"exact {json.dumps(value)}", data


def check_image_one(ctx: _Context) -> tuple[bool, str, dict[str, Any]]:
    return _image_check(ctx, probedata.r4()["vision"]["single"], [images.one_image()])


def check_image_four(ctx: _Context) -> tuple[bool, str, dict[str, Any]]:
    return _image_check(ctx, probedata.r4()["vision"]["four"], images.four_images())


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


def _parse_records(text: str) -> dict[str, Any] | None:
    try:
        value = _parse_answer(text)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def check_needle(ctx: _Context) -> tuple[bool, str, dict[str, Any]]:
    """R4's long-context probe, one rung at a time, smallest first; a failed rung ends the ladder."""
    if not ctx.needle_units:
        return False, "no needle sizes (unknown context length)", {}
    context = ctx.endpoint.context_length or ctx.needle_context
    rungs: list[dict[str, Any]] = []
    for units in ctx.needle_units:
        needle = haystack.build(units, ctx.needle_tag)
        rung: dict[str, Any] = {"filler_units": units, "window": list(haystack.window(units))}
        rungs.append(rung)
        start = time.perf_counter()
        try:
            resp = ctx.chat(
                record=_needle_record(needle), messages=_user(needle.prompt), timeout=NEEDLE_TIMEOUT_S
            )
        except Exception as exc:
            rung.update(passed=False, error=_short(_describe(exc), 160))
            break
        seconds = time.perf_counter() - start
        tokens = resp.usage.prompt_tokens if resp.usage is not None else 0
        text = _text(resp)
        verdict = haystack.judge(units, _parse_records(text), tokens, context)
        rung.update(
            prompt_tokens=tokens,
            seconds=round(seconds, 3),
            sized=verdict.sized,
            found=verdict.found,
            fits=verdict.fits,
            passed=verdict.passed,
            answer=_short(text, 120),
            expected=needle.expected,
            prompt_sha256=needle.sha256,
        )
        if not verdict.passed:
            break  # larger rungs cost minutes on real hardware and would fail the same way
    for units in ctx.needle_units[len(rungs) :]:
        rungs.append({"filler_units": units, "passed": False, "skipped": "a smaller rung failed"})
    ok = all(r["passed"] for r in rungs)
    parts = []
    for r in rungs:
        if "prompt_tokens" in r:
            mark = "✓" if r["passed"] else _needle_fault(r)
            tokens = f"{r['filler_units']:,} units → {r['prompt_tokens']:,} tokens"
            parts.append(f"{tokens} {mark} {r['seconds']:.1f}s")
        else:
            parts.append(f"{r['filler_units']:,} units {r.get('error') or 'skipped'}")
    if not ctx.needle_published:
        parts.append("sizes scaled to the context, not R4's")
    data = {
        "rungs": rungs,
        "tag": ctx.needle_tag,
        "published_sizes": ctx.needle_published,
        "probes_sha256": probedata.digest(),
    }
    return ok, " · ".join(parts), data


def _needle_fault(rung: dict[str, Any]) -> str:
    if not rung["found"]:
        return "wrong answer"
    if not rung["sized"]:
        return "outside −64/+768"
    return "no room for the answer"


def _needle_record(needle: haystack.Needle) -> dict[str, Any]:
    """The evidence form of a needle request: the prompt is regenerated from (units, tag), not stored."""
    head, tail = needle.prompt[:240], needle.prompt[-240:]
    return {
        "messages": [
            {"role": "user", "content": f"{head} … [{len(needle.prompt):,} characters elided] … {tail}"}
        ],
        "max_tokens": MAX_TOKENS,
        "needle": {
            "filler_units": needle.units,
            "tag": needle.tag,
            "sha256": needle.sha256,
            "expected": needle.expected,
            "regenerate": "sparkctl.qa.haystack.build(filler_units, tag)",
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
    needle_units: Sequence[int] = (),
    needle_tag: str | None = None,
    needle_published: bool = True,
    needle_context: int | None = None,
    on_progress: ProgressFn | None = None,
    checks: Sequence[str] | None = None,
    skip: Mapping[str, str] | None = None,
    thermals: Callable[[], dict[str, Any]] | None = None,
    idle_checks: bool = False,
    server_check: idle.Compare | None = None,
) -> QualifyReport:
    """Run ``suite`` (or the named ``checks``) against ``endpoint``; evidence goes into ``results_dir``.

    ``skip`` maps a check to the reason it does not apply to this server (it is reported, not run).
    ``thermals`` gives the GPU maxima seen during the run, recorded in report.json. ``idle_checks``:
    refuse a busy server before the first check (``idle.BusyError``, nothing written) and fail the
    run on one busy after the last; ``server_check`` (with them): refuse a ``/server_info`` that
    differs from the profile.
    """
    if suite not in SUITES:
        raise InputError(f"unknown suite {suite!r}", hint=f"choose one of: {', '.join(SUITES)}")
    names = list(checks) if checks else list(SUITES[suite])
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        raise InputError(f"unknown check(s): {', '.join(unknown)}", hint=f"checks: {', '.join(CHECKS)}")
    before: list[dict[str, Any]] = []
    identity_checked = None
    if idle_checks:
        before.append(idle.check_idle(endpoint, "before the qualify suite", verb="qualify"))
        if server_check is not None:
            identity_checked = idle.check_server(
                endpoint, server_check, idle.IDENTITY_FIELDS, verb="qualify"
            )
    results_dir.mkdir(parents=True, exist_ok=True)
    report = QualifyReport(
        suite=suite,
        endpoint=endpoint.base_url,
        model=endpoint.model,
        simulator=endpoint.simulator,
        results_dir=results_dir,
        started=datetime.now(UTC).isoformat(timespec="seconds"),
        idle=before,
        identity_checked=identity_checked,
    )
    client = endpoint.client(timeout=REQUEST_TIMEOUT_S)
    # A fresh tag per run: R4 gave each run its own prefix, so no size reuses a cached prefix.
    tag = needle_tag or f"sparkctl-{results_dir.name}"
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
        ctx = _Context(
            endpoint, client, evidence, list(needle_units), tag, needle_published, needle_context
        )
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
    if idle_checks:
        record, report.busy_after = idle.after_suite(endpoint, "after the qualify suite")
        report.idle.append(record)
    report.thermals = thermals() if thermals is not None else None
    summary = {**report.to_dict(), "server_info": endpoint.server_info}
    (results_dir / "report.json").write_text(json.dumps(summary, indent=2, default=str))
    return report


def served_context(cluster: Cluster, endpoint: Endpoint) -> int | None:
    """The served context length: the server's own, else the profile's ``--context-length``."""
    arg = cluster.profile.args.get("--context-length")
    return endpoint.context_length or (int(str(arg)) if arg else None)


def needle_rungs(cluster: Cluster, endpoint: Endpoint) -> tuple[list[int], bool]:
    """The needle sizes for this cluster (filler units) and whether they are R4's own sizes."""
    context = served_context(cluster, endpoint)
    if context is None:
        return [], True
    return haystack.rungs(context, needle_points(cluster.profile))


def run_qualify(
    cluster: Cluster, suite: str, results_dir: Path, on_progress: ProgressFn | None = None,
    thermals: Callable[[], dict[str, Any]] | None = None,
    server_check: idle.Compare | None = None, endpoint: Endpoint | None = None,
) -> QualifyReport:
    """Qualify the cluster's rank-0 endpoint (or ``endpoint``: the site's router, ``--via-router``);
    evidence under ``results_dir/qualify-<timestamp>/``.

    The report says whether every check passed (``report.passed``) and which failed (``report.failed``);
    an unreachable endpoint raises ``UnhealthyError`` (exit 3), a refused key ``InputError``, a busy
    server (or, with ``server_check``, one serving another configuration) ``idle.BusyError`` before
    anything is sent (its results directory removed again: nothing measured, nothing kept).
    """
    if suite not in SUITES:
        raise InputError(f"unknown suite {suite!r}", hint=f"choose one of: {', '.join(SUITES)}")
    endpoint = endpoint or for_cluster(cluster)
    units, published = needle_rungs(cluster, endpoint) if "needle" in SUITES[suite] else ([], True)
    skip = {}
    if not cluster.profile.args.get("--enable-multimodal"):
        reason = f"profile {cluster.profile.name} does not set --enable-multimodal"
        skip = {name: reason for name in CHECKS if name.removesuffix(AFTER) in ("image-one", "image-four")}
    out = new_results_dir(results_dir, "qualify")
    try:
        return qualify_endpoint(
            endpoint, suite, out, units, needle_published=published,
            needle_context=served_context(cluster, endpoint),
            on_progress=on_progress, skip=skip, thermals=thermals,
            idle_checks=True, server_check=server_check,
        )
    except idle.BusyError:
        out.rmdir()  # refused before the first check: the directory is still empty
        raise
