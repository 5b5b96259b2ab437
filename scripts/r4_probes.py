#!/usr/bin/env python3
"""Extract R4's published probes into sparkctl/qa/probes/r4.json, or check that file against them.

The values in r4.json are never typed in: this script reads them from checkouts of the publishers'
repositories at the pinned commits (the file's ``sources``), verifying each file's SHA-256 where one
is pinned (R4 lists its files' digests in results/files-sha256.json):

    git clone https://github.com/rhys101/DeepSeek-V4.1-Flash-SGLang-DGX-Spark-4-NVMe r4
    git -C r4 checkout a92d28383ae7254890f0fcff9c3ebfe8b6c52b14
    git clone https://github.com/rhys101/DeepSeek-V4.1-Flash-vLLM-DGX-Spark-8 sg17
    git -C sg17 checkout 22d65f5c81ee6a31b38feaaab5930089fc799ca4
    python3 scripts/r4_probes.py check --repo rhys101/DeepSeek-V4.1-Flash-SGLang-DGX-Spark-4-NVMe=r4 \\
        --repo rhys101/DeepSeek-V4.1-Flash-vLLM-DGX-Spark-8=sg17
    python3 scripts/r4_probes.py extract --repo …   # rewrite the extracted values in place

``drawn`` recomputes ``vision.drawn`` (the SHA-256 of each image sparkctl draws) after a drawing
change; it needs no checkout. Exit status: 0 when everything matches, 1 with one line per mismatch.

Where each value comes from:
- vision prompts: the ``request`` R4 recorded in results/serving/acceptance/{single-image,four-images}.json
  (the text part of the user message); the image size: the IHDR of the PNG in single-image.json;
- expected answers: sglang/validation/vision-fixtures/expected.json (the file acceptance.py compares with);
- needle: sglang/validation/long-context.py, read with ``ast`` (never run): the first line, the
  instruction and question, the filler unit, the sizes, the seed offset, the value range, the window,
  the context budget and max_tokens; R4's published cases from results/serving/long-context/result.json.
"""

from __future__ import annotations

import argparse
import ast
import base64
import hashlib
import json
import re
import struct
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PROBES = ROOT / "sparkctl" / "qa" / "probes" / "r4.json"


class Sources:
    """The pinned source files, read from local checkouts (``--repo OWNER/NAME=DIR``)."""

    def __init__(self, data: dict[str, Any], checkouts: dict[str, Path]) -> None:
        self.data, self.checkouts, self.problems = data, checkouts, []  # type: ignore[var-annotated]

    def read(self, name: str) -> bytes:
        src = self.data["sources"][name]
        root = self.checkouts.get(src["repo"])
        if root is None:
            raise SystemExit(f"no checkout given for {src['repo']} (--repo {src['repo']}=DIR)")
        body = (root / src["path"]).read_bytes()
        if src.get("sha256") and hashlib.sha256(body).hexdigest() != src["sha256"]:
            self.problems.append(f"{src['repo']} {src['path']}: SHA-256 differs from the pinned one")
        return body

    def json(self, name: str) -> Any:
        return json.loads(self.read(name))


def _user_text(request: dict[str, Any]) -> str:
    (message,) = request["messages"]
    return next(part["text"] for part in message["content"] if part["type"] == "text")


def _png_size(request: dict[str, Any]) -> tuple[int, int]:
    (message,) = request["messages"]
    url = next(p["image_url"]["url"] for p in message["content"] if p["type"] == "image_url")
    png = base64.b64decode(url.partition(",")[2])
    width, height = struct.unpack(">II", png[16:24])
    return int(width), int(height)


def _render(node: ast.expr) -> str:
    """A string expression as a template: ``{…}`` for each formatted value, ``{FILLER:n}`` for unit * n."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(_render(v) if isinstance(v, ast.Constant) else "{" + ast.unparse(v.value) + "}"  # type: ignore[attr-defined]
                       for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _render(node.left) + _render(node.right)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return "{FILLER:" + ast.unparse(node.right) + "}"
    raise ValueError(f"unexpected expression in the prompt: {ast.unparse(node)}")


def needle_from_script(source: bytes) -> dict[str, Any]:
    """The needle's pieces as long-context.py builds them (read, never executed)."""
    tree = ast.parse(source)
    prompt = next(n.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
                  and any(isinstance(t, ast.Name) and t.id == "prompt" for t in n.targets))
    template = _render(prompt)
    lines = template.split("\n")
    unit = next(n.left.value for n in ast.walk(prompt) if isinstance(n, ast.BinOp)  # type: ignore[attr-defined]
                and isinstance(n.op, ast.Mult))
    loop = next(n for n in ast.walk(tree) if isinstance(n, ast.For) and ast.unparse(n.target) == "size")
    sizes = [int(e.value) for e in loop.iter.elts]  # type: ignore[attr-defined]
    calls = {ast.unparse(n.func): n for n in ast.walk(tree) if isinstance(n, ast.Call)}
    seed = calls["random.Random"].args[0]
    low, high = (int(a.value) for a in calls["rng.randrange"].args)  # type: ignore[attr-defined]
    max_tokens = next(int(k.value.value) for n in ast.walk(tree) if isinstance(n, ast.Call)  # type: ignore[attr-defined]
                      for k in n.keywords if k.arg == "max_tokens")
    passed = next(n.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
                  and ast.unparse(n.targets[0]) == "row['passed']")
    compare = next(n for n in ast.walk(passed) if isinstance(n, ast.Compare) and len(n.ops) == 2)
    budget = next(n for n in ast.walk(passed) if isinstance(n, ast.Compare) and len(n.ops) == 1
                  and isinstance(n.ops[0], ast.LtE))
    return {
        "sizes": sizes,
        "filler_unit": unit,
        "seed_offset": int(seed.right.value),  # type: ignore[attr-defined]
        "value_low": low,
        "value_high": high,
        "head": re.sub(r"\{[\w.]*tag\}", "{tag}", lines[0]),  # the run's tag argument, however named
        "instruction": lines[1],
        "question": lines[-1],
        "max_tokens": max_tokens,
        "below": int(compare.left.right.value),  # type: ignore[attr-defined]
        "above": int(compare.comparators[1].right.value),  # type: ignore[attr-defined]
        "context_budget": int(budget.comparators[0].value),  # type: ignore[attr-defined]
    }


def extracted(sources: Sources) -> dict[str, Any]:
    """Every published value r4.json holds, as read from the sources: {dotted path: value}."""
    single, four = sources.json("single_image")["request"], sources.json("four_images")["request"]
    expected = sources.json("expected")
    width, height = _png_size(single)
    result = sources.json("long_context_result")
    out: dict[str, Any] = {
        "request.temperature": single["temperature"],
        "request.max_tokens": single["max_tokens"],
        "request.chat_template_kwargs": single["chat_template_kwargs"],
        "vision.image_size.width": width,
        "vision.image_size.height": height,
        "vision.single.prompt": _user_text(single),
        "vision.single.expected": expected["single"],
        "vision.four.prompt": _user_text(four),
        "vision.four.expected": expected["four"],
        "needle.published.tag": result["tag"],
        "needle.published.cases": [
            {k: case[k] for k in ("filler_units", "prompt_sha256", "expected")}
            | {"prompt_tokens": case["usage"]["prompt_tokens"]}
            for case in result["cases"]
        ],
    }
    for key, value in needle_from_script(sources.read("long_context_script")).items():
        out[f"needle.{key}"] = value
    return out


def _get(data: dict[str, Any], dotted: str) -> Any:
    for part in dotted.split("."):
        data = data[part]
    return data


def _set(data: dict[str, Any], dotted: str, value: Any) -> None:
    *head, last = dotted.split(".")
    for part in head:
        data = data[part]
    data[last] = value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("mode", choices=("check", "extract", "drawn"))
    parser.add_argument("--repo", action="append", default=[], metavar="OWNER/NAME=DIR")
    parser.add_argument("--file", type=Path, default=PROBES, help="the probe file (default: %(default)s)")
    args = parser.parse_args(argv)
    data = json.loads(args.file.read_text())
    if args.mode == "drawn":
        sys.path.insert(0, str(ROOT))
        from sparkctl.qa import images

        data["vision"]["drawn"] = images.drawn_digests()
        args.file.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
        return 0
    checkouts = {}
    for spec in args.repo:
        name, _, path = spec.partition("=")
        checkouts[name] = Path(path)
    sources = Sources(data, checkouts)
    values = extracted(sources)
    problems = list(sources.problems)
    for dotted, value in values.items():
        if args.mode == "extract":
            _set(data, dotted, value)
        elif _get(data, dotted) != value:
            problems.append(f"{dotted}: {args.file.name} has {_get(data, dotted)!r}, the source {value!r}")
    if args.mode == "extract" and not problems:
        args.file.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    for line in problems:
        print(line)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
