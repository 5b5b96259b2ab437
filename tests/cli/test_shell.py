"""How the command line meets the shell: `--help` in lifecycle panels with an example per command, and
completion through click's bash protocol (`_SPARKCTL_COMPLETE=complete_bash COMP_WORDS=... sparkctl`):
commands in lifecycle order, node names and ranks from the inventory, profiles, provision tags."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from support import qa_fakes
from typer._click import Command
from typer.core import TyperGroup
from typer.main import get_command

from sparkctl.cli import _register, app
from sparkctl.cli.completion import BUDGET_ENV
from sparkctl.cli.shell import PANELS
from sparkctl.qa import verbs

LIFECYCLE = ["validate", "plan", "profiles", "preflight", "provision", "switch", "check", "stage",
             "up", "down", "status", "logs", "bundle", "qualify", "bench"]
NODES = ["spark-0", "spark-1", "spark-2", "spark-3"]
BIN = Path(sys.executable).parent
# These tests check what completion offers, not how fast: on a loaded machine (the unit tests run
# beside the lab tests) loading the inventory can take longer than the interactive budget.
GENEROUS_BUDGET = "60"


def _complete_subprocess(words: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """What bash's completion function runs on <TAB>: sparkctl with the protocol's variables set."""
    cword = len(words.split()) - (0 if words.endswith(" ") else 1)
    environ = {k: v for k, v in os.environ.items() if k != "SPARKCTL_INVENTORY"}
    environ.update(_SPARKCTL_COMPLETE="complete_bash", COMP_WORDS=words, COMP_CWORD=str(cword))
    environ.update({BUDGET_ENV: GENEROUS_BUDGET, **env})
    return subprocess.run([sys.executable, "-m", "sparkctl"], env=environ, cwd=cwd, capture_output=True,
                          text=True, timeout=60, check=False)


@pytest.fixture
def complete(run_cli: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The same protocol in-process (fast): the completions sparkctl prints for COMP_WORDS."""

    def run(words: str, **env: str) -> list[str]:
        cword = len(words.split()) - (0 if words.endswith(" ") else 1)
        monkeypatch.setenv("_SPARKCTL_COMPLETE", "complete_bash")
        monkeypatch.setenv("COMP_WORDS", words)
        monkeypatch.setenv("COMP_CWORD", str(cword))
        monkeypatch.delenv("SPARKCTL_INVENTORY", raising=False)
        monkeypatch.setenv(BUDGET_ENV, GENEROUS_BUDGET)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        res = run_cli()
        assert res.code == 0, res.err
        return res.out.split()

    return run


# --- help ----------------------------------------------------------------------------------------


def test_help_lists_the_lifecycle_panels_in_order(run_cli: Any) -> None:
    res = run_cli("--help")
    assert res.code == 0, res.err
    panels = [p for p in PANELS if f"─ {p} ─" in res.out]
    assert panels[:6] == list(PANELS[:6])  # Lab joins when the lab plugin is installed
    offsets = [res.out.index(f"─ {p} ─") for p in panels]
    assert offsets == sorted(offsets)
    assert "─ Commands ─" not in res.out  # every command sits in a lifecycle panel
    lines = res.out.splitlines()
    # a command's own row, not a help text wrapped onto the next one ("… a Linux switch on …")
    listed = [ln.split()[1] for ln in lines if ln.startswith("│ ") and not ln.startswith("│  ")
              and len(ln.split()) > 1]
    assert [c for c in listed if c in LIFECYCLE] == LIFECYCLE


def _leaves(cmd: Command, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Command]]:
    if isinstance(cmd, TyperGroup):
        return [leaf for name, sub in cmd.commands.items() for leaf in _leaves(sub, (*path, name))]
    return [(path, cmd)]


def test_every_command_carries_an_example_of_itself() -> None:
    _register()
    leaves = _leaves(get_command(app))
    assert len(leaves) >= 20
    for path, cmd in leaves:
        assert cmd.epilog and "Example" in cmd.epilog, " ".join(path)
        assert f"$ sparkctl {' '.join(path)}" in cmd.epilog or f"$ sparkctl -i inventory/site {path[0]}" in (
            cmd.epilog
        ), (path, cmd.epilog)


def test_a_command_help_shows_its_example(run_cli: Any) -> None:
    res = run_cli("switch", "diff", "--help")
    assert res.code == 0
    assert "Example" in res.out and "$ sparkctl switch diff" in res.out


# --- completion, for real ------------------------------------------------------------------------


def test_bash_completion_protocol_offers_the_lifecycle_commands(tmp_path: Path) -> None:
    proc = _complete_subprocess("sparkctl ", tmp_path)
    assert proc.returncode == 0, proc.stderr
    offered = proc.stdout.split()
    assert [c for c in offered if c in LIFECYCLE] == LIFECYCLE
    assert proc.stderr == ""


def test_bash_completion_protocol_offers_node_names(tmp_path: Path, example_copy: Path) -> None:
    proc = _complete_subprocess(f"sparkctl -i {example_copy} plan --node ", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == NODES


@pytest.mark.skipif(shutil.which("bash") is None or not (BIN / "sparkctl").exists(),
                    reason="needs bash and the sparkctl console script")
def test_bash_runs_the_installed_completion_function(tmp_path: Path, example_copy: Path) -> None:
    """The script `sparkctl --show-completion bash` prints, sourced into bash, fills COMPREPLY."""
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
           "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1", BUDGET_ENV: GENEROUS_BUDGET}
    script = subprocess.run(["sparkctl", "--show-completion", "bash"], env=env, capture_output=True,
                            text=True, timeout=60, check=True).stdout
    assert "_SPARKCTL_COMPLETE=complete_bash" in script
    (tmp_path / "completion.bash").write_text(script)
    probe = (
        "source completion.bash\n"
        f"COMP_WORDS=(sparkctl -i {example_copy} logs ''); COMP_CWORD=4; _sparkctl_completion sparkctl\n"
        'printf "%s\\n" "${COMPREPLY[@]}"; echo --\n'
        "COMP_WORDS=(sparkctl pro); COMP_CWORD=1; _sparkctl_completion sparkctl\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    env.pop("SPARKCTL_INVENTORY", None)
    out = subprocess.run(["bash", "--norc", "--noprofile", "-c", probe], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=60, check=True).stdout
    ranks, commands = out.split("--\n")
    assert ranks.split() == ["0", "1", "2", "3"]
    assert commands.split() == ["profiles", "provision"]


# --- completion of values (in-process, same protocol) ----------------------------------------------


@pytest.mark.timing
def test_an_inventory_slower_than_the_budget_offers_nothing_and_waits_no_longer(
    complete: Any, example_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sparkctl.cli import completion

    def slow(path: Path) -> Any:
        time.sleep(2.0)  # past the budget: completion must have answered already
        raise RuntimeError("too slow")

    monkeypatch.setattr(completion, "load_inventory", slow)
    t0 = time.monotonic()
    assert complete("sparkctl logs ", SPARKCTL_INVENTORY=str(example_copy), **{BUDGET_ENV: "0.2"}) == []
    assert time.monotonic() - t0 < 1.5
    for raw, budget in (("0.2", 0.2), ("", completion.LOAD_BUDGET_S), ("soon", completion.LOAD_BUDGET_S),
                        ("-1", completion.LOAD_BUDGET_S)):
        monkeypatch.setenv(BUDGET_ENV, raw)
        assert completion.load_budget_s() == budget


def test_completion_of_ranks_uses_the_inventory_from_the_environment(
    complete: Any, example_copy: Path
) -> None:
    assert complete("sparkctl logs ", SPARKCTL_INVENTORY=str(example_copy)) == ["0", "1", "2", "3"]
    assert complete("sparkctl logs 2", SPARKCTL_INVENTORY=str(example_copy)) == ["2"]


def test_completion_of_limit_lists_hosts_and_skips_chosen_ones(complete: Any, example_copy: Path) -> None:
    offered = complete(f"sparkctl -i {example_copy} provision --limit ")
    assert offered == [*NODES, "crs812"]
    offered = complete(f"sparkctl -i {example_copy} provision --limit spark-1,spark-")
    assert offered == ["spark-1,spark-0", "spark-1,spark-2", "spark-1,spark-3"]


def test_completion_of_profiles_tags_and_stage_targets(complete: Any) -> None:
    assert complete("sparkctl profiles show ") == [
        "lab", "m1-1m", "mia-ring-tp4", "mia-tp3", "mia-tp8", "r4-nvme", "sg17-tp8"]
    assert complete("sparkctl provision --tags fabric,q") == ["fabric,qos"]
    assert complete("sparkctl stage ") == ["kit", "image", "weights", "engram", "all"]
    assert complete("sparkctl switch ") == ["show", "diff", "apply"]


def test_completion_offers_nothing_when_the_inventory_does_not_load(
    complete: Any, example_copy: Path, tmp_path: Path
) -> None:
    hosts = example_copy / "hosts.yml"
    doc = yaml.safe_load(hosts.read_text())
    doc["all"]["children"]["sparks"]["hosts"]["spark-2"]["sparkctl_rank"] = 1  # duplicate rank
    hosts.write_text(yaml.safe_dump(doc))
    assert complete(f"sparkctl -i {example_copy} plan --node ") == []
    assert complete(f"sparkctl -i {tmp_path / 'nowhere'} logs ") == []


# --- options from the environment ------------------------------------------------------------------


def test_results_directory_comes_from_the_environment(
    run_cli: Any, example_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[Path] = []

    def fake_qualify(cluster: Any, suite: str, results: Path, **_: Any) -> Any:
        seen.append(results)
        return SimpleNamespace(passed=True, to_dict=lambda: {"passed": True}, results_dir=results / "q")

    monkeypatch.setattr(verbs, "run_qualify", fake_qualify)
    # The example's nodes are not there: no memory, GPUs or identity to read.
    qa_fakes.use(monkeypatch, qa_fakes.qa_tools(memory={"lowest_gib": None}))
    monkeypatch.setenv("SPARKCTL_RESULTS", str(tmp_path / "evidence"))
    res = run_cli("-i", str(example_copy), "--json", "qualify")
    assert res.code == 0, res.err
    res = run_cli("-i", str(example_copy), "--json", "qualify", "--results", str(tmp_path / "here"))
    assert res.code == 0, res.err
    assert seen == [tmp_path / "evidence", tmp_path / "here"]


def test_help_names_the_environment_variables(run_cli: Any) -> None:
    assert "SPARKCTL_INVENTORY" in run_cli("--help").out
    assert "SPARKCTL_RESULTS" in run_cli("bench", "--help").out


def test_no_flag_shows_a_value_placeholder_and_every_default_survives_markup(run_cli: Any) -> None:
    """A flag takes no value, so help shows no `<bool>` beside it; a help text's own "[default: …]"
    is printed, not swallowed as Rich markup (bench once showed "Comma-separated levels .")."""
    _register()
    for path, cmd in _leaves(get_command(app)):
        res = run_cli(*path, "--help")
        assert res.code == 0, (path, res.err)
        text = " ".join(res.out.replace("│", " ").split())  # help wraps inside the panel's borders
        assert "<bool>" not in text, " ".join(path)
        for param in cmd.params:
            help_text = " ".join((getattr(param, "help", None) or "").replace("\\[", "[").split())
            if "[default:" in help_text:
                shown = help_text[help_text.index("[default:"):].split("]")[0]
                assert shown in text, (" ".join(path), param.name, shown)


def test_help_lists_the_exit_codes_as_the_readme_does(run_cli: Any) -> None:
    from sparkctl.errors import EXIT_MEANINGS

    out = " ".join(run_cli("--help").out.split())
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    for code, meaning in EXIT_MEANINGS.items():
        assert f"{code} {meaning}" in out
        assert f"| {code} | {meaning} |" in readme
