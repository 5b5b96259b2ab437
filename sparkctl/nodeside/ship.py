"""sparkctl's standard-library modules carried to a node inside one Python script (one SSH round,
nothing installed there).

The fast paths of `up` and `stage` check a node with the same code the roles' modules run. The
script holds those modules' sources. On the node, the loader puts them into an in-memory package
(``sparkctl_node.<name>``) in the order given, dependencies first, so their relative imports resolve
as they do on the controller. The script reads its parameters from its own text, which comes on
stdin, never from argv. ``shipped(name)`` returns a loaded module.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
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


def python_script(modules: Iterable[str], body: str, params: Mapping[str, Any], eof: str) -> str:
    """Shell text running ``body`` under python3 with ``modules`` loaded; ``body`` defines
    ``main(params)``, which is called with ``params``. ``eof`` ends the here-document."""
    text = (f"ROOT = {ROOT!r}\nSOURCES = {json.dumps(json.dumps(sources(modules)))}\n" + _LOADER + body
            + f"\nmain(json.loads({json.dumps(json.dumps(dict(params)))}))\n")
    if eof in text:
        raise ValueError(f"the script text holds its own end marker {eof}")
    return f"exec python3 - <<'{eof}'\n{text}{eof}\n"


__all__ = ["PACKAGE", "ROOT", "python_script", "sources"]
