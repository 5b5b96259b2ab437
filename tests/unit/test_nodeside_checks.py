"""The fast paths' node-side checks (sparkctl.nodeside.upcheck, .stagecheck) run here, in process, on
temporary directories; and the shipped script (sparkctl.nodeside.ship) answers what they answer."""

from __future__ import annotations

import hashlib
import hmac
import importlib
import json
import os
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from sparkctl.nodeside import ship, stagecheck, upcheck
from sparkctl.serve import fastup
from sparkctl.stage import dsv41en1, faststage
from sparkctl.stage import image as stage_image
from sparkctl.stage import manifest as mf

KEY = "ab" * 32


def _shipped(name: str) -> ModuleType:
    """What the node's loader gives by name, here: sparkctl's own module."""
    return importlib.import_module(f"sparkctl.{name}")


def _fake_systemctl(tmp: Path, monkeypatch: pytest.MonkeyPatch, answer: str) -> None:
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    tool = bin_dir / "systemctl"
    tool.write_text(f"#!/bin/sh\nprintf '{answer}'\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


class Image:
    """An image reader that says what it was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str | None, dict[str, str] | None]] = []

    def staged_answer(
        self, ref: str, want_id: str | None, build: dict[str, str] | None = None
    ) -> dict[str, Any]:
        self.asked.append((ref, want_id, build))
        return {"found": {"id": want_id}}


# --- upcheck -------------------------------------------------------------------------------------


def test_upcheck_reads_files_dirs_and_the_unit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_systemctl(tmp_path, monkeypatch, "NeedDaemonReload=no\\nLoadState=loaded\\n")
    unit = tmp_path / "rank.service"
    unit.write_text("[Service]\n")
    unit.chmod(0o640)
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    run_dir.chmod(0o700)
    image = Image()
    params = {"files": [str(unit), str(tmp_path / "absent.env")],
              "dirs": [str(run_dir), str(tmp_path / "no")], "unit": "rank.service", "hash_key": KEY,
              "image": {"ref": "eng:1", "want_id": "sha256:1"}}
    out = upcheck.check(params, image=image)
    assert out["mode"] == "upcheck" == upcheck.MODE
    st = out["files"][str(unit)]
    want = hmac.new(bytes.fromhex(KEY), b"[Service]\n", hashlib.sha256).hexdigest()
    assert (st["mode"], st["file"], st["dir"], st["digest"]) == ("0640", True, False, want)
    assert (st["uid"], st["gid"]) == (os.getuid(), os.getgid())
    assert out["files"][str(tmp_path / "absent.env")] is None
    assert out["dirs"][str(run_dir)]["mode"] == "0700" and out["dirs"][str(run_dir)]["dir"]
    assert out["dirs"][str(tmp_path / "no")] is None
    assert out["unit"] == {"NeedDaemonReload": "no", "LoadState": "loaded"}
    assert image.asked == [("eng:1", "sha256:1", None)] and out["image"] == {"found": {"id": "sha256:1"}}
    assert "kit" not in out


def test_upcheck_a_link_is_not_an_installed_file(tmp_path: Path) -> None:
    (tmp_path / "real").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    st = upcheck.stat(str(tmp_path / "link"))
    assert st is not None and not st["file"]


def test_upcheck_says_when_systemd_does_not_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    assert set(upcheck.unit_state("rank.service")) == {"error"}


def test_upcheck_main_prints_one_json_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    _fake_systemctl(tmp_path, monkeypatch, "LoadState=loaded\\n")
    upcheck.main({"files": [], "dirs": [], "unit": "u", "hash_key": KEY}, _shipped)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and json.loads(lines[0]) == {"mode": "upcheck", "files": {}, "dirs": {},
                                                         "unit": {"LoadState": "loaded"}}


# --- stagecheck ----------------------------------------------------------------------------------


class Shards:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.LAYERS = (1, 14)

    def check_rank(self, model_dir: str, engram_dir: str, rank: int, tp: int,
                   layers: tuple[int, ...] | list[int] = (), depth: str = "quick") -> Any:
        if self.fail:
            raise OSError("no such directory")
        assert (rank, tp, tuple(layers), depth) == (1, 4, (1, 14), "quick")
        return dsv41en1.RankResult(rank, tp, engram_dir, present=True, verified=False,
                                   problems=[f"p{i}" for i in range(60)])


def _checkpoint(root: Path) -> dict[str, Any]:
    root.mkdir()
    (root / "config.json").write_text("{}")
    (root / "model-00001.safetensors").write_bytes(b"\0" * 64)
    built = mf.build(str(root))
    mf.save(str(root), built)
    return {"files": [{k: e[k] for k in ("path", "size", "sha256")} for e in built["files"]]}


def test_stagecheck_weights_verified_extra_and_missing(tmp_path: Path) -> None:
    model = tmp_path / "model"
    expected = _checkpoint(model)
    w = {"model_dir": str(model), "expected": expected}
    assert stagecheck.weights(w, mf) == {"problems": [], "count": 0, "extra": []}
    (model / "stray.bin").write_text("x")
    (model / "config.json").write_text('{"changed": 1}')
    out = stagecheck.weights(w, mf)
    assert out["extra"] == ["stray.bin"] and out["count"] == len(out["problems"]) >= 1
    gone = stagecheck.weights({"model_dir": str(tmp_path / "none"), "expected": expected}, mf)
    assert gone["count"] == 2 and gone["extra"] == []


def test_stagecheck_a_part_that_cannot_be_read_answers_an_error(tmp_path: Path) -> None:
    model = tmp_path / "model"
    expected = _checkpoint(model)
    (model / mf.MANIFEST_NAME).write_text("not a manifest")
    assert set(stagecheck.weights({"model_dir": str(model), "expected": expected}, mf)) == {"error"}
    assert stagecheck.engram({"model_dir": "m", "engram_dir": "e", "rank": 1, "tp": 4},
                             Shards(fail=True)) == {"error": "no such directory"}


def test_stagecheck_answers_each_part_asked(tmp_path: Path) -> None:
    image = Image()
    e = {"model_dir": "m", "engram_dir": str(tmp_path), "rank": 1, "tp": 4}
    out = stagecheck.check({"image": {"ref": "eng:1", "want_id": None}, "engram": e}, image=image, mf=mf,
                           shards=Shards())
    assert set(out) == {"mode", "image", "engram"} and out["mode"] == "stagecheck"
    assert out["engram"]["problems"] == [f"p{i}" for i in range(stagecheck.LIMIT)]
    assert (out["engram"]["present"], out["engram"]["verified"]) == (True, False)
    assert stagecheck.check({}, image=image, mf=mf, shards=Shards()) == {"mode": "stagecheck"}


def test_the_real_stage_modules_are_what_the_checks_read() -> None:
    """The protocols hold for the modules the node is given (mypy checks these assignments)."""
    image: stagecheck.ImageReader = stage_image
    manifest: stagecheck.ManifestReader = mf
    shards: stagecheck.EngramReader = dsv41en1
    up_image: upcheck.ImageReader = stage_image
    assert (image, manifest, shards, up_image) == (_shipped("stage.image"), _shipped("stage.manifest"),
                                                   _shipped("stage.dsv41en1"), stage_image)


# --- shipped -------------------------------------------------------------------------------------


def _run(script: str) -> dict[str, Any]:
    proc = subprocess.run(["/bin/sh", "-s"], input=script, capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    doc: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return doc


def test_the_shipped_stage_check_answers_what_the_module_answers(tmp_path: Path) -> None:
    model = tmp_path / "model"
    w = {"model_dir": str(model), "expected": _checkpoint(model)}
    (model / "stray.bin").write_text("x")
    params = {"mode": "stagecheck", "weights": w}
    here = stagecheck.check(params, image=stage_image, mf=mf, shards=dsv41en1)
    assert _run(faststage.check_script(params)) == here


def test_the_shipped_up_check_answers_what_the_module_answers(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_systemctl(tmp_path, monkeypatch, "NeedDaemonReload=yes\\nLoadState=loaded\\n")
    (tmp_path / "f").write_text("text")
    params = {"mode": "upcheck", "files": [str(tmp_path / "f")], "dirs": [str(tmp_path)], "unit": "u",
              "hash_key": KEY}
    assert _run(fastup.check_script(params)) == upcheck.check(params, image=stage_image)


@pytest.mark.parametrize("modules", [fastup.NODE_MODULES, faststage.NODE_MODULES], ids=["up", "stage"])
def test_the_program_is_shipped_last_and_the_script_calls_it(modules: tuple[str, ...]) -> None:
    assert modules[-1] in ("nodeside.upcheck", "nodeside.stagecheck")
    script = ship.python_script(modules, {"mode": "x"}, "EOF")
    assert script.startswith("exec python3 - <<'EOF'\n")
    assert script.endswith('\nmain(json.loads("{\\"mode\\": \\"x\\"}"))\nEOF\n')  # the line gates_fakes reads
    assert f"shipped({modules[-1]!r}).main(params, shipped)" in script
    with pytest.raises(ValueError, match="end marker"):
        ship.python_script(modules, {"mode": "EOF"}, "EOF")
