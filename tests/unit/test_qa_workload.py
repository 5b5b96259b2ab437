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
        ("w.json", "not coding, prose, both or FILE@SHA256"),
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
