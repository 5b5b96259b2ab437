"""Run every rendered rank argv through SGLang's own argument parser, on a machine without a GPU.

With SGLang 0.5.23 installed without its GPU dependencies plus the ``sglang`` extra of
``sparkctl-dgx`` (``make sglang`` builds that venv), ``check_argv(argv)`` calls ``sglang.srt.server_args.
prepare_server_args`` -- the very function ``sglang serve`` calls -- and returns SGLang's own error
messages (unknown flag, invalid choice, bad type, ...). Importing SGLang needs torch and triton; a
``sys.meta_path`` finder answers those imports with inert stand-ins, so nothing CUDA-related is
installed or loaded.

Each check runs in a fresh Python process: argparse exits on errors and SGLang's hooks change
process-wide defaults, so one argv must never influence the next. The rank's ``--config`` file
(holding the API key on the nodes) is replaced by a throw-away file of the same shape, which also
proves SGLang accepts that file.
"""

from __future__ import annotations

import abc
import contextlib
import functools
import importlib.abc
import importlib.machinery
import importlib.util
import io
import json
import os
import subprocess
import sys
import tempfile
import types
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sparkctl.model import Cluster

SGLANG_VERSION = "0.5.23"
STUBBED = ("torch", "triton", "torchvision", "tvm_ffi", "compressed_tensors")
_VERSIONS = {"torch": "2.14.1", "triton": "3.6.0", "torchvision": "0.29.1"}
# Attributes that must look absent (SGLang probes them with hasattr to pick a platform).
_ABSENT = {"torch.npu", "torch.hpu", "torch.musa"}
# Attributes with a fixed value.
_FIXED: dict[str, Any] = {
    "torch.version.cuda": None,
    "torch.version.hip": None,
    "torch.version.musa": None,
    "torch.version.git_version": "stub",
}
# Lower-case names that SGLang uses as classes (isinstance, subclassing, annotations).
_CLASS_NAMES = {"dtype", "device", "layout", "memory_format", "finfo", "iinfo", "Size"}
CHECK_TIMEOUT_S = 120


# -- the torch/triton stand-ins ------------------------------------------------------------------


class _StubClassMeta(abc.ABCMeta):
    """Metaclass of stand-in classes: subclassable, any attribute resolves, usable in `X | None`."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _StubModule(f"{cls.__module__}.{cls.__name__}.{name}")

    def __getitem__(cls, item: Any) -> Any:
        return cls

    def __or__(cls, other: Any) -> Any:
        return cls

    def __ror__(cls, other: Any) -> Any:
        return cls


def _stub_class(module: str, name: str) -> type:
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        pass

    def __getattr__(self: Any, attr: str) -> Any:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        return _StubModule(f"{module}.{name}().{attr}")

    namespace = {"__module__": module, "__init__": __init__, "__getattr__": __getattr__}
    return _StubClassMeta(name, (object,), namespace)


class _StubModule(types.ModuleType):
    """A module (and value) where every attribute exists, every call returns itself, and it is falsy."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.__path__: list[str] = []
        self.__file__ = "<sparkctl stub>"
        self.__spec__ = importlib.machinery.ModuleSpec(name, _StubLoader(), is_package=True)
        if name in _VERSIONS:
            self.__version__ = _VERSIONS[name]

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        full = f"{self.__name__}.{attr}"
        if full in _ABSENT:
            raise AttributeError(attr)
        if full in _FIXED:
            return _FIXED[full]
        if full in sys.modules:
            return sys.modules[full]
        is_class = attr[:1].isupper() or attr in _CLASS_NAMES
        value: Any = _stub_class(self.__name__, attr) if is_class else _StubModule(full)
        setattr(self, attr, value)
        return value

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # Used as a decorator (@torch.compile, @triton.jit): hand the function back unchanged.
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        return self

    def __bool__(self) -> bool:
        return False

    def __iter__(self) -> Any:
        return iter(())

    def __len__(self) -> int:
        return 0

    def __contains__(self, item: Any) -> bool:
        return False

    def __getitem__(self, item: Any) -> Any:
        return self

    def __index__(self) -> int:
        return 0

    def __int__(self) -> int:
        return 0

    def __float__(self) -> float:
        return 0.0

    def __hash__(self) -> int:
        return hash(self.__name__)

    def __eq__(self, other: object) -> bool:
        return other is self

    def __lt__(self, other: Any) -> bool:
        return False

    __le__ = __gt__ = __ge__ = __lt__

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        return (object,)

    def __copy__(self) -> Any:
        return self

    def __deepcopy__(self, memo: Any) -> Any:
        return self

    def __reduce__(self) -> Any:
        return (_module_named, (self.__name__,))

    def _same(self, *args: Any, **kwargs: Any) -> Any:
        return self

    __neg__ = __pos__ = __abs__ = __invert__ = _same
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _same
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = _same
    __pow__ = __rpow__ = __and__ = __rand__ = __or__ = __ror__ = __xor__ = __rxor__ = _same
    __lshift__ = __rshift__ = __matmul__ = _same


def _module_named(name: str) -> Any:
    return sys.modules.get(name) or _StubModule(name)


class _StubLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        existing = sys.modules.get(spec.name)
        return existing if isinstance(existing, types.ModuleType) else _StubModule(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        return None


class _StubFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname.split(".")[0] in STUBBED:
            return importlib.machinery.ModuleSpec(fullname, _StubLoader(), is_package=True)
        return None


def install_stubs() -> None:
    """Answer torch/triton imports with stand-ins (this process only)."""
    if not any(isinstance(f, _StubFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _StubFinder())


# -- checking ------------------------------------------------------------------------------------


def python() -> str:
    """The interpreter that has SGLang: $SPARKCTL_SGLANG_PYTHON (a separate venv), else this one."""
    given = os.environ.get("SPARKCTL_SGLANG_PYTHON")
    # A relative path means the caller's directory (the check runs its child elsewhere).
    return os.path.abspath(given) if given and os.sep in given else given or sys.executable


@functools.cache
def _has_sglang(interpreter: str) -> bool:
    if interpreter == sys.executable:
        try:
            return importlib.util.find_spec("sglang") is not None
        except (ImportError, ValueError):
            return False
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('sglang') is None)"
    try:
        proc = subprocess.run([interpreter, "-c", probe], capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


def available() -> bool:
    """True when SGLang can be imported for checking (``make sglang``: SGLang + the sglang extra)."""
    return _has_sglang(python())


def _with_throwaway_config(args: list[str], tmp: Path) -> list[str]:
    """Point --config at a local file shaped like the rank's secrets file."""
    if "--config" not in args:
        return args
    out = list(args)
    i = out.index("--config")
    stand_in = tmp / "rank-secrets.yaml"
    stand_in.write_text('api-key: "sparkctl-check"\n', encoding="utf-8")
    if i + 1 < len(out):
        out[i + 1] = str(stand_in)
    return out


def _serve_args(argv: Sequence[str]) -> list[str]:
    """The arguments after `<program> serve` (the rank argv starts with the program)."""
    words = list(argv)
    if len(words) >= 2 and words[1] == "serve":
        return words[2:]
    return words


def check_argv(argv: Sequence[str], timeout_s: float = CHECK_TIMEOUT_S) -> list[str]:
    """SGLang's own complaints about one rank argv ([] when it parses). Needs `available()`."""
    with tempfile.TemporaryDirectory(prefix="sparkctl-sglang-") as tmp:
        args = _with_throwaway_config(_serve_args(argv), Path(tmp))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_", "SGL_"))}
        env["PYTHONOPTIMIZE"] = ""  # SGLang's checks are asserts: never run them under -O
        try:
            proc = subprocess.run(
                # This file imports only the standard library, so it runs under any interpreter.
                [python(), str(Path(__file__).resolve())],
                input=json.dumps(args),
                capture_output=True,
                text=True,
                timeout=timeout_s,
                env=env,
                cwd=tmp,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return [f"SGLang's parser did not answer within {timeout_s:g} s"]
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return [f"the SGLang check could not run: {tail}"]
    result = json.loads(lines[-1])
    return [str(e) for e in result.get("errors", [])]


def check_cluster(cluster: Cluster) -> list[str]:
    """Every node's rendered argv through SGLang's parser, in parallel; messages name the nodes."""
    # sparkctl imports stay inside the functions the controller calls: this file also runs as a
    # plain script under SGLang's interpreter (``check_argv``), where sparkctl is not importable.
    from sparkctl.render import rank_argv


    nodes = list(cluster.nodes)
    with ThreadPoolExecutor(max_workers=len(nodes) or 1) as pool:
        results = list(pool.map(lambda n: check_argv(rank_argv(cluster, n)), nodes))
    by_message: dict[str, list[str]] = {}
    for node, errors in zip(nodes, results, strict=True):
        for error in errors:
            by_message.setdefault(error, []).append(node.name)
    return [f"{', '.join(names)}: {message}" for message, names in by_message.items()]


def ensure_accepted(cluster: Cluster) -> None:
    """Raise InputError (exit 2) quoting SGLang when it rejects a rendered argv."""
    from sparkctl.errors import InputError  # inside: see check_cluster

    problems = check_cluster(cluster)
    if problems:
        raise InputError(
            f"SGLang {SGLANG_VERSION}'s own parser rejects the rendered rank command line",
            hint="fix the flag in sparkctl_profile_overrides.args (`sparkctl plan --json` shows the argv)",
            details=problems,
        )


def ensure_accepted_if_available(cluster: Cluster) -> bool:
    """`validate`'s hook: run the check when the extra is installed; True when it ran (and passed)."""
    if os.environ.get("SPARKCTL_SKIP_SGLANG_CHECK") == "1" or not available():
        return False
    ensure_accepted(cluster)
    return True


def _parse_in_this_process(args: list[str]) -> dict[str, Any]:
    """Child side: import SGLang behind the stubs and parse. Returns {"errors": [...], ...}."""
    install_stubs()
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            # Only here: SGLang exists only in the interpreter this script runs under, and only
            # once the stubs above stand in for what a parser check need not load.
            from sglang.srt.server_args import prepare_server_args

            server_args = prepare_server_args(args)
    except SystemExit:
        lines = [ln.strip() for ln in stderr.getvalue().splitlines() if ln.strip()]
        errors = [ln for ln in lines if ": error: " in ln] or lines[-1:] or ["argument parsing failed"]
        return {"errors": errors}
    except Exception as exc:  # SGLang raising while building ServerArgs is a finding, not a crash
        return {"errors": [f"{type(exc).__name__}: {exc}"]}
    fields = ("tp_size", "ep_size", "nnodes", "node_rank", "context_length", "max_total_tokens")
    parsed = {f: getattr(server_args, f, None) for f in fields}
    parsed["api_key_set"] = bool(getattr(server_args, "api_key", None))  # the --config file was merged
    return {"errors": [], "parsed": parsed}


def main() -> None:
    """Child entry point: a JSON list of arguments on stdin, one JSON result line on stdout."""
    args = json.loads(sys.stdin.read())
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        print(json.dumps({"errors": ["expected a JSON list of strings on stdin"]}))
        sys.exit(2)
    result = _parse_in_this_process(args)
    sys.stdout.write(json.dumps(result, default=str) + "\n")


if __name__ == "__main__":
    main()
