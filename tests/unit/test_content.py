"""Where the Ansible content and sparkctl's state live: clone vs installed wheel, state directory,
pinned collections installed on first use, and the simulator wheel made from an installed copy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from sparkctl import __version__
from sparkctl.ansible import content, runner

REPO = Path(__file__).resolve().parents[2]
BUILD_WHEEL = REPO / "roles" / "spark_runtime" / "files" / "build_wheel.py"
INSTALL = REPO / "collections" / "install.py"


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for var in ("SPARKCTL_STATE_DIR", "SPARKCTL_RUNS_DIR", "XDG_STATE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path


def test_a_clone_uses_its_top_level_content() -> None:
    assert content.root() == REPO
    assert content.playbook_dir() == REPO / "playbooks"
    assert content.ansible_cfg() == REPO / "ansible.cfg"


def test_an_installed_copy_uses_its_packaged_content(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pkg = tmp_path / "site" / "sparkctl"
    (pkg / "_content" / "playbooks").mkdir(parents=True)
    (pkg / "_content" / "ansible.cfg").write_text("[defaults]\n")
    monkeypatch.setattr(content.resources, "files", lambda name: pkg)
    assert content.root() == pkg / "_content"
    assert content.ansible_cfg() == pkg / "_content" / "ansible.cfg"


def test_no_content_anywhere_is_one_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(content.resources, "files", lambda name: tmp_path / "pkg")
    monkeypatch.setattr(content, "_repository", lambda: tmp_path / "nowhere")
    with pytest.raises(content.SparkctlError, match=r"Ansible content .* missing") as info:
        content.root()
    assert info.value.exit_code == 2


def test_state_goes_to_the_per_user_state_dir_by_default(clean_env: Path) -> None:
    assert content.state_dir() == clean_env / "home" / ".local" / "state" / "sparkctl"
    assert content.runs_dir() == content.state_dir() / "runs"


def test_state_dir_honours_xdg_and_the_override(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(clean_env / "xdg"))
    assert content.state_dir() == clean_env / "xdg" / "sparkctl"
    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(clean_env / "site-state"))
    assert content.state_dir() == clean_env / "site-state"
    monkeypatch.setenv("SPARKCTL_RUNS_DIR", str(clean_env / "runs-here"))
    assert content.runs_dir() == clean_env / "runs-here"


def test_run_records_never_land_in_the_source_tree(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(clean_env / "state"))
    run_dir = runner.new_run_dir("provision")
    assert run_dir.parent == clean_env / "state" / "runs"
    assert not (REPO / ".sparkctl" / "runs" / run_dir.name).exists()
    env = runner.run_environment(run_dir, run_dir / "cp")
    # Roles find the state directory (wheel cache, switch backups) through the environment.
    assert env["SPARKCTL_STATE_DIR"] == str(clean_env / "state")
    assert env["ANSIBLE_CONFIG"] == str(REPO / "ansible.cfg")
    assert env["ANSIBLE_COLLECTIONS_PATH"].split(os.pathsep) == [
        str(REPO / "collections"), str(clean_env / "state" / "collections")
    ]


def _bundle(path: Path, versions: dict[str, str]) -> None:
    """A stand-in for the `ansible` wheel: just the MANIFEST.json of each collection."""
    with zipfile.ZipFile(path, "w") as zf:
        for name, version in versions.items():
            ns, coll = name.split(".")
            doc = {"collection_info": {"namespace": ns, "name": coll, "version": version}}
            zf.writestr(f"ansible_collections/{ns}/{coll}/MANIFEST.json", json.dumps(doc))
            zf.writestr(f"ansible_collections/{ns}/{coll}/plugins/README.md", "x\n")


def _pinned() -> dict[str, str]:
    doc = yaml.safe_load((REPO / "collections" / "requirements.yml").read_text())
    return {c["name"]: str(c["version"]) for c in doc["collections"]}


def test_install_script_puts_collections_where_it_is_told(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    _bundle(cache / "ansible-12.3.0-py3-none-any.whl", _pinned())
    dest = tmp_path / "state" / "collections"
    dest.mkdir(parents=True)
    proc = subprocess.run(
        [sys.executable, str(INSTALL), "--dest", str(dest), "--cache", str(cache)],
        capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name, version in _pinned().items():
        ns, coll = name.split(".")
        manifest = json.loads((dest / "ansible_collections" / ns / coll / "MANIFEST.json").read_text())
        assert manifest["collection_info"]["version"] == version
    check = subprocess.run([sys.executable, str(INSTALL), "--dest", str(dest), "--check"],
                           capture_output=True, text=True, check=False)
    assert check.returncode == 0 and "present" in check.stdout


def test_missing_collections_are_installed_into_the_state_dir(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = clean_env / "state"
    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(state))
    # An installed copy: content without installed collections.
    root = clean_env / "content"
    (root / "collections").mkdir(parents=True)
    (root / "collections" / "requirements.yml").write_text(
        (REPO / "collections" / "requirements.yml").read_text())
    monkeypatch.setattr(content, "root", lambda: root)
    assert content.missing_collections() == _pinned()
    calls: list[list[str]] = []

    def fake_install(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        calls.append(cmd)
        dest = Path(cmd[cmd.index("--dest") + 1])
        for name, version in _pinned().items():
            ns, coll = name.split(".")
            d = dest / "ansible_collections" / ns / coll
            d.mkdir(parents=True)
            (d / "MANIFEST.json").write_text(json.dumps({"collection_info": {"version": version}}))
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(content.subprocess, "run", fake_install)
    assert content.ensure_collections() is None
    assert len(calls) == 1
    assert calls[0][calls[0].index("--dest") + 1] == str(state / "collections")
    assert content.missing_collections() == {}
    assert content.ensure_collections() is None and len(calls) == 1  # present: nothing runs


def test_a_failed_collection_install_is_reported_not_fatal(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(clean_env / "state"))
    root = clean_env / "content"
    (root / "collections").mkdir(parents=True)
    (root / "collections" / "requirements.yml").write_text(
        "collections:\n  - {name: a.b, version: '1.0.0'}\n")
    monkeypatch.setattr(content, "root", lambda: root)
    monkeypatch.setattr(content.subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(
        cmd, 1, "", "ERROR: No matching distribution found for ansible==12.3.0\n"))
    msg = content.ensure_collections()
    assert msg is not None and "a.b 1.0.0" in msg and "No matching distribution" in msg


def test_simulator_wheel_from_an_installed_copy(tmp_path: Path) -> None:
    """Without a source tree (--src is the packaged content), the wheel is made from the installed
    simulator: it unpacks with zipfile alone and the entry point imports with the standard library."""
    packaged = tmp_path / "_content"
    packaged.mkdir()
    out = tmp_path / "wheels"
    proc = subprocess.run([sys.executable, str(BUILD_WHEEL), "--src", str(packaged), "--out", str(out)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    desc = json.loads(proc.stdout)
    assert desc["entry"] == "sparkctl_sim.rank:main" and len(desc["hash"]) == 16
    again = subprocess.run([sys.executable, str(BUILD_WHEEL), "--src", str(packaged), "--out", str(out)],
                           capture_output=True, text=True, check=True)
    assert json.loads(again.stdout) == desc  # cached by content
    unpacked = tmp_path / "node"
    with zipfile.ZipFile(desc["wheel"]) as zf:
        names = zf.namelist()
        zf.extractall(unpacked)
    assert any(n.endswith(".dist-info/entry_points.txt") for n in names)
    assert not any(n.startswith(("sparkctl/", "sparkctl_lab/")) for n in names)
    probe = subprocess.run([sys.executable, "-S", "-c", "import sparkctl_sim.rank"],
                           env={"PYTHONPATH": str(unpacked)}, capture_output=True, text=True, check=False)
    assert probe.returncode == 0, probe.stderr


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_simulator_wheel_from_a_source_tree_holds_the_simulator_and_never_writes_the_tree(
        tmp_path: Path) -> None:
    """From a checkout, the wheel is assembled from sparkctl_sim/ alone (what a node imports), with
    no build backend: the checkout gets no build/ or *.egg-info, four provisions building at once
    (two sites from one checkout) all get a whole wheel, and the same sources give the same bytes."""
    import shutil

    src = tmp_path / "checkout"
    (src / "sparkctl").mkdir(parents=True)
    shutil.copy(REPO / "pyproject.toml", src / "pyproject.toml")
    shutil.copy(REPO / "sparkctl" / "__init__.py", src / "sparkctl" / "__init__.py")
    shutil.copytree(REPO / "sparkctl_sim", src / "sparkctl_sim",
                    ignore=shutil.ignore_patterns("__pycache__"))
    before = _tree(src)
    builds = [subprocess.Popen([sys.executable, str(BUILD_WHEEL), "--src", str(src), "--out",
                                str(tmp_path / f"state{i}")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True) for i in range(4)]
    done = [(b.wait(120), *b.communicate()) for b in builds]
    assert [rc for rc, _, _ in done] == [0] * 4, [err for _, _, err in done]
    descs = [json.loads(out) for _, out, _ in done]
    assert _tree(src) == before  # nothing written into the checkout
    assert {d["entry"] for d in descs} == {"sparkctl_sim.rank:main"}
    assert len({d["hash"] for d in descs}) == 1
    assert len({Path(d["wheel"]).read_bytes() for d in descs}) == 1  # reproducible
    with zipfile.ZipFile(descs[0]["wheel"]) as zf:
        names = zf.namelist()
        zf.extractall(tmp_path / "node")
    assert {n.split("/")[0] for n in names} == {"sparkctl_sim", f"sparkctl_dgx-{__version__}.dist-info"}
    assert sorted(n for n in names if n.startswith("sparkctl_sim/")) == sorted(
        f"sparkctl_sim/{k.split('sparkctl_sim/', 1)[1]}" for k in before if k.startswith("sparkctl_sim/"))
    probe = subprocess.run([sys.executable, "-S", "-c", "import sparkctl_sim.rank"],
                           env={"PYTHONPATH": str(tmp_path / "node")}, capture_output=True, text=True,
                           check=False)
    assert probe.returncode == 0, probe.stderr
    again = subprocess.run([sys.executable, str(BUILD_WHEEL), "--src", str(src), "--out",
                            str(tmp_path / "state0")], capture_output=True, text=True, check=True)
    assert json.loads(again.stdout) == descs[0]  # cached by the sources' hash
