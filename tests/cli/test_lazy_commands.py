"""Commands imported when they run (sparkctl.cli.registry): `--version`, `--help` and a <TAB> on a
command name import no command module and none of the heavy libraries, and every command's help and
completion are the same as when every module is registered up front."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.core import TyperGroup
from typer.main import get_command

import sparkctl.cli as cli
from sparkctl.cli import registry

HEAVY = ("ansible", "ansible_runner", "pydantic", "paramiko", "httpx")
# In a child process: run sparkctl's entry point as the console script does, then list what it
# imported of HEAVY and of the command modules.
PROBE = f"""
import json, sys
from sparkctl.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
mods = sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})
cmds = sorted(m for m in sys.modules if m.startswith('sparkctl.cli.') and m.rsplit('.', 1)[1] not in
              ('shell', 'registry', 'helptext'))
print(json.dumps({{"heavy": sorted({{m.split('.')[0] for m in mods}}), "commands": cmds}}), file=sys.stderr)
"""


def _probe(tmp_path: Path, *args: str, **env: str) -> dict[str, Any]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("_SPARKCTL", "COMP_"))}
    environ.update(SPARKCTL_STATE_DIR=str(tmp_path / "state"), **env)
    environ.pop("SPARKCTL_INVENTORY", None)
    proc = subprocess.run([sys.executable, "-c", PROBE, *args], env=environ, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False)
    doc: dict[str, Any] = json.loads(proc.stderr.strip().splitlines()[-1])
    doc["out"] = proc.stdout
    return doc


COMPLETE = {"_SPARKCTL_COMPLETE": "complete_bash", "COMP_WORDS": "sparkctl st", "COMP_CWORD": "1"}


def test_version_help_and_a_tab_import_nothing_heavy(tmp_path: Path) -> None:
    first = _probe(tmp_path, **COMPLETE)  # builds the command index (imports every module once)
    assert first["out"].split() == ["stage", "status"]
    for args, env in (((), COMPLETE), (("--version",), {}), (("--help",), {})):
        got = _probe(tmp_path, *args, **env)
        assert got["heavy"] == [], (args, got["heavy"])
        assert got["commands"] == [], (args, got["commands"])
    assert _probe(tmp_path, **COMPLETE)["out"].split() == ["stage", "status"]
    assert _probe(tmp_path, "--version")["out"].startswith("sparkctl ")


def test_a_command_imports_its_own_module_only(tmp_path: Path) -> None:
    _probe(tmp_path, "--help")  # builds the command index
    got = _probe(tmp_path, "profiles", "--help")
    assert "sparkctl.cli.cluster" in got["commands"]  # plan and profiles register with validate
    assert not {"sparkctl.cli.serve", "sparkctl.cli.provision", "sparkctl.cli.qa"} & set(got["commands"])



def test_a_tab_after_a_serving_command_imports_nothing_heavy(tmp_path: Path, example_copy: Path) -> None:
    """Past the command's name its module is imported, for its options; `serve`'s own imports
    wait for the command to run, and the node names come from the inventory cache."""
    _probe(tmp_path, "-i", str(example_copy), "validate")  # the index, and the inventory's cache entry
    options = _probe(tmp_path, _SPARKCTL_COMPLETE="complete_bash", COMP_WORDS="sparkctl status --",
                     COMP_CWORD="2")
    assert "--format" in options["out"].split() and options["heavy"] == []
    words = f"sparkctl -i {example_copy} logs "
    ranks = _probe(tmp_path, _SPARKCTL_COMPLETE="complete_bash", COMP_WORDS=words, COMP_CWORD="4")
    assert ranks["out"].split() == ["0", "1", "2", "3"] and ranks["heavy"] == []

@pytest.fixture
def lazy(monkeypatch: pytest.MonkeyPatch) -> None:
    """main() as in a fresh process: nothing registered up front, every command from the index."""
    monkeypatch.setattr(cli.app, "registered_commands", [])
    monkeypatch.setattr(cli.app, "registered_groups", [])
    monkeypatch.setattr(cli, "_registered", set())


def _paths(cmd: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = [path]
    if isinstance(cmd, TyperGroup):
        for name, sub in cmd.commands.items():
            out += _paths(sub, (*path, name))
    return out


def test_every_help_is_the_same_as_with_every_module_registered(
    run_cli: Any, request: pytest.FixtureRequest
) -> None:
    cli._register()
    paths = _paths(get_command(cli.app))
    assert len(paths) >= 25
    eager = {p: run_cli(*p, "--help") for p in paths}
    request.getfixturevalue("lazy")
    for path, want in eager.items():
        got = run_cli(*path, "--help")
        assert (got.code, got.out) == (want.code, want.out), " ".join(path)


def test_completion_is_the_same_as_with_every_module_registered(
    run_cli: Any, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, example_copy: Path
) -> None:
    words = ["sparkctl ", "sparkctl st", "sparkctl status --", "sparkctl switch ", "sparkctl logs ",
             "sparkctl provision --tags fabric,q", f"sparkctl -i {example_copy} provision --limit ",
             "sparkctl profiles show ", "sparkctl --ver"]

    def complete(line: str) -> list[str]:
        cword = len(line.split()) - (0 if line.endswith(" ") else 1)
        monkeypatch.setenv("_SPARKCTL_COMPLETE", "complete_bash")
        monkeypatch.setenv("COMP_WORDS", line)
        monkeypatch.setenv("COMP_CWORD", str(cword))
        monkeypatch.setenv("SPARKCTL_INVENTORY", str(example_copy))
        res = run_cli()
        assert res.code == 0, res.err
        return res.out.split()

    eager = {w: complete(w) for w in words}
    assert eager["sparkctl logs "] == ["0", "1", "2", "3"]
    request.getfixturevalue("lazy")
    assert {w: complete(w) for w in words} == eager


def test_the_index_is_kept_and_built_again_when_a_command_module_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = registry.Index(cli._COMMAND_MODULES, cli.PLUGIN_GROUP, cli.app, tmp_path)
    names = list(index.entries())
    assert {"validate", "status", "switch"} <= set(names)
    assert (tmp_path / registry.INDEX_FILE).is_file()

    def no_build(*args: object) -> Any:
        raise AssertionError("the index was built again")

    monkeypatch.setattr(registry, "build", no_build)
    again = registry.Index(cli._COMMAND_MODULES, cli.PLUGIN_GROUP, cli.app, tmp_path)
    assert list(again.entries()) == names  # read back, in the same order
    assert again.command("status") is not None  # and the real command built from its module

    real_stats = registry._stats
    monkeypatch.setattr(registry, "_stats", lambda d: [*real_stats(d), ("serve.py", 1, 1)])
    with pytest.raises(AssertionError, match="built again"):
        registry.Index(cli._COMMAND_MODULES, cli.PLUGIN_GROUP, cli.app, tmp_path).entries()


def test_an_unknown_command_is_refused_as_before(run_cli: Any, request: pytest.FixtureRequest) -> None:
    eager = run_cli("stauts")
    assert eager.code == 2 and "stauts" in eager.err
    request.getfixturevalue("lazy")
    lazy = run_cli("stauts")
    assert (lazy.code, lazy.out, lazy.err) == (eager.code, eager.out, eager.err)


# `sparkctl status` on the serving verbs' fake site (support.serve_site), in a child process: the
# first run reads the inventory with ansible-core, the second finds it in the cache.
STATUS_PROBE = """
import json, sys
from pathlib import Path
import pytest
from support.serve_site import Site
here = Path(sys.argv[1])
here.mkdir(exist_ok=True)
site = Site(here, pytest.MonkeyPatch())
loaded = sorted({m.split('.')[0] for m in sys.modules} & {'ansible', 'ansible_runner'})
from sparkctl.cli import main
try:
    main(["-i", str(site.inventory), "--json", "status"])
except SystemExit as exc:
    code = exc.code
ran = sorted({m.split('.')[0] for m in sys.modules} & {'ansible', 'ansible_runner'})
print(json.dumps({"code": code, "site": loaded, "status": ran}), file=sys.stderr)
"""


def test_status_on_a_cached_inventory_imports_no_ansible(tmp_path: Path) -> None:
    tests = Path(__file__).resolve().parents[1]
    env = {**os.environ, "SPARKCTL_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(tests)}
    runs = []
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-c", STATUS_PROBE, str(tmp_path / "site")], env=env,
                              capture_output=True, text=True, timeout=120, check=False)
        runs.append(json.loads(proc.stderr.strip().splitlines()[-1]))
    assert runs[0]["status"] == ["ansible"]  # the first read, by ansible-core
    assert runs[1] == {"code": runs[0]["code"], "site": [], "status": []}, runs


def test_plain_values_are_what_typer_gives(tmp_path: Path) -> None:
    """shell.PlainValues skips typer's pydantic coercion only where it would change nothing: every
    parameter's default, and a string for a plain Path option, come back as typer's own gives them."""
    from typer import _click as click
    from typer._coercion import build_runtime_param

    from sparkctl.cli.shell import PlainValues

    cli._register()
    readable = tmp_path / "here"
    readable.mkdir()
    checked = 0
    for path in _paths(get_command(cli.app)):
        cmd: Any = get_command(cli.app)
        for word in path:
            cmd = cmd.commands[word]
        ctx = click.Context(cmd)
        for param in cmd.params:
            if not hasattr(param, "type_descriptor"):
                continue
            samples = [param.default if not callable(param.default) else None]
            if param.type_descriptor.annotation is Path:
                samples += [str(readable), str(tmp_path / "not-yet")]
            for value in samples:
                ours = PlainValues(param).coerce(value, param, ctx)
                theirs = build_runtime_param(param.type_descriptor).coerce(value, param=param, ctx=ctx)
                assert (type(ours), ours) == (type(theirs), theirs), (path, param.name, value)
                checked += 1
    assert checked > 100


def test_the_process_entry_freezes_what_it_made_and_an_in_process_call_does_not(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Run as a process (the console script, `python -m sparkctl`: no argv), main freezes the heap
    on its way out, so the interpreter's teardown collections skip it (~0.2 s after `up`); called
    with an argv (tests, other programs in their own process), it leaves the collector alone."""
    frozen: list[bool] = []
    monkeypatch.setattr(cli.gc, "freeze", lambda: frozen.append(True))
    monkeypatch.setattr(sys, "argv", ["sparkctl", "--version"])
    with pytest.raises(SystemExit):
        cli.main()
    assert frozen == [True]
    with pytest.raises(SystemExit):
        cli.main(["--version"])
    assert frozen == [True]


def _command_at(cmd: Any, path: tuple[str, ...]) -> Any:
    for name in path:
        cmd = cmd.commands[name]
    return cmd


def test_each_help_paragraph_flows_as_one_line(run_cli: Any, monkeypatch: pytest.MonkeyPatch,
                                               request: pytest.FixtureRequest) -> None:
    """typer's rich mode kept a docstring's line breaks after its first paragraph, so on an 80-column
    terminal `sparkctl up --help` broke its prose twice ("... (or with" / "--yes). When every").
    On a terminal wide enough for any paragraph, every paragraph is one line, built lazily (a plain
    run) or from every module registered."""
    monkeypatch.setenv("COLUMNS", "1000")
    cli._register()
    paths = _paths(get_command(cli.app))
    helps = {p: inspect.cleandoc(_command_at(get_command(cli.app), p).help or "") for p in paths}
    wrapped = [p for p, h in helps.items() if any("\n" in para for para in h.split("\n\n")[1:])]
    assert len(wrapped) >= 5, "the docstrings no longer wrap: this test checks nothing"
    for lazily in (False, True):
        if lazily:
            request.getfixturevalue("lazy")
        for path in wrapped:
            out = run_cli(*path, "--help").out
            lines = [" ".join(line.strip(" │").split()) for line in out.splitlines()]
            for para in helps[path].split("\n\n")[1:]:
                flowing = " ".join(para.split())
                assert flowing in lines, (" ".join(path), flowing, lazily)
