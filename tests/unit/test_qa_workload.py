"""User workloads pinned by digest: the bytes must hash to what was pinned, or nothing runs (exit 2)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from sparkctl.errors import EXIT_USAGE, InputError
from sparkctl.qa.workload import load_pinned, resolve

GOOD = {
    "name": "community-coding",
    "kind": "coding",
    "max_tokens": 200,
    "prompts": ["Write merge_intervals."],
}


def _write(tmp_path: Path, data: object) -> tuple[Path, str]:
    path = tmp_path / "w.json"
    path.write_text(json.dumps(data))
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_pinned_file_loads_and_names_its_digest(tmp_path: Path) -> None:
    path, digest = _write(tmp_path, GOOD)
    w = load_pinned(f"{path}@{digest}")
    assert (w.name, w.kind, w.max_tokens, w.sha256, w.origin) == (
        "community-coding",
        "coding",
        200,
        digest,
        str(path),
    )
    assert load_pinned(f"{path}@sha256:{digest.upper()}").sha256 == digest
    assert [x.name for x in resolve(["coding", f"{path}@{digest}", "coding"])] == [
        "coding",
        "community-coding",
    ]


def test_a_digest_mismatch_is_refused_with_both_digests(tmp_path: Path) -> None:
    path, digest = _write(tmp_path, GOOD)
    pinned = digest
    path.write_text(json.dumps({**GOOD, "max_tokens": 100}))  # edited after pinning
    with pytest.raises(InputError) as err:
        load_pinned(f"{path}@{pinned}")
    assert err.value.exit_code == EXIT_USAGE
    assert pinned in str(err.value) and hashlib.sha256(path.read_bytes()).hexdigest() in str(err.value)


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("w.json", "not coding, prose, mixed, both or FILE@SHA256"),
        ("w.json@abc", "64 hex digits"),
        ("@" + "0" * 64, "FILE@SHA256"),
    ],
)
def test_malformed_specs(spec: str, match: str) -> None:
    with pytest.raises(InputError, match=match):
        resolve([spec])


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read the file"):
        load_pinned(f"{tmp_path / 'nope.json'}@{'0' * 64}")


@pytest.mark.parametrize(
    ("change", "field"),
    [({"kind": "poetry"}, "kind"), ({"max_tokens": 1}, "max_tokens"), ({"prompts": []}, "prompts"),
     ({"name": ""}, "name"), ({"prompts": ["ok", 3]}, "prompts")],
)  # fmt: skip
def test_bad_content_names_the_field(tmp_path: Path, change: dict[str, object], field: str) -> None:
    path, digest = _write(tmp_path, {**GOOD, **change})
    with pytest.raises(InputError, match=field):
        load_pinned(f"{path}@{digest}")


def test_both_is_coding_and_prose_and_a_mix_needs_its_categories(tmp_path: Path) -> None:
    assert [w.name for w in resolve(["both"])] == ["coding", "prose"]  # the default: not the mix
    assert [w.name for w in resolve(["mixed", "coding"])] == ["mixed", "coding"]
    path, digest = _write(tmp_path, {**GOOD, "kind": "mixed"})
    with pytest.raises(InputError, match="kind mixed needs categories"):
        load_pinned(f"{path}@{digest}")
    cats = [{"category": "a", "prompt": "A.", "max_tokens": 20},
            {"category": "b", "prompt": "B.", "max_tokens": 9}]
    path, digest = _write(tmp_path, {**GOOD, "kind": "mixed", "categories": cats})
    mix = load_pinned(f"{path}@{digest}")
    assert [(c, len(p), n) for c, p, n in mix.batches_for(3)] == [("a", 3, 20), ("b", 3, 9)]
    path, digest = _write(tmp_path, {**GOOD, "categories": cats})  # a coding workload has no categories
    with pytest.raises(InputError, match="only a mix has them"):
        load_pinned(f"{path}@{digest}")


@pytest.mark.parametrize("spec", ["w.json@abc", "@" + "0" * 64, "w.json@"])
def test_workload_and_arrivals_refuse_a_malformed_pin_in_the_same_words(spec: str) -> None:
    from sparkctl.qa.protocols import load_schedule

    for option, load, example in (("--workload", load_pinned, "prompts.json"),
                                  ("--arrivals", load_schedule, "schedule.jsonl")):
        with pytest.raises(InputError) as err:
            load(spec)
        assert err.value.message.startswith(f"{option} {spec!r}: a ")
        assert err.value.message.endswith(" is pinned by its digest, FILE@SHA256 (64 hex digits)")
        assert err.value.hint == f"e.g. {option} {example}@$(sha256sum {example} | cut -d' ' -f1)"


def test_workload_and_arrivals_name_both_digests_of_a_changed_file(tmp_path: Path) -> None:
    from sparkctl.qa.protocols import load_schedule

    path, digest = _write(tmp_path, GOOD)
    actual = hashlib.sha256(path.read_bytes()).hexdigest()
    for option, load, noun in (("--workload", load_pinned, "workload file"),
                               ("--arrivals", load_schedule, "schedule")):
        with pytest.raises(InputError) as err:
            load(f"{path}@{'0' * 64}")
        assert err.value.message == f"{option} {path}: sha256 {actual} does not match the pinned {'0' * 64}"
        assert err.value.hint == f"the {noun} changed since it was pinned; check it, then pin the new digest"
    assert digest == actual
