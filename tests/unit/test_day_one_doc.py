"""docs/day-one.md only tells an admin to run what exists: every `sparkctl …` command line in it
(code blocks and inline code) names registered commands and options those commands take, and its
exit-code table is sparkctl.errors' own."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from typer._click import Context
from typer.main import get_command

from sparkctl.errors import EXIT_MEANINGS

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "day-one.md"


def _command_lines(text: str) -> list[str]:
    """Every `sparkctl …` invocation: lines of fenced shell blocks, and inline code spans."""
    found: list[str] = []
    fence: str | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("```"):
            fence = None if fence is not None else (stripped[3:] or "sh")
            continue
        if fence is not None and fence != "python":
            words = stripped.removeprefix("$ ").removeprefix("sudo ")
            if words.startswith("sparkctl "):
                found.append(words)
    found += [m.group(1).removeprefix("sudo ")
              for m in re.finditer(r"`((?:sudo )?sparkctl [^`]+)`", text)]
    return found


def _options(cmd: Any) -> tuple[set[str], set[str]]:
    """(every option name of ``cmd``, the names of those that take a value)."""
    names: set[str] = set()
    valued: set[str] = set()
    for p in cmd.params:
        if p.param_type_name != "option":
            continue
        names |= {*p.opts, *p.secondary_opts}
        if not p.is_flag:
            valued |= set(p.opts)
    return names, valued


def _check(root: Any, line: str) -> list[str]:
    """What in ``line`` is not a command or an option of the command it reaches (typer's click
    objects, walked as `sparkctl CMD --help` would resolve them)."""
    words = shlex.split(line)[1:]
    ctx = Context(root)
    cmd, path = root, ["sparkctl"]
    global_opts, global_valued = _options(root)
    opts, valued = set(global_opts), set(global_valued)
    problems: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word.startswith("-"):
            name = word.split("=", 1)[0]
            if name not in opts | {"--help"}:
                problems.append(f"{' '.join(path)}: no option {name}")
            if name in valued and "=" not in word:
                i += 1
        elif hasattr(cmd, "get_command"):
            sub = cmd.get_command(ctx, word)
            if sub is None:
                return [*problems, f"{' '.join(path)}: no command {word!r}"]
            cmd, path = sub, [*path, word]
            own, own_valued = _options(sub)
            opts, valued = own | global_opts, own_valued | global_valued
        i += 1
    if hasattr(cmd, "get_command") and not {"--help", "--version"} & set(words):
        problems.append(f"{' '.join(path)}: a group, not a command")
    return problems


def test_the_doc_has_the_whole_path() -> None:
    lines = _command_lines(DOC.read_text())
    firsts = {shlex.split(line)[1] for line in lines}
    for verb in ("bootstrap", "init", "validate", "provision", "check", "stage", "up", "watch", "status",
                 "ansible-command"):
        assert verb in firsts, f"docs/day-one.md never runs `sparkctl {verb}`"


@pytest.mark.parametrize("line", sorted(set(_command_lines(DOC.read_text()))))
def test_every_command_line_in_the_doc_exists(line: str) -> None:
    from sparkctl.cli import _register, app

    _register()
    assert _check(get_command(app), line) == [], line


def test_the_check_names_what_does_not_exist() -> None:
    from sparkctl.cli import _register, app

    _register()
    root = get_command(app)
    assert _check(root, "sparkctl -i site stage weights --verify-only") == []
    assert _check(root, "sparkctl frobnicate") == ["sparkctl: no command 'frobnicate'"]
    assert _check(root, "sparkctl provision --chek") == ["sparkctl provision: no option --chek"]
    assert _check(root, "sparkctl switch") == ["sparkctl switch: a group, not a command"]
    assert _check(root, "sparkctl up --limit spark-1") == ["sparkctl up: no option --limit"]


def test_the_exit_code_table_is_sparkctls() -> None:
    rows = dict(re.findall(r"^\| (\d) \| (.+?) \|$", DOC.read_text(), flags=re.M))
    assert {int(k): v for k, v in rows.items()} == EXIT_MEANINGS


def test_the_glossary_explains_every_name_the_docs_and_help_lean_on() -> None:
    """R4, M1, SG17, sparkDash, DSV41EN1 and the rest appear in help texts, profiles and results
    without a word of explanation there: the day-one glossary defines each, one entry apiece."""
    glossary = DOC.read_text().split("\n## Glossary\n", 1)[1]
    defined = re.findall(r"^- \*\*(.+?)\*\* — ", glossary, flags=re.M)
    wanted = {"R4", "M1", "SG17", "sparkDash", "Engram", "DSV41EN1", "DSpark", "RoCEnante", "PCIe halves"}
    assert wanted <= set(defined), sorted(wanted - set(defined))
    assert len(defined) == len(set(defined)), defined
