#!/usr/bin/env python3
"""Write bench's built-in workloads (sparkctl/qa/workloads/{coding,mixed,prose}.json) and R4's frozen
arrival schedule (r4-arrivals.jsonl) from the publishers' own files, so the prompt text is the
upstream bytes and never typed by hand.

Get the two upstream files at their pinned commits, then run this script on them::

    git -C DeepSeek-4.1-Flash-Quad-DGX-Sparks show b1f9a6e8…:bench/tony/v41bench.py > v41bench.py
    git -C DeepSeek-V4.1-Flash-vLLM-DGX-Spark-8 show \
        22d65f5c…:sglang/bench/sparkdash/upstream/src/shared/llmPrompts.js > llmPrompts.js
    python3 scripts/extract_workloads.py --v41bench v41bench.py --sparkdash-prompts llmPrompts.js \
        [--r4-arrivals generalization-client.py]   # R4 experiments/trace-02/ at 1fbfa3c6…

Each file must hash to the digest its publisher pinned (R4's ``bench/repeat-client.py`` pins the
community runner; R8's ``sglang/bench/sparkdash/upstream.lock.json``, the copy R4 runs, pins
sparkDash's prompt catalogue), else nothing is written. The prompts are read by parsing the files
(Python's ``ast`` for the runner, the string literals of one JavaScript constant for sparkDash); the
request shape each client sends (budgets, tags, ``ignore_eos``/``min_tokens``) is written beside them
from the same files, with the places it was read from.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent.parent / "sparkctl" / "qa" / "workloads"

R4 = "rhys101/DeepSeek-V4.1-Flash-SGLang-DGX-Spark-4-NVMe"
R4_RUNTIME = "25e7cb82f6524e3bbc46db6a9a54125e75e36d0e"

# The community runner R4 pins by digest (bench/repeat-client.py `want`); R4's own copy is read
# from the byte-identical copy in tsw2k's repository (same SHA-256).
V41BENCH = {
    "repository": R4,
    "commit": R4_RUNTIME,
    "path": "bench/v41bench.py",
    "sha256": "e0d6b2d25bd585d11fbdf39c2ddcdf7a4de8ab685af6bd42465e69f3ee6e80a8",
    "pinned_by": f"{R4} bench/repeat-client.py at {R4_RUNTIME} (want = the runner's sha256)",
    "read_from": {
        "repository": "tsw2k/Deepseek-4.1-Flash-Quad-DGX-Sparks",
        "commit": "b1f9a6e8d0e1adc23d17243616a9029fef131458",
        "path": "bench/tony/v41bench.py",
    },
}

# sparkDash's prompt catalogue at the commit R8's pinned copy (run by R4's repeat suite) locks.
SPARKDASH = {
    "repository": "MiaAI-Lab/sparkDash",
    "commit": "d0c7f71296a1071d0d75f95b14c21413d4d06321",
    "path": "src/shared/llmPrompts.js",
    "sha256": "a4a5b300411779de2c2f12a5b652d4702a3b2d6fdeca88421f26d8c7f0c23749",
    "pinned_by": "rhys101/DeepSeek-V4.1-Flash-vLLM-DGX-Spark-8 sglang/bench/sparkdash/upstream.lock.json "
    "at 22d65f5c81ee6a31b38feaaab5930089fc799ca4 (files_sha256, unchanged_upstream_files: true)",
    "read_from": {
        "repository": "rhys101/DeepSeek-V4.1-Flash-vLLM-DGX-Spark-8",
        "commit": "22d65f5c81ee6a31b38feaaab5930089fc799ca4",
        "path": "sglang/bench/sparkdash/upstream/src/shared/llmPrompts.js",
    },
}


# What sparkDash's applyThinkingFlags(body, model, false) puts in every request (LlmStreaming.js, pinned
# by the same lock, sha256 77e11768…, read from R8's unchanged copy).
SPARKDASH_THINKING_OFF = {"enable_thinking": False, "thinking": False, "thinking_mode": "disabled"}
SPARKDASH_STREAMING = (
    "rhys101/DeepSeek-V4.1-Flash-vLLM-DGX-Spark-8 sglang/bench/sparkdash/upstream/server/"
    "collectors/LlmStreaming.js at 22d65f5c… (applyThinkingFlags)"
)


# R4's frozen heterogeneous-arrival client, pinned by results/trace-iteration-02/
# frozen-generalization-protocol.json (files["generalization-client.py"]).
R4_ARRIVALS = {
    "repository": R4,
    "commit": "1fbfa3c641d4556f1e255fd967cb48c40d74e9a2",
    "path": "experiments/trace-02/generalization-client.py",
    "sha256": "9ebc8eca0df7174f1042a7626cb639403e58376cfd7365f8e032e026f93bf198",
    "pinned_by": f"{R4} results/trace-iteration-02/frozen-generalization-protocol.json at 1fbfa3c6 "
    "(files['generalization-client.py'], frozen before either runtime's evaluation)",
}


class ExtractError(RuntimeError):
    """The upstream file is not the pinned one, or does not hold what is read from it."""


def check_digest(raw: bytes, source: dict[str, Any], where: str) -> None:
    actual = hashlib.sha256(raw).hexdigest()
    if actual != source["sha256"]:
        raise ExtractError(
            f"{where}: sha256 {actual} is not the pinned {source['sha256']} "
            f"({source['repository']} {source['path']} at {source['commit']})"
        )


# ------------------------------------------------------------------------------------ v41bench.py
def _assigned(tree: ast.Module, name: str) -> ast.expr:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            return node.value
    raise ExtractError(f"no top-level assignment to {name}")


def v41bench_categories(source: str, count: int = 3) -> tuple[str, list[tuple[str, str, int]]]:
    """(PROMPT_SET_VERSION, the first ``count`` of CATEGORIES as (name, prompt, max_tokens))."""
    tree = ast.parse(source)
    version = ast.literal_eval(_assigned(tree, "PROMPT_SET_VERSION"))
    cats = _assigned(tree, "CATEGORIES")
    if not isinstance(cats, ast.List) or len(cats.elts) < count:
        raise ExtractError(f"CATEGORIES is not a list of at least {count} entries")
    out = []
    for node in cats.elts[:count]:
        name, prompt, budget = _literal(tree, node)
        out.append((str(name), str(prompt), int(budget)))
    return str(version), out


def _literal(tree: ast.Module, node: ast.expr) -> Any:
    """A literal, where a string may also be a sum of literals and top-level string constants
    (the runner's summary prompt is its instruction + ``SUMMARY_PASSAGE``)."""
    if isinstance(node, ast.Tuple):
        return tuple(_literal(tree, e) for e in node.elts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _literal(tree, node.left), _literal(tree, node.right)
        if not (isinstance(left, str) and isinstance(right, str)):
            raise ExtractError("a category's prompt adds something other than strings")
        return left + right
    if isinstance(node, ast.Name):
        value = _literal(tree, _assigned(tree, node.id))
        if not isinstance(value, str):
            raise ExtractError(f"{node.id} is not a string constant")
        return value
    return ast.literal_eval(node)


def v41bench_all_categories(source: str) -> list[tuple[str, str, int]]:
    """Every entry of CATEGORIES (the eight categories the runner's headline averages), in order;
    the counting ceiling (``CEILING``) is the runner's separate probe and not among them."""
    tree = ast.parse(source)
    cats = _assigned(tree, "CATEGORIES")
    if not isinstance(cats, ast.List):
        raise ExtractError("CATEGORIES is not a list")
    count = len(cats.elts)
    return v41bench_categories(source, count)[1]


def v41bench_headline(source: str) -> None:
    """The runner's headline: per level, the mean over the categories of each batch's agg_tok_s,
    the counting ceiling excluded (checked, since the mixed workload's definition rests on it)."""
    for text in (
        'bs = [b for b in res["batches"] if b["c"] == c and b["category"] != CEILING[0]]',
        'round(st.mean(b["agg_tok_s"] for b in bs), 2)',
        '"agg_tok_s": round(toks / wall, 2) if wall else 0,',
    ):
        if text not in source:
            raise ExtractError(f"the runner's headline no longer holds {text!r}")


def v41bench_tag(source: str) -> str:
    """The per-request tag run_batch puts at the front (checked, then returned as a format)."""
    text = 'p = f"[bench {PROMPT_SET_VERSION} {tag} {cat} c{c} s{i}] " + prompt'
    if text not in source:
        raise ExtractError("run_batch's tag line is not in the runner")
    return "[bench {version} {phase} {category} c{c} s{i}] "


def v41bench_sends(source: str) -> dict[str, Any]:
    """What stream_chat sends beside messages, max_tokens, temperature and the stream options: thinking
    off through chat_template_kwargs, and nothing that forces the length (no ignore_eos, no
    min_tokens)."""
    body = re.search(r"body = \{(.*?)\}\n", source, re.S)
    if body is None:
        raise ExtractError("stream_chat's request body is not in the runner")
    text = body.group(1)
    for word in ("ignore_eos", "min_tokens", "top_p", '"stop"'):
        if word in text:
            raise ExtractError(f"the runner's request body now sends {word}: re-read it")
    for need in (
        '"temperature": 0',
        '"stream": True',
        '"include_usage": True',
        '"chat_template_kwargs": {"thinking": False}',
    ):
        if need not in text:
            raise ExtractError(f"the runner's request body no longer holds {need}")
    return {"chat_template_kwargs": {"thinking": False}}


def coding_workload(raw: bytes) -> dict[str, Any]:
    check_digest(raw, V41BENCH, "v41bench.py")
    source = raw.decode("utf-8")
    version, cats = v41bench_categories(source)
    name, prompt, budget = cats[0]
    if name != "coding" or "merge_intervals" not in prompt:
        raise ExtractError(f"CATEGORIES[0] is {name!r}, not the merge_intervals coding prompt")
    return {
        "name": "coding",
        "kind": "coding",
        "version": 2,
        "title": f"community coding (v41bench prompt set {version}, CATEGORIES[0])",
        "description": "R4's 'unchanged 200-token community workload': one prompt, sent C times with the "
        "runner's per-request tag at the front; no ignore_eos, no min_tokens.",
        "max_tokens": budget,
        "prompts": [prompt],
        "request": {
            "tag": "v41bench",
            "tag_format": v41bench_tag(source),
            "tag_version": version,
            "category": name,
            "extra": v41bench_sends(source),
        },
        "regime": "r4-repeat",
        "warmups": [{"category": n, "prompt": p, "max_tokens": 64} for n, p, _ in cats],
        "source": {
            **V41BENCH,
            "extracted": "PROMPT_SET_VERSION; CATEGORIES[0] (measured); CATEGORIES[0:3] "
            "at 64 tokens (warm-ups, as main() and repeat-client.py run them); run_batch's tag; "
            "stream_chat's body",
            "extractor": "scripts/extract_workloads.py",
        },
    }


def mixed_workload(raw: bytes) -> dict[str, Any]:
    """The community runner's eight categories, each a batch of C requests with its own budget; a
    level's sample is the mean of the eight batch aggregates (the runner's headline, R4's
    "eight-category aggregate" compared with Tony's TP4 figures)."""
    check_digest(raw, V41BENCH, "v41bench.py")
    source = raw.decode("utf-8")
    version = str(ast.literal_eval(_assigned(ast.parse(source), "PROMPT_SET_VERSION")))
    cats = v41bench_all_categories(source)
    if len(cats) != 8:
        raise ExtractError(f"CATEGORIES holds {len(cats)} entries, not the eight the headline averages")
    v41bench_headline(source)
    warm = v41bench_categories(source)[1]
    return {
        "name": "mixed",
        "kind": "mixed",
        "version": 1,
        "title": f"community eight-category mix (v41bench prompt set {version}, CATEGORIES)",
        "description": "The community runner's sweep at one level: each of the eight categories sent as "
        "its own batch of C requests (the runner's tag at the front, the category's own budget); the "
        "level's headline is the mean of the eight batch aggregates, the counting ceiling excluded. "
        "No ignore_eos, no min_tokens.",
        "max_tokens": max(budget for _, _, budget in cats),
        "prompts": [prompt for _, prompt, _ in cats],
        "categories": [{"category": n, "prompt": p, "max_tokens": m} for n, p, m in cats],
        "request": {
            "tag": "v41bench",
            "tag_format": v41bench_tag(source),
            "tag_version": version,
            "extra": v41bench_sends(source),
        },
        "regime": "r4-repeat",
        "warmups": [{"category": n, "prompt": p, "max_tokens": 64} for n, p, _ in warm],
        "source": {
            **V41BENCH,
            "extracted": "PROMPT_SET_VERSION; CATEGORIES[0:8] (measured, each with its budget); "
            "CATEGORIES[0:3] at 64 tokens (warm-ups); run_batch's tag; stream_chat's body; main()'s "
            "headline (mean of the categories' agg_tok_s, CEILING excluded)",
            "extractor": "scripts/extract_workloads.py",
        },
    }


# ----------------------------------------------------------------------------------- llmPrompts.js
_JS_STRING = re.compile(r'"((?:[^"\\\n]|\\.)*)"')


def js_constant(source: str, name: str) -> str:
    """The value of ``export const NAME = "…" + "…";`` (double-quoted literals joined by ``+``)."""
    m = re.search(rf"export const {re.escape(name)} =\s*(.*?);\n", source, re.S)
    if m is None:
        raise ExtractError(f"no `export const {name}` in the file")
    expr = m.group(1)
    parts = _JS_STRING.findall(expr)
    rest = _JS_STRING.sub("", expr)
    if not parts or rest.replace("+", "").strip():
        raise ExtractError(f"{name} is not a sum of string literals: {expr[:80]!r}")
    return "".join(json.loads(f'"{p}"') for p in parts)


def sparkdash_suffix(source: str) -> str:
    """pickDecodeBenchPrompts' suffix for concurrent streams (C1 is the exact prompt)."""
    for text in ("if (n <= 1) return [base];", "out.push(`${base} (stream ${i + 1}/${n})`);"):
        if text not in source:
            raise ExtractError(f"pickDecodeBenchPrompts no longer holds {text!r}")
    return " (stream {i}/{n})"


def prose_workload(raw: bytes) -> dict[str, Any]:
    check_digest(raw, SPARKDASH, "llmPrompts.js")
    source = raw.decode("utf-8")
    prompt = js_constant(source, "DECODE_PROSE_PROMPT")
    if "hash map" not in prompt:
        raise ExtractError("DECODE_PROSE_PROMPT is not the hash-map explanation")
    if "prose: DECODE_PROSE_PROMPT" not in source:
        raise ExtractError("the prose decode type no longer maps to DECODE_PROSE_PROMPT")
    return {
        "name": "prose",
        "kind": "prose",
        "version": 2,
        "title": "sparkDash prose (DECODE_PROSE_PROMPT, promptType 'prose')",
        "description": "R4's 'pinned 256-token sparkDash workload': one prompt; at C>1 each stream gets "
        "the suffix ' (stream i/n)'. Per trial a 512-token warm-up prefill, a 4,096-token prefill, "
        "a 32-token decode warm-up, then the decode levels ascending.",
        "max_tokens": 256,
        "prompts": [prompt],
        "request": {
            "tag": "sparkdash",
            "suffix_format": sparkdash_suffix(source),
            # runConcurrencyWave's body (DecodeBench.js): the decode bench forces the full length.
            "extra": {
                "top_p": 1,
                "min_tokens": 256,
                "ignore_eos": True,
                "stop": [],
                "chat_template_kwargs": SPARKDASH_THINKING_OFF,
            },
            "extra_read_from": "MiaAI-Lab/sparkDash server/collectors/DecodeBench.js runConcurrencyWave "
            "(decodeRequestBody + min_tokens, ignore_eos, stop); maxTokens 256 and promptType 'prose' "
            "from rhys101/DeepSeek-V4.1-Flash-vLLM-DGX-Spark-8 sglang/bench/sparkdash/run.mjs; "
            f"chat_template_kwargs from {SPARKDASH_STREAMING}",
        },
        "regime": "sparkdash",
        # Per trial, as R8's run.mjs (R4's prose step) runs it: prefill(512, warm-up), prefill(4096),
        # then one decode job whose _runJob sends warmupDecode (the prompt, 32 tokens, nothing forced)
        # before the levels ascending.
        "trial": {
            "prefill_warmup_tokens": 512,
            "prefill_sizes": [4096],
            "prefill_max_tokens": 8,
            "decode_warmup_tokens": 32,
            "order": "ascending",
            # decodeRequestBody (the warm-up: nothing forced) and run.mjs's prefill body.
            "decode_warmup_extra": {"top_p": 1, "chat_template_kwargs": SPARKDASH_THINKING_OFF},
            "prefill_extra": {"top_p": 1, "chat_template_kwargs": SPARKDASH_THINKING_OFF},
            "read_from": "rhys101/DeepSeek-V4.1-Flash-vLLM-DGX-Spark-8 sglang/bench/sparkdash/run.mjs "
            "at 22d65f5c…; MiaAI-Lab/sparkDash server/collectors/DecodeBench.js _runJob/warmupDecode "
            "(WARMUP_MAX_TOKENS 32) in the version that takes promptType",
        },
        "warmups": [],
        "source": {
            **SPARKDASH,
            "extracted": "DECODE_PROSE_PROMPT; pickDecodeBenchPrompts' stream suffix",
            "extractor": "scripts/extract_workloads.py",
        },
    }


def r4_arrival_cases(source: str) -> list[dict[str, Any]]:
    """CASES of R4's generalization client: ``dict(id=…, at=…, budget=…, prompt=…[, expected=…])``."""
    cases = _assigned(ast.parse(source), "CASES")
    if not isinstance(cases, ast.List) or not cases.elts:
        raise ExtractError("CASES is not a non-empty list")
    out = []
    for node in cases.elts:
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict"
                and not node.args):
            raise ExtractError("a case is not dict(key=value, …)")
        case = {str(k.arg): ast.literal_eval(k.value) for k in node.keywords}
        if not {"id", "at", "budget", "prompt"} <= set(case):
            raise ExtractError(f"case {case.get('id')!r} lacks id, at, budget or prompt")
        out.append(case)
    return out


def r4_arrivals(raw: bytes) -> bytes:
    """R4's twelve arrivals as bench's schedule (JSON lines): a first line naming the source, then one
    case per line in R4's own keys (id, at, budget, prompt, expected), in CASES order."""
    check_digest(raw, R4_ARRIVALS, "generalization-client.py")
    source = raw.decode("utf-8")
    for text in ("origin = time.perf_counter() + 0.2", "for trial in [0,1,2,3]:",
                 "(warmups if trial == 0 else trials).append(row)",
                 "sampling_params=dict(temperature=0,max_new_tokens=case['budget'])"):
        if text not in source:
            raise ExtractError(f"the client no longer holds {text!r}: re-read its protocol")
    head = {"source": {**R4_ARRIVALS, "extracted": "CASES (id, at, budget, prompt, expected)",
                       "protocol": "one excluded warm-up cohort, three measured cohorts (trials 0-3); "
                       "temperature 0, max_new_tokens = budget, nothing forcing the length",
                       "extractor": "scripts/extract_workloads.py"}}
    lines = [head, *r4_arrival_cases(source)]
    return "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines).encode("utf-8")


def dump(doc: dict[str, Any]) -> bytes:
    return (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--v41bench", type=Path, required=True, help="the community runner (v41bench.py)")
    ap.add_argument(
        "--sparkdash-prompts", type=Path, required=True, help="sparkDash src/shared/llmPrompts.js"
    )
    ap.add_argument("--r4-arrivals", type=Path, help="R4 experiments/trace-02/generalization-client.py")
    ap.add_argument("--out", type=Path, default=OUT, help=f"where the workloads go [default: {OUT}]")
    args = ap.parse_args(argv)
    try:
        docs = {
            "coding": coding_workload(args.v41bench.read_bytes()),
            "mixed": mixed_workload(args.v41bench.read_bytes()),
            "prose": prose_workload(args.sparkdash_prompts.read_bytes()),
        }
        files = {f"{name}.json": dump(doc) for name, doc in docs.items()}
        if args.r4_arrivals is not None:
            files["r4-arrivals.jsonl"] = r4_arrivals(args.r4_arrivals.read_bytes())
    except (OSError, ExtractError) as exc:
        print(f"extract_workloads: {exc}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (args.out / name).write_bytes(data)
        print(f"{args.out / name}: sha256 {hashlib.sha256(data).hexdigest()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
