"""The playbooks' strategy: ansible.cfg's ``sparkctl_linear`` is Mitogen's linear when Mitogen is
installed and plain linear without it; and every module of the roles names each sparkctl
module_utils file it needs, directly or through a relative import, so Mitogen ships them all."""

from __future__ import annotations

import ast
import configparser
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
PLUGIN = REPO / "plugins" / "strategy" / "sparkctl_linear.py"
PREFIX = "ansible.module_utils."
OURS = PREFIX + "sparkctl"


def test_ansible_cfg_selects_the_plugin_from_the_tree() -> None:
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(REPO / "ansible.cfg")
    assert cfg["defaults"]["strategy"] == PLUGIN.stem
    assert (REPO / cfg["defaults"]["strategy_plugins"]).resolve() == PLUGIN.parent


def _load_plugin(block_mitogen: bool) -> str:
    """The module the plugin's StrategyModule builds on (BASE), loaded in a fresh interpreter."""
    code = textwrap.dedent(f"""
        import importlib.util, sys
        if {block_mitogen!r}:
            sys.modules["ansible_mitogen"] = None  # an interpreter without Mitogen
        spec = importlib.util.spec_from_file_location("sparkctl_linear", {str(PLUGIN)!r})
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        print(mod.BASE.__module__, mod.MITOGEN)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          check=True)
    return proc.stdout.strip()


def test_the_plugin_is_mitogen_linear_when_mitogen_is_installed() -> None:
    pytest.importorskip("ansible_mitogen")
    module, mitogen = _load_plugin(block_mitogen=False).split()
    assert module.startswith("ansible_mitogen.") and mitogen == "True"


def test_the_plugin_is_plain_linear_without_mitogen() -> None:
    assert _load_plugin(block_mitogen=True) == "ansible.plugins.strategy.linear False"


# --- a loaded node's sshd: Mitogen's connection step tried again ----------------------------------


def _plugin_module() -> object:
    import importlib.util

    spec = importlib.util.spec_from_file_location("sparkctl_linear_under_test", PLUGIN)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_banner_timeout_is_tried_again_and_a_refusal_is_not() -> None:
    from ansible.errors import AnsibleConnectionFailure

    plugin: Any = _plugin_module()
    banner = "EOF on stream; last 100 lines received:\nConnection timed out during banner exchange"
    failures = [banner, "kex_exchange_identification: read: Connection reset by peer"]
    calls: list[str] = []
    pauses: list[float] = []

    def connect(stack: str) -> str:
        calls.append(stack)
        if failures:
            raise AnsibleConnectionFailure(failures.pop(0))
        return "context"

    assert plugin.retrying(connect, pauses.append)("spark-2") == "context"
    assert calls == ["spark-2"] * 3 and pauses == [2.0, 4.0]

    def refused(stack: str) -> str:
        calls.append(stack)
        raise AnsibleConnectionFailure("ssh: connect to host 10.250.0.12 port 22: Connection refused")

    calls.clear(), pauses.clear()
    with pytest.raises(AnsibleConnectionFailure, match="refused"):
        plugin.retrying(refused, pauses.append)("spark-2")
    assert calls == ["spark-2"] and pauses == []

    def always_slow(stack: str) -> str:
        calls.append(stack)
        raise AnsibleConnectionFailure(banner)

    calls.clear()
    with pytest.raises(AnsibleConnectionFailure, match="banner"):
        plugin.retrying(always_slow, pauses.append)("spark-2")
    assert len(calls) == plugin.ATTEMPTS


def test_mitogens_connection_step_is_wrapped_once() -> None:
    pytest.importorskip("ansible_mitogen")
    from ansible_mitogen.connection import Connection

    _plugin_module(), _plugin_module()  # loaded twice (Ansible may): still one wrapper
    step = Connection._connect_stack
    assert getattr(step, "sparkctl_retrying", False)
    assert not getattr(step.__wrapped__, "sparkctl_retrying", False)


def test_a_reset_the_node_cannot_answer_drops_the_connection_with_a_warning(
        capsys: pytest.CaptureFixture[str]) -> None:
    """`meta: reset_connection` right after a change cut the node's path (the armed netplan apply):
    Mitogen's shutdown wait runs out (CallError carrying mitogen.core.TimeoutError) and used to stop
    the whole run; now the run goes on (the next task connects anew) with a warning naming the
    node. Any other failure of the reset still raises."""
    pytest.importorskip("ansible_mitogen")
    import mitogen.core
    from ansible_mitogen.connection import Connection

    plugin: Any = _plugin_module()
    timeout = mitogen.core.CallError("mitogen.core.TimeoutError: None\n  File ...services.py, in reset")
    other = mitogen.core.CallError("builtins.ValueError: a real problem")

    class Conn:
        _play_context = type("PC", (), {"remote_addr": "10.250.0.12"})()

        def __init__(self, error: Exception | None) -> None:
            self.error, self.calls = error, 0

        def reset(self) -> str:
            self.calls += 1
            if self.error:
                raise self.error
            return "reset"

    ok = Conn(None)
    assert plugin.reset_tolerant(Conn.reset)(ok) == "reset" and ok.calls == 1
    cut = Conn(timeout)
    assert plugin.reset_tolerant(Conn.reset)(cut) is None and cut.calls == 1
    assert "10.250.0.12 did not answer the shutdown of its connection" in capsys.readouterr().err
    with pytest.raises(mitogen.core.CallError, match="ValueError"):
        plugin.reset_tolerant(Conn.reset)(Conn(other))
    # Installed on Mitogen's connection, once however often the plugin loads.
    _plugin_module()
    assert getattr(Connection.reset, "sparkctl_reset_tolerant", False)
    assert not getattr(Connection.reset.__wrapped__, "sparkctl_reset_tolerant", False)


def test_the_service_pools_traceback_of_that_reset_is_left_out_and_nothing_else() -> None:
    pytest.importorskip("ansible_mitogen")
    import logging

    import mitogen.core

    plugin: Any = _plugin_module()
    _plugin_module()
    log = logging.getLogger("mitogen.service")
    assert sum(isinstance(f, plugin.QuietResetTimeout) for f in log.filters) == 1

    def record(exc: BaseException, method: str) -> logging.LogRecord:
        try:
            raise exc
        except BaseException:
            import sys

            return log.makeRecord("mitogen.service", logging.ERROR, __file__, 1,
                                  "%r: while invoking %r of %r",
                                  ("Pool", method, "ansible_mitogen.services.ContextService"), sys.exc_info())

    quiet = plugin.QuietResetTimeout()
    assert not quiet.filter(record(mitogen.core.TimeoutError(), "reset"))
    assert quiet.filter(record(mitogen.core.TimeoutError(), "get"))
    assert quiet.filter(record(ValueError("x"), "reset"))


def test_ansible_cfg_gives_a_loaded_node_time_and_retries() -> None:
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(REPO / "ansible.cfg")
    assert int(cfg["ssh_connection"]["retries"]) >= 2
    assert int(cfg["defaults"]["timeout"]) >= 60


# --- module_utils that Mitogen ships --------------------------------------------------------------


def _source(mu: Path, name: str) -> tuple[Path, bool] | None:
    """The file of module_utils module ``name`` under a role's module_utils, and whether it is a package."""
    base = mu.joinpath(*name[len(PREFIX):].split("."))
    if (base / "__init__.py").is_file():
        return base / "__init__.py", True
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py"), False
    return None


def _needed(module: Path, mu: Path) -> set[str]:
    """Every sparkctl module_utils module ``module`` loads, following relative imports (what
    Python will import on the node), read from the sources with ast."""
    found: set[str] = set()
    queue: list[tuple[Path, str, bool]] = [(module, "ansible.modules.x", False)]
    while queue:
        path, name, is_pkg = queue.pop()
        package = name if is_pkg else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                base = package
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                mod = node.module or ""
                if node.level:
                    mod = base + ("." + mod if mod else "")
                parts = mod.split(".")
                targets += [".".join(parts[:i]) for i in range(3, len(parts) + 1)]
                targets += [f"{mod}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets += [a.name for a in node.names]
            for target in targets:
                if not target.startswith(OURS) or target in found:
                    continue
                src = _source(mu, target)
                if src is not None:
                    found.add(target)
                    queue.append((src[0], target, src[1]))
    return found


def _modules() -> list[Path]:
    return sorted(p for p in REPO.glob("roles/*/library/*.py") if (p.parent.parent / "module_utils").is_dir())


@pytest.mark.parametrize("module", _modules(), ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_mitogen_ships_every_module_utils_file_a_module_loads(module: Path) -> None:
    finder = pytest.importorskip("ansible_mitogen.module_finder")
    mu = module.parent.parent / "module_utils"
    needed = _needed(module, mu)
    shipped = {name for name, _path, _pkg in finder.scan("ansible.modules.x", str(module), [str(mu)])}
    missing = sorted(needed - shipped)
    assert not missing, (
        f"{module.relative_to(REPO)} loads {missing} through relative imports that Mitogen does not follow: "
        "import them by their ansible.module_utils.sparkctl name in the module too"
    )


def test_the_reader_follows_relative_imports(tmp_path: Path) -> None:
    """The ast reader above sees the relative imports that Mitogen's scanner does not (what makes
    the test above fail for a module that names only `applied`)."""
    finder = pytest.importorskip("ansible_mitogen.module_finder")
    mu = REPO / "roles" / "spark_applied" / "module_utils"
    module = tmp_path / "probe.py"
    module.write_text("from ansible.module_utils.sparkctl.nodeside import applied\n")
    needed = _needed(module, mu)
    shipped = {name for name, _path, _pkg in finder.scan("ansible.modules.x", str(module), [str(mu)])}
    assert {OURS + ".nodeside.links", OURS + ".nodeside.system"} <= needed
    assert OURS + ".nodeside.links" not in shipped


def test_every_role_carries_the_same_module_utils_package() -> None:
    """Mitogen keeps one interpreter per node (and one on the controller) for the whole run, so
    ``ansible.module_utils.sparkctl`` is imported once from whichever role ran first: every role's
    copy must hold every subpackage, or a later role's import of one it lacks fails."""
    trees = {
        d.parent.parent.name: sorted(p.name for p in d.iterdir() if p.name != "__pycache__")
        for d in REPO.glob("roles/*/module_utils/sparkctl")
    }
    assert len(trees) > 1 and len({tuple(t) for t in trees.values()}) == 1, trees
    texts = {(d / "__init__.py").read_text() for d in REPO.glob("roles/*/module_utils/sparkctl")}
    assert len(texts) == 1


# --- Mitogen's module scan: compiled code kept across runs ----------------------------------------


def test_compiled_code_is_kept_across_runs_and_read_back_alike(tmp_path: Path) -> None:
    plugin: Any = _plugin_module()
    calls: list[str] = []

    def counting(source: Any, filename: str, mode: str) -> Any:
        calls.append(filename)
        return compile(source, filename, mode)

    source = b"import os\nfrom ansible.module_utils.basic import AnsibleModule\n"
    first = plugin.cached_compile(str(tmp_path / "cache"), counting)
    code = first(source, "ansible_module_x", "exec")
    assert first(source, "ansible_module_x", "exec") is code and calls == ["ansible_module_x"]
    kept = list((tmp_path / "cache").iterdir())
    assert len(kept) == 1 and kept[0].stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "cache").stat().st_mode & 0o777 == 0o700

    # Another run (a fresh process: nothing in memory) reads it back without compiling.
    again = plugin.cached_compile(str(tmp_path / "cache"), counting)(source, "ansible_module_x", "exec")
    assert calls == ["ansible_module_x"]
    assert (again.co_code, again.co_names) == (code.co_code, code.co_names)
    assert again.co_filename == "ansible_module_x"

    # Another source, or the same source under another name, is compiled anew.
    other = plugin.cached_compile(str(tmp_path / "cache"), counting)
    other(source + b"import sys\n", "ansible_module_x", "exec")
    other(source, "ansible_module_y", "exec")
    assert calls == ["ansible_module_x", "ansible_module_x", "ansible_module_y"]
    assert len(list((tmp_path / "cache").iterdir())) == 3


def test_a_damaged_or_unwritable_cache_only_costs_the_compile(tmp_path: Path) -> None:
    plugin: Any = _plugin_module()
    source = "import json\n"
    directory = tmp_path / "cache"
    plugin.cached_compile(str(directory))(source, "m", "exec")
    (kept,) = directory.iterdir()
    kept.write_bytes(b"\x00not marshal")  # cut short or overwritten
    code = plugin.cached_compile(str(directory))(source, "m", "exec")
    assert code.co_names == compile(source, "m", "exec").co_names
    assert kept.read_bytes() != b"\x00not marshal"  # written again, whole

    blocked = tmp_path / "file-not-dir"
    blocked.write_text("")
    code = plugin.cached_compile(str(blocked / "cache"))(source, "m", "exec")
    assert code.co_names == ("json",)


def test_the_cache_directory_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    plugin: Any = _plugin_module()
    monkeypatch.delenv(plugin.CODE_CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert plugin.code_cache_dir() == str(tmp_path / "xdg" / "sparkctl" / "mitogen-code")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert plugin.code_cache_dir() == str(tmp_path / "home" / ".cache" / "sparkctl" / "mitogen-code")
    monkeypatch.setenv(plugin.CODE_CACHE_ENV, str(tmp_path / "mine"))
    assert plugin.code_cache_dir() == str(tmp_path / "mine")
    monkeypatch.setenv(plugin.CODE_CACHE_ENV, "off")
    assert plugin.code_cache_dir() is None


@pytest.mark.parametrize("module", ["command", "copy", "systemd_service", "uri", "apt"])
def test_mitogens_scan_finds_the_same_files_through_the_cache(module: str, tmp_path: Path) -> None:
    """The scan is Mitogen's own; with the kept code it resolves exactly the files it resolves
    without (a cold cache, then a warm one in a fresh memory)."""
    pytest.importorskip("ansible_mitogen")
    import ansible
    import ansible_mitogen.module_finder as finder

    plugin: Any = _plugin_module()
    base = Path(ansible.__file__).parent
    args = (f"ansible_module_{module}", str(base / "modules" / f"{module}.py"), (str(base / "module_utils"),))
    saved = finder.__dict__.get("compile")
    try:
        finder.__dict__.pop("compile", None)
        plain = finder.scan(*args)
        for _ in range(2):
            finder.compile = plugin.cached_compile(str(tmp_path / "cache"))  # type: ignore[attr-defined]
            assert finder.scan(*args) == plain
    finally:
        finder.__dict__.pop("compile", None)
        if saved is not None:
            finder.compile = saved  # type: ignore[attr-defined]
    assert len(plain) > 10 and any(path.endswith("module_utils/basic.py") for _, path, _ in plain)


def test_the_plugin_puts_the_cache_under_mitogens_scan_once_or_not_at_all(tmp_path: Path) -> None:
    pytest.importorskip("ansible_mitogen")
    code = textwrap.dedent(f"""
        import importlib.util, os, sys
        def load():
            spec = importlib.util.spec_from_file_location("p", {str(PLUGIN)!r})
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
        load(); load()
        import ansible_mitogen.module_finder as f
        c = f.__dict__.get("compile")
        print(getattr(c, "sparkctl_cached", None), getattr(c, "sparkctl_compile", None) is compile)
    """)
    for setting, expected in ((str(tmp_path / "c"), "True True"), ("off", "None False")):
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                              check=True, env={**os.environ, "SPARKCTL_MITOGEN_CODE_CACHE": setting})
        assert proc.stdout.strip() == expected, proc.stderr
