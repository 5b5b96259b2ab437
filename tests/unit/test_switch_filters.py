"""The spark_switch role's readings of device answers (transcripts in tests/fixtures/switch/)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "switch"
_spec = importlib.util.spec_from_file_location(
    "sparkctl_switch_filters", REPO / "roles" / "spark_switch" / "filter_plugins" / "sparkctl_switch.py"
)
assert _spec and _spec.loader
filters = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(filters)


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_a_clean_import_has_no_errors() -> None:
    assert filters.routeros_import_errors(fixture("routeros-import-ok.txt")) == []


def test_a_syntax_error_is_reported_with_its_line() -> None:
    errors = filters.routeros_import_errors(fixture("routeros-import-syntax-error.txt"))
    assert errors == ["expected end of command (line 4 column 28)  [after: set qsfp56-dd-1 l2mtu=9216 mtu]"]


def test_a_partial_failure_is_a_failure_even_when_the_script_ran_to_the_end() -> None:
    errors = filters.routeros_import_errors(fixture("routeros-import-partial.txt"))
    assert len(errors) == 3
    assert errors[0].startswith("input does not match any value of interface")
    assert "set qsfp56-dd-2 auto-negotiation=no" in errors[0]
    assert errors[2].startswith("failure: already have such name")


@pytest.mark.parametrize("answer", ["", "\n\n", ["", "  "]])
def test_silence_is_not_success(answer: object) -> None:
    errors = filters.routeros_import_errors(answer)
    assert len(errors) == 1 and "did not confirm" in errors[0]


def test_a_comment_that_says_error_is_not_an_error() -> None:
    text = 'set qsfp56-dd-1 comment="sparkctl: error budget"\nScript file loaded and executed successfully\n'
    assert filters.routeros_import_errors(text) == []


def test_backups_are_found_and_the_oldest_pruned() -> None:
    names = filters.routeros_backups(fixture("routeros-file-print.txt"))
    assert names == [
        "sparkctl-backup-20261129T080000Z",
        "sparkctl-backup-20261130T101500Z",
        "sparkctl-backup-20261201T000000Z",
    ]
    assert filters.backups_to_prune(names, 2) == ["sparkctl-backup-20261129T080000Z"]
    assert filters.backups_to_prune(names, 5) == []
    assert filters.backups_to_prune(names, 0) == names[:-1]  # the newest is always kept


def test_the_diff_ignores_comments_and_shows_changes() -> None:
    before = "# header\n/interface ethernet\nset a mtu=9000\n"
    after = "# other header\n/interface ethernet\nset a mtu=9200\n"
    diff = filters.unified_diff(before, after)
    assert "-set a mtu=9000" in diff and "+set a mtu=9200" in diff
    assert filters.unified_diff(before, "# x\n/interface ethernet\nset a mtu=9000\n") == ""


def test_nvue_history_gives_the_last_applied_revision() -> None:
    history = "- rev_id: 7\n  date: 2026-11-30 10:00:00\n  user: cumulus\n- rev_id: 6\n"
    assert filters.nvue_last_applied(history) == "7"
    assert filters.nvue_last_applied("") is None
    assert filters.nvue_revisions(history) == ["7", "6"]
