"""sparkctl's standard-library modules carried to a node inside one Python script (one SSH round,
nothing installed there).

The fast paths of `up` and `stage` check a node with the same code the roles' modules run. The
script holds those modules' sources. On the node, the loader puts them into an in-memory package
(``sparkctl_node.<name>``) in the order given, dependencies first, so their relative imports resolve
as they do on the controller. The script reads its parameters from its own text, which comes on
stdin, never from argv. ``shipped(name)`` returns a loaded module; the last module shipped is the
program: its ``main(params, shipped)`` runs (``nodeside.upcheck``, ``nodeside.stagecheck``), a real
module that ruff, mypy and the unit tests read like any other.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PACKAGE = Path(__file__).resolve().parent.parent
ROOT = "sparkctl_node"

_LOADER = r'''
import json, sys, types
def _load(sources):
    root = types.ModuleType(ROOT); root.__path__ = []; sys.modules[ROOT] = root
    for qual, source in sources:
        parts = qual.split(".")
        for i in range(1, len(parts)):
            name = ".".join([ROOT] + parts[:i])
            if name not in sys.modules:
                pkg = types.ModuleType(name); pkg.__path__ = []; pkg.__package__ = name
                sys.modules[name] = pkg; setattr(sys.modules[name.rpartition(".")[0]], parts[i - 1], pkg)
        parent, _, leaf = (ROOT + "." + qual).rpartition(".")
        mod = types.ModuleType(parent + "." + leaf); mod.__package__ = parent
        sys.modules[mod.__name__] = mod; setattr(sys.modules[parent], leaf, mod)
        exec(compile(source, "<sparkctl/" + qual.replace(".", "/") + ".py>", "exec"), mod.__dict__)
def shipped(qual):
    return sys.modules[ROOT + "." + qual]
_load(json.loads(SOURCES))
'''


def sources(modules: Iterable[str]) -> list[tuple[str, str]]:
    """``(name, source)`` of each module (``"nodeside.kit"``, ``"stage.image"``…), in that order."""
    return [(q, (PACKAGE / (q.replace(".", "/") + ".py")).read_text()) for q in modules]


def python_script(modules: Iterable[str], params: Mapping[str, Any], eof: str) -> str:
    """Shell text running, under python3, the last of ``modules`` with all of them loaded: its
    ``main(params, shipped)`` is called with ``params`` and the loader's ``shipped`` (which gives a
    loaded module by name, e.g. ``"stage.image"``). ``eof`` ends the here-document."""
    names = list(modules)
    text = (f"ROOT = {ROOT!r}\nSOURCES = {json.dumps(json.dumps(sources(names)))}\n" + _LOADER
            + f"def main(params):\n    shipped({names[-1]!r}).main(params, shipped)\n"
            + f"\nmain(json.loads({json.dumps(json.dumps(dict(params)))}))\n")
    if eof in text:
        raise ValueError(f"the script text holds its own end marker {eof}")
    return f"exec python3 - <<'{eof}'\n{text}{eof}\n"


def answers(results: Mapping[str, Any], mode: str) -> dict[str, Mapping[str, Any] | str]:
    """Each node's JSON answer (the last line of its output, ``{"mode": mode, …}``), or a string
    saying why there is none. ``results`` are ``sparkctl.ssh.fleet.HostResult``s by node."""
    out: dict[str, Mapping[str, Any] | str] = {}
    for name, res in results.items():
        if not res.reachable:
            out[name] = f"unreachable: {res.error}"
            continue
        try:
            doc = json.loads(res.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            why = (res.stderr.strip().splitlines() or [f"exit {res.rc}, no output"])[-1][:200]
            out[name] = f"the check did not run ({why})"
            continue
        ok = isinstance(doc, dict) and doc.get("mode") == mode
        out[name] = doc if ok else "the check answered something else"
    return out


# Reasons a fast path prints before the playbook runs (all of them stay in --json).
MAX_REASONS = 12


@dataclass
class Verdict:
    """A fast path's verdict: it may be taken when there is no reason against it."""

    reasons: list[str] = field(default_factory=list)
    seconds: float = 0.0
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.reasons

    def as_dict(self) -> dict[str, Any]:
        return {"path": "fast" if self.ok else "playbook", "reasons": self.reasons,
                "check_seconds": round(self.seconds, 3)}

    def playbook_lines(self, playbook: str) -> list[str]:
        """What to print when the playbook runs: why (one reason inline, several as a list, at most
        MAX_REASONS of them and how many more). A reason several nodes share is one line naming
        them ("every node" where it is all of them): a first start on four nodes gave 32 lines."""
        reasons = self._grouped()
        shown = reasons[:MAX_REASONS]
        more = len(reasons) - len(shown)
        if len(shown) == 1 and not more:
            return [f"running {playbook}: {shown[0]}"]
        tail = [f"  • and {more} more"] if more else []
        return [f"running {playbook}:", *(f"  • {r}" for r in shown), *tail]

    def node_names(self) -> list[str]:
        """The nodes this verdict asked (a reason that starts with one's name is about that node)."""
        return list(self.nodes)

    def _grouped(self) -> list[str]:
        names = self.node_names()
        by_text: dict[str, list[str]] = {}
        for reason in self.reasons:
            node, sep, text = reason.partition(": ")
            if sep and node in names:
                by_text.setdefault(text, []).append(node)
            else:
                by_text.setdefault(reason, [])
        out = []
        for text, on in by_text.items():
            if not on:
                out.append(text)
            elif len(on) == len(names) > 1:
                out.append(f"every node: {text}")
            else:
                out.append(f"{', '.join(on)}: {text}")
        return out


__all__ = ["MAX_REASONS", "PACKAGE", "ROOT", "Verdict", "answers", "python_script", "sources"]
