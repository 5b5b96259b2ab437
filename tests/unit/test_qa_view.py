"""`qualify`'s table at 80 columns: what was asked on a line of its own, then the checks, every line
within 80 columns and nothing cut (the boxed table wrapped the title over two lines and each check's
name and detail inside a cell)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from sparkctl.cli.qa_view import qualify_table
from sparkctl.qa.qualify import CheckResult, QualifyReport

QUICK = [
    ("text", 'text: 17 × 19 → "323" exactly', "17 × 19 → '323'"),
    ("arithmetic", "arithmetic at C8 (2 waves × 8 distinct)", "16/16 exact at concurrency 8"),
    ("json", 'structured JSON: {"answer": 42} exactly', 'schema-valid {"answer": 42}'),
    ("determinism", "greedy determinism", "identical (287 characters) across 2 runs"),
]


def _lines(report: QualifyReport) -> list[str]:
    console = Console(width=80, record=True, color_system=None)
    console.print(qualify_table(report))
    return console.export_text().splitlines()


def _report(checks: list[CheckResult]) -> QualifyReport:
    return QualifyReport("quick", "http://10.250.1.10:8004/v1", "deepseek-v41-flash", True, Path("results"),
                         "20261207T091142Z", checks=checks)


def test_the_quick_suite_fits_80_columns_with_its_mark_first() -> None:
    lines = _lines(_report([CheckResult(n, t, True, 0.2, d) for n, t, d in QUICK]))
    assert lines[0] == "qualify (quick) — deepseek-v41-flash at http://10.250.1.10:8004/v1 · simulator"
    assert all(len(ln) <= 80 for ln in lines) and not any("…" in ln for ln in lines), lines
    assert lines[1].split() == ["check", "time", "detail"]
    rows = [ln for ln in lines if ln.startswith(("✓", "⨯", "–"))]
    assert [r.split()[1] for r in rows] == ["text:", "arithmetic", "structured", "greedy"], lines
    text = " ".join(" ".join(lines).split())
    for _, title, detail in QUICK:  # every word of every name and detail is there, in order
        assert all(w in text for w in title.split()) and all(w in text for w in detail.split())


def test_a_failed_and_a_skipped_check_show_their_own_marks() -> None:
    checks = [CheckResult("text", QUICK[0][1], False, 0.1, "17 × 19 → '324'"),
              CheckResult("images", "one image: printed code", False, 0.0, "", skipped="no vision tower")]
    rows = [ln for ln in _lines(_report(checks)) if ln.startswith(("✓", "⨯", "–"))]
    assert rows[0].startswith("⨯") and "0.1s" in rows[0] and rows[1].startswith("–") and "s " not in rows[1]


def test_the_full_suite_says_before_and_after_once_and_keeps_titles_whole() -> None:
    from sparkctl.qa.qualify import CHECKS, SUITES, _phase

    names = SUITES["full"]
    detail = "16/16 exact at concurrency 8, every answer schema-valid"
    checks = [CheckResult(n, CHECKS[n], True, 1.2, detail, phase=_phase(n, names)) for n in names]
    report = _report(checks)
    report.suite = "full"
    lines = _lines(report)
    assert all(len(ln) <= 80 for ln in lines) and not any("…" in ln for ln in lines), lines
    assert not any("after the long request)" in ln for ln in lines), lines  # no title repeats it
    headings = [ln.strip() for ln in lines if ln.strip().endswith("the long request")]
    assert headings == ["before the long request", "after the long request"], lines
    rows = [ln for ln in lines if ln.startswith("✓")]
    assert len(rows) == len(names)
    # Titles of up to 40 characters on their own line; the details wrap beside them, every word kept.
    short = [t for t in CHECKS.values() if len(t) <= 40]
    assert all(any(t in r for r in rows) for t in short), lines
    for start in [i for i, ln in enumerate(lines) if ln.startswith("✓")]:
        words = " ".join(ln[lines[1].index("detail"):] for ln in lines[start:start + 3]).split()
        assert " ".join(words).startswith(detail), lines[start:start + 3]
