"""The serving kit: tree digest, overlay manifest checks, staged-copy verification, the atomic
`current` switch (sparkctl.nodeside.kit), and the controller-side source (sparkctl.stage.kit) on a
real git repository made here: a branch refused, a missing commit refused, a tampered overlay named."""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest
from support.synth_kit import OVERLAYS, git, kit_repo, sha, write_kit

from sparkctl.nodeside import kit as nk
from sparkctl.stage import kit as sk


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return kit_repo(tmp_path / "kit-repo")


def prepare(repo: Path, cache: Path, commit: str, **kw: Any) -> dict[str, Any]:
    return sk.prepare("git", str(cache), url=str(repo), commit=commit, overlays=list(OVERLAYS), **kw)


# --- the tree digest ------------------------------------------------------------------------------


def test_tree_digest_is_sha256sum_of_the_sorted_file_list(tmp_path: Path) -> None:
    root = write_kit(tmp_path / "k")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: x\n")
    (root / ".sparkctl-manifest.json").write_text("{}")
    (root / "adapter" / "x.partial").write_text("half")
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*")
                   if p.is_file() and ".git" not in p.parts
                   and not p.name.startswith(".sparkctl-") and not p.name.endswith(".partial"))
    text = "".join(f"{sha((root / f).read_bytes())}  {f}\n" for f in files)
    digest, entries = nk.tree(root)
    assert digest == sha(text.encode()) == nk.tree_digest(root)
    assert [e["path"] for e in entries] == files
    assert nk.version_of("dir", None, digest) == "tree-" + digest[:16]
    with pytest.raises(nk.KitError, match="not a full 40-hex commit"):
        nk.version_of("git", "main", digest)


# --- the overlay manifest ---------------------------------------------------------------------------


def test_real_r4_manifest_shape_reads(tmp_path: Path) -> None:
    doc = {"python/sglang/srt/models/deepseek_v4.py": {"before_sha256": "1" * 64, "after_sha256": "7" * 64},
           "python/sglang/kernels/ops/attention/dsv4/indexer_postprocess.py":
               {"before_sha256": None, "after_sha256": "5" * 64}}
    (tmp_path / "m.json").write_text(json.dumps(doc))
    assert nk.read_overlay_manifest(str(tmp_path / "m.json")) == doc


@pytest.mark.parametrize(("doc", "words"), [
    ({}, "not an overlay manifest"),
    ({"../etc/passwd": {"after_sha256": "a" * 64}}, "unsafe"),
    ({"a.py": {"after_sha256": "A" * 64}}, "a.py: after_sha256"),
    ({"a.py": {"before_sha256": "xyz", "after_sha256": "a" * 64}}, "a.py: before_sha256 'xyz'"),
    ({"a.py": "deadbeef"}, "a.py: want an object"),
])
def test_bad_overlay_manifest_names_the_entry(tmp_path: Path, doc: dict, words: str) -> None:
    (tmp_path / "m.json").write_text(json.dumps(doc))
    with pytest.raises(nk.KitError, match=words.replace(".", r"\.").replace("(", r"\(")):
        nk.read_overlay_manifest(str(tmp_path / "m.json"))


def test_overlay_checks_name_file_and_digests(tmp_path: Path) -> None:
    root = write_kit(tmp_path / "k")
    doc, problems = nk.check_overlays(str(root), "patches/manifest.json", "patches/source", list(OVERLAYS))
    assert problems == [] and set(doc) == set(OVERLAYS)
    rel = "python/sglang/srt/models/deepseek_v4.py"
    (root / "patches" / "source" / rel).write_bytes(b"# after v4!\n")
    _, problems = nk.check_overlays(str(root), "patches/manifest.json", "patches/source",
                                    [*list(OVERLAYS)[1:], "python/extra.py"])
    lines = [nk.describe(p) for p in problems]
    assert lines == [
        f"patches/manifest.json: lists overlay {rel} that the profile does not declare",
        "patches/manifest.json: lacks overlay python/extra.py that the profile declares",
        f"patches/source/{rel}: overlay differs from the manifest's after_sha256 "
        f"(expected {sha(b'# after v4' + bytes([10]))}, actual {sha(b'# after v4!' + bytes([10]))})",
    ]


# --- a staged copy, and the current link ----------------------------------------------------------


def test_verify_tree_names_changed_missing_and_extra_files(tmp_path: Path) -> None:
    root = write_kit(tmp_path / "k")
    digest, files = nk.tree(root)
    expected = nk.file_manifest(digest, files, {"source": "dir"})
    assert nk.verify_tree(str(root), expected) == []
    (root / "adapter" / "sitecustomize.py").write_text("# adapter!\n")
    (root / "docker" / "Dockerfile").unlink()
    (root / "extra.txt").write_text("x")
    (root / ".sparkctl-manifest.json").write_text("{}")  # staging's own file: not the kit's
    got = {p["path"]: p for p in nk.verify_tree(str(root), expected)}
    assert set(got) == {"adapter/sitecustomize.py", "docker/Dockerfile", "extra.txt"}
    assert got["adapter/sitecustomize.py"]["expected"] == sha(b"# adapter\n")
    assert got["adapter/sitecustomize.py"]["actual"] == sha(b"# adapter!\n")
    assert got["docker/Dockerfile"]["problem"] == "missing" and got["docker/Dockerfile"]["actual"] is None
    (absent,) = nk.verify_tree(str(tmp_path / "absent"), expected)
    assert absent["problem"] == "kit version not staged on this node"


def test_switch_current_is_a_rename_of_a_fresh_link(tmp_path: Path) -> None:
    store = tmp_path / "kit"
    (store / "v1").mkdir(parents=True)
    (store / "v2").mkdir()
    assert nk.current_version(str(store)) is None
    assert nk.switch_current(str(store), "v1") is True
    assert os.readlink(store / "current") == "v1"
    assert nk.switch_current(str(store), "v1") is False
    inode = os.lstat(store / "current").st_ino
    assert nk.switch_current(str(store), "v2") is True
    assert os.readlink(store / "current") == "v2" and os.lstat(store / "current").st_ino != inode
    assert sorted(os.listdir(store)) == ["current", "v1", "v2"]
    with pytest.raises(nk.KitError, match="no such kit version"):
        nk.switch_current(str(store), "v3")
    assert nk.current_version(str(store)) == "v2"


def test_image_check_accepts_before_or_after() -> None:
    overlays = {rel: {"before_sha256": sha(b) if b is not None else None, "after_sha256": sha(a)}
                for rel, (b, a) in OVERLAYS.items()}
    rels = list(OVERLAYS)
    out = (f"{sha(b'# before v4' + bytes([10]))}  /sgl/{rels[0]}\n"
           f"{sha(b'# after nccl' + bytes([10]))}  /sgl/{rels[1]}\n")
    digests = nk.parse_sha256sum(out, "/sgl")
    assert nk.check_base(overlays, digests) == []
    digests[rels[2]] = "e" * 64
    digests[rels[0]] = "f" * 64
    lines = [nk.describe(p) for p in nk.check_base(overlays, digests)]
    assert lines == [
        f"{rels[2]}: image holds a file where the overlay adds a new one "
        f"(expected absent, actual {'e' * 64})",
        f"{rels[0]}: image file is neither the overlay's before nor after version "
        f"(expected {sha(b'# before v4' + bytes([10]))}, actual {'f' * 64})",
    ]


# --- the controller side: git, dir, tar -----------------------------------------------------------


def test_git_kit_fetched_once_exported_without_git(repo: Path, tmp_path: Path) -> None:
    commit = git(repo, "rev-parse", "HEAD")
    first = prepare(repo, tmp_path / "cache", commit)
    assert first["version"] == commit and first["changed"] is True
    tree_dir = Path(first["dir"])
    assert tree_dir == tmp_path / "cache" / "trees" / commit and not (tree_dir / ".git").exists()
    assert first["tree_sha256"] == nk.tree_digest(str(repo))  # .git excluded on both sides
    assert first["manifest"]["source"] == {"source": "git", "url": str(repo), "commit": commit,
                                           "tree_sha256": first["tree_sha256"]}
    assert set(first["overlays"]) == set(OVERLAYS)
    again = prepare(repo, tmp_path / "cache", commit, sha256=first["tree_sha256"])
    assert again["changed"] is False and again["manifest"]["files"] == first["manifest"]["files"]


def test_git_kit_older_commit_found_through_the_branches(repo: Path, tmp_path: Path) -> None:
    old = git(repo, "rev-parse", "HEAD")
    (repo / "adapter" / "more.py").write_text("# more\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "more")
    res = prepare(repo, tmp_path / "cache", old)
    assert res["version"] == old and "adapter/more.py" not in {f["path"] for f in res["manifest"]["files"]}


@pytest.mark.parametrize(("commit", "words"), [
    ("main", "'main' is a branch or tag name"),
    ("deadbeef", "'deadbeef' is an abbreviated commit"),
    ("", "'' is empty"),
])
def test_git_kit_refuses_a_moving_or_short_ref(repo: Path, tmp_path: Path, commit: str, words: str) -> None:
    with pytest.raises(sk.KitSourceError, match=words):
        prepare(repo, tmp_path / "cache", commit)
    assert not (tmp_path / "cache").exists()  # refused before anything was fetched


def test_git_kit_refuses_a_commit_the_repository_lacks(repo: Path, tmp_path: Path) -> None:
    with pytest.raises(sk.KitSourceError, match=f"{'0' * 40} does not exist in {repo}"):
        prepare(repo, tmp_path / "cache", "0" * 40)


def test_git_kit_unreachable_url_is_named(tmp_path: Path) -> None:
    with pytest.raises(sk.KitSourceError, match=f"cannot fetch the kit from {tmp_path}/nowhere"):
        sk.prepare("git", str(tmp_path / "cache"), url=str(tmp_path / "nowhere"), commit="1" * 40)


def test_git_kit_with_a_tampered_overlay_is_refused_naming_it(repo: Path, tmp_path: Path) -> None:
    rel = "python/sglang/srt/distributed/device_communicators/pynccl.py"
    (repo / "patches" / "source" / rel).write_bytes(b"# after nccl, edited\n")
    git(repo, "commit", "-qam", "edit an overlay without its manifest")
    commit = git(repo, "rev-parse", "HEAD")
    with pytest.raises(sk.KitSourceError) as err:
        prepare(repo, tmp_path / "cache", commit)
    msg = str(err.value)
    assert f"patches/source/{rel}: overlay differs from the manifest's after_sha256" in msg
    assert sha(b"# after nccl\n") in msg and sha(b"# after nccl, edited\n") in msg


def test_git_kit_whose_manifest_differs_from_the_profile(repo: Path, tmp_path: Path) -> None:
    commit = git(repo, "rev-parse", "HEAD")
    with pytest.raises(sk.KitSourceError, match=r"lists overlay \S+/deepseek_v4\.py that"):
        sk.prepare("git", str(tmp_path / "cache"), url=str(repo), commit=commit, overlays=list(OVERLAYS)[1:])


def test_tree_digest_pin_refuses_another_tree(repo: Path, tmp_path: Path) -> None:
    commit = git(repo, "rev-parse", "HEAD")
    with pytest.raises(sk.KitSourceError, match=f"differs from sparkctl_kit.sha256 {'a' * 64}"):
        prepare(repo, tmp_path / "cache", commit, sha256="a" * 64)


def test_verify_tree_reports_stray_partials_and_symbolic_links(tmp_path: Path) -> None:
    """What the container would mount besides the kit: a .partial left by an interrupted copy, a
    symbolic link (to a file, a directory, or out of the kit) — each one a named problem."""
    root = write_kit(tmp_path / "k")
    digest, files = nk.tree(root)
    expected = nk.file_manifest(digest, files, {"source": "dir"})
    (root / "adapter" / "sitecustomize.py.partial").write_text("half a file")
    (root / "weights.partial").mkdir()
    os.symlink("/etc/passwd", root / "adapter" / "passwd")
    os.symlink("adapter", root / "adapter-link")
    (root / ".sparkctl-stage.lock").write_text("1 2 spark-1\n")  # staging's own file: not a problem
    got = {p["path"]: p["problem"] for p in nk.verify_tree(str(root), expected)}
    assert got == {
        "adapter/sitecustomize.py.partial": "left by an interrupted copy (.partial): not part of the kit, "
                                            "but mounted into the container with it",
        "weights.partial": "left by an interrupted copy (.partial): not part of the kit, "
                           "but mounted into the container with it",
        "adapter/passwd": "symbolic link to /etc/passwd that the kit does not hold "
                          "(a kit is regular files only)",
        "adapter-link": "symbolic link to adapter that the kit does not hold (a kit is regular files only)",
    }
    store_check = nk.staged_check(str(tmp_path), "k", expected)
    assert store_check["count"] == 5  # the four above, and `current` pointing nowhere


def test_a_kit_with_a_symbolic_link_is_refused_naming_it(tmp_path: Path) -> None:
    """A link is never dropped on the way to the nodes: a dir or tar kit holding one is refused."""
    root = write_kit(tmp_path / "k")
    os.symlink("sitecustomize.py", root / "adapter" / "usercustomize.py")
    with pytest.raises(nk.KitError, match=r"the kit holds 1 symbolic link\(s\): "
                                          r"adapter/usercustomize\.py -> sitecustomize\.py; .* replace each"):
        sk.prepare("dir", str(tmp_path / "cache"), path=str(root), overlays=list(OVERLAYS))
    with tarfile.open(tmp_path / "k.tar", "w") as tf:
        tf.add(root, arcname=".")
    with pytest.raises(sk.KitSourceError, match=r"k\.tar: the kit holds 1 symbolic link\(s\): "
                                                r"\./adapter/usercustomize\.py -> sitecustomize\.py"):
        sk.prepare("tar", str(tmp_path / "cache"), path=str(tmp_path / "k.tar"), overlays=list(OVERLAYS))
    # A hard link is the same bytes under a second name: kept, as a regular file.
    (root / "adapter" / "usercustomize.py").unlink()
    os.link(root / "adapter" / "sitecustomize.py", root / "adapter" / "usercustomize.py")
    with tarfile.open(tmp_path / "h.tar", "w") as tf:
        tf.add(root, arcname=".")
    t = sk.prepare("tar", str(tmp_path / "cache"), path=str(tmp_path / "h.tar"), overlays=list(OVERLAYS))
    assert "adapter/usercustomize.py" in [f["path"] for f in t["manifest"]["files"]]
    assert (Path(t["dir"]) / "adapter" / "usercustomize.py").read_text() == "# adapter\n"


def test_dir_and_tar_kits_are_versioned_by_their_tree(tmp_path: Path) -> None:
    root = write_kit(tmp_path / "k")
    d = sk.prepare("dir", str(tmp_path / "cache"), path=str(root), overlays=list(OVERLAYS))
    assert d["version"] == "tree-" + d["tree_sha256"][:16] and d["dir"] == str(root)
    with tarfile.open(tmp_path / "k.tar", "w") as tf:
        tf.add(root, arcname=".")
    t = sk.prepare("tar", str(tmp_path / "cache"), path=str(tmp_path / "k.tar"), overlays=list(OVERLAYS))
    assert (t["version"], t["tree_sha256"], t["changed"]) == (d["version"], d["tree_sha256"], True)
    again = sk.prepare("tar", str(tmp_path / "cache"), path=str(tmp_path / "k.tar"), overlays=list(OVERLAYS))
    assert again["changed"] is False and again["dir"] == t["dir"]
    assert sorted(os.listdir(tmp_path / "cache" / "trees")) == [t["version"]]


def test_tar_kit_leaving_its_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "evil").write_text("x")
    with tarfile.open(tmp_path / "bad.tar", "w") as tf:
        tf.add(tmp_path / "evil", arcname="../evil")
    with pytest.raises(sk.KitSourceError, match=r"'\.\./evil' leaves the kit directory"):
        sk.prepare("tar", str(tmp_path / "cache"), path=str(tmp_path / "bad.tar"))
