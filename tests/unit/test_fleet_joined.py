"""Two scripts in one SSH round (``ssh.fleet.joined_script``) and each one's result back
(``split_results``): run here by /bin/sh as the node's shell runs it (the script on stdin)."""

from __future__ import annotations

import subprocess

import pytest

from sparkctl.ssh.fleet import PART_END, HostResult, joined_script, split_results


def _sh(script: str) -> HostResult:
    proc = subprocess.run(["/bin/sh", "-s"], input=script, capture_output=True, text=True, timeout=60,
                          check=False)
    return HostResult("spark-1", proc.returncode, proc.stdout, proc.stderr)


def test_each_part_runs_in_turn_and_gets_its_own_output_and_status() -> None:
    first = ("echo one\necho warned >&2\n"
             "exec python3 - <<'EOF'\nimport sys\nprint('from python')\nsys.exit(3)\nEOF\n")
    second = "echo two\necho 'and more'\n"
    pre, post = split_results({"spark-1": _sh(joined_script(first, second))}, 2)
    assert pre["spark-1"] == HostResult("spark-1", 3, "one\nfrom python\n", "warned\n")
    assert post["spark-1"] == HostResult("spark-1", 0, "two\nand more\n", "")


def test_a_node_not_reached_gives_every_part_its_reason() -> None:
    dark = HostResult("spark-2", error="timed out connecting to 10.250.0.12:22")
    parts = split_results({"spark-2": dark}, 2)
    assert [p["spark-2"].error for p in parts] == [dark.error] * 2
    assert not any(p["spark-2"].reachable for p in parts)


def test_a_round_cut_short_leaves_the_parts_after_it_empty() -> None:
    """The shell refused the script before any part ran (sudo asked for a password): the first part
    carries what came and the round's status, the second nothing."""
    cut = HostResult("spark-3", 1, "", "sudo: a password is required\n")
    pre, post = split_results({"spark-3": cut}, 2)
    assert (pre["spark-3"].rc, pre["spark-3"].stderr) == (1, "sudo: a password is required\n")
    assert (post["spark-3"].rc, post["spark-3"].stdout, post["spark-3"].stderr) == (1, "", "")


def test_a_part_holding_the_marker_is_refused() -> None:
    with pytest.raises(ValueError, match=PART_END):
        joined_script("echo ok\n", f"echo {PART_END}\n")
