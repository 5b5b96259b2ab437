#!/usr/bin/env python3
"""Regenerate sparkctl/profiles/sglang-flags.json: every long flag of SGLang's `serve` parser, with
its action, value type (``suffixes``: a whole number SGLang also takes as 1k, 1M, 1Mi, ...) and
choices, read from SGLang itself.

Run it with the interpreter `make sglang` installed (SGLang 0.5.23, CPU-side stubs):
    .venv-sglang/bin/python scripts/sglang_flags.py > sparkctl/profiles/sglang-flags.json
`sparkctl validate` checks every profile and override flag against this file, so it works with no
SGLang installed; tests/unit/test_sglang_parser.py checks the file against SGLang when it is.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

CHECK = Path(__file__).resolve().parents[1] / "sparkctl" / "qa" / "sglang_check.py"


def catalogue() -> dict[str, object]:
    spec = importlib.util.spec_from_file_location("sparkctl_sglang_check", CHECK)
    assert spec and spec.loader
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    check.install_stubs()  # SGLang's parser module imports torch & co. at the top
    from sglang.srt.server_args import ServerArgs  # type: ignore[import-not-found]
    from sglang.version import __version__  # type: ignore[import-not-found]

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    flags: dict[str, dict[str, object]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        kind = ("switch" if action.nargs == 0 else "bool-optional"
                if isinstance(action, argparse.BooleanOptionalAction) else "value")
        vtype = getattr(action.type, "__name__", None) if action.type is not None else "str"
        entry: dict[str, object] = {"kind": kind}
        if kind == "value":
            entry["type"] = vtype if vtype in ("int", "float") else "str"
            if vtype == "human_readable_int":
                # A whole number, or one with an SI (k M G T) or IEC (Ki Mi Gi Ti) suffix.
                entry["type"] = "int"
                entry["suffixes"] = True
            if action.nargs not in (None, 1):
                entry["many"] = True
            if action.choices:
                entry["choices"] = sorted(str(c) for c in action.choices)
        for opt in action.option_strings:
            if opt.startswith("--"):
                flags[opt] = entry
    return {"sglang": __version__, "flags": dict(sorted(flags.items()))}


if __name__ == "__main__":
    json.dump(catalogue(), sys.stdout, indent=0, sort_keys=True)
    sys.stdout.write("\n")
