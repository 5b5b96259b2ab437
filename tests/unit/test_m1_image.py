"""m1-1m serves only Mia's image: `validate` refuses any other image source (naming the field), the
build refuses a Dockerfile on another base, the kit is only the build context (nothing of it is
mounted), and `preflight` refuses, per node, an image without the adapters' environment."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkctl.errors import EXIT_USAGE, InputError
from sparkctl.model import load_inventory
from sparkctl.profiles import load_profile
from sparkctl.render import kit, plan_document, rank
from sparkctl.serve import preflight
from sparkctl.serve.probe import NodeFacts, probe_params
from sparkctl.stage import image

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "inventory" / "example"
FAKE_DOCKER = REPO / "tests" / "fixtures" / "fake_docker.py"
MIA = "https://github.com/MiaAI-Lab/DeepSeek-v4.1-Flash-DGX-Sparks.git"
MIA_KIT = {"source": "git", "url": MIA, "commit": "e0985205caea5a3afd43e88bebb076eeefdec8b5"}
BUILD = {"kind": "container", "image_source": "build", "image": "dsv41-4x-spark:local"}
STOCK = "lmsysorg/sglang@sha256:" + "3f" * 32
BASE = load_profile("m1-1m").image.base  # type: ignore[union-attr]


def _site(tmp_path: Path, **changes: Any) -> Path:
    site = tmp_path / "site"
    shutil.copytree(EXAMPLE, site)
    path = site / "group_vars/all/sparkctl.yml"
    doc = yaml.safe_load(path.read_text())
    doc.update(sparkctl_profile="m1-1m", sparkctl_kit=MIA_KIT, sparkctl_runtime=BUILD)
    doc.update(changes)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return site


def _problems(site: Path) -> list[str]:
    with pytest.raises(InputError) as err:
        load_inventory(site)
    assert err.value.exit_code == EXIT_USAGE
    return err.value.details


def test_m1_built_from_mias_repository_is_valid(tmp_path: Path) -> None:
    cluster = load_inventory(_site(tmp_path))
    assert cluster.profile.image is not None and cluster.runtime.image_source == "build"


@pytest.mark.parametrize("runtime", [
    {"kind": "container", "image_source": "pull", "image": STOCK},
    {"kind": "container", "image_source": "archive", "image": "deepseek-v41-sglang4:tp4-nvme",
     "image_archive": "/srv/images/r4.tar.zst"},
])
def test_validate_refuses_a_stock_or_other_image_for_m1(tmp_path: Path, runtime: dict[str, Any]) -> None:
    (line,) = _problems(_site(tmp_path, sparkctl_runtime=runtime))
    assert line.startswith("sparkctl_runtime.image_source: ")
    assert "needs the image built from MiaAI-Lab/DeepSeek-v4.1-Flash-DGX-Sparks's Dockerfile" in line
    assert "Engram tables into unified memory" in line
    assert "set image_source: build with sparkctl_kit pinning MiaAI-Lab" in line
    assert "sparkctl_runtime.image_id" in line


def test_an_image_id_pin_of_mias_build_is_accepted(tmp_path: Path) -> None:
    runtime = {"kind": "container", "image_source": "pull",
               "image": "registry.example/dsv41@sha256:" + "4a" * 32, "image_id": "sha256:" + "37" * 32}
    assert load_inventory(_site(tmp_path, sparkctl_runtime=runtime)).runtime.image_id == "sha256:" + "37" * 32


def test_validate_refuses_building_another_publishers_kit_for_m1(tmp_path: Path) -> None:
    r4 = dict(MIA_KIT, url="https://github.com/rhys101/DeepSeek-V4.1-Flash-SGLang-DGX-Spark-4-NVMe.git")
    (line,) = _problems(_site(tmp_path, sparkctl_kit=r4))
    assert line.startswith("sparkctl_kit.url: ") and "another repository" in line


def test_validate_refuses_a_venv_for_m1(tmp_path: Path) -> None:
    lines = _problems(_site(tmp_path, sparkctl_kit=None,
                            sparkctl_runtime={"kind": "venv", "venv_path": "/opt/sparkctl/venv"}))
    assert any(ln.startswith("sparkctl_runtime.kind: venv: the profile m1-1m needs") for ln in lines), lines


def test_the_kit_is_only_the_build_context(tmp_path: Path) -> None:
    cluster = load_inventory(_site(tmp_path))
    facts = kit.kit_facts(cluster)
    assert facts is not None and (facts["dockerfile"], facts["base"]) == ("Dockerfile", BASE)
    assert "mount" not in facts and "overlays" not in facts
    cmd = " ".join(rank.container_command(cluster, cluster.node("spark-1")))
    assert kit.current(cluster) not in cmd and "/kit" not in cmd


# --- the build: Mia's Dockerfile on Mia's base only ---------------------------------------------


@pytest.fixture
def docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    state, root, bin_dir = tmp_path / "docker.json", tmp_path / "docker-root", tmp_path / "bin"
    root.mkdir()
    bin_dir.mkdir()
    (bin_dir / "docker").symlink_to(FAKE_DOCKER)
    base_image = {"sha256:" + "37" * 32: {"size": 4096, "tags": [BASE]}}
    state.write_text(json.dumps({"images": base_image, "root": str(root)}))
    monkeypatch.setenv("FAKE_DOCKER_STATE", str(state))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return state


def test_the_build_refuses_a_dockerfile_on_another_base(docker: Path, tmp_path: Path) -> None:
    ctx = tmp_path / "kit"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text("FROM lmsysorg/sglang:dev-dsv42\nWORKDIR /opt/dsv41\n")
    with pytest.raises(image.ImageError, match=r"spark-0: Dockerfile starts FROM lmsysorg/sglang:dev-dsv42, "
                                               r"not lmsysorg/sglang:dev-dsv41@sha256:3dbc3130.*image.base"):
        image.build("dsv41-4x-spark:local", str(ctx), "Dockerfile", "spark-0", base=BASE)
    (ctx / "Dockerfile").write_text(f"FROM {BASE}\nWORKDIR /opt/dsv41\n")
    built = image.build("dsv41-4x-spark:local", str(ctx), "Dockerfile", "spark-0", base=BASE)
    assert built["changed"]


def test_the_build_takes_the_published_tag_only_where_it_is_the_pinned_digest(
    docker: Path, tmp_path: Path
) -> None:
    """Mia's Dockerfile names the moving tag (FROM lmsysorg/sglang:dev-dsv41) and pins the digest in its
    docs and preflight: the build goes ahead when the node's tag is that digest, and names the node
    and the digest to load when the tag is another build."""
    tag = BASE.partition("@")[0]
    digest = "lmsysorg/sglang@" + BASE.partition("@")[2]
    ctx = tmp_path / "kit"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(f"FROM {tag}\nWORKDIR /opt/dsv41\n")
    state = json.loads(docker.read_text())
    state["images"]["sha256:" + "38" * 32] = {"size": 4096, "tags": [tag],
                                            "digests": ["lmsysorg/sglang@sha256:" + "81" * 32]}
    docker.write_text(json.dumps(state))
    with pytest.raises(image.ImageError, match=rf"spark-0: Dockerfile builds FROM {tag}, which is "
                                               rf"lmsysorg/sglang@sha256:8181.*not the pinned {digest}"):
        image.build("dsv41-4x-spark:local", str(ctx), "Dockerfile", "spark-0", base=BASE)
    state["images"]["sha256:" + "38" * 32]["digests"] = [digest]
    docker.write_text(json.dumps(state))
    assert image.build("dsv41-4x-spark:local", str(ctx), "Dockerfile", "spark-0", base=BASE)["changed"]


# --- preflight: the image on every node ------------------------------------------------------------


def _facts(cluster: Any, envs: dict[str, dict[str, str] | None]) -> dict[str, NodeFacts]:
    out = {}
    for node in cluster.nodes:
        data = {"host": node.name, "identity": "sha256:" + "37" * 32, "unit": {"active": "inactive"},
                "model": {"config": True, "safetensors": 48}, "mem": {"MemAvailable": 100 * 1024**3},
                "image_env": envs.get(node.name, {"PYTHONPATH": "/opt/dsv41/adapter", "PATH": "/usr/bin"})}
        out[node.name] = NodeFacts(node.name, node.rank, True, None, data)
    return out


def test_preflight_refuses_a_node_whose_image_is_not_mias(tmp_path: Path) -> None:
    cluster = load_inventory(_site(tmp_path))
    checks = preflight.preflight_checks(cluster, _facts(cluster, {"spark-2": {"PATH": "/usr/bin"}}))
    image_checks = {c.node: c for c in checks if c.name == "required image"}
    assert sorted(image_checks) == ["spark-0", "spark-1", "spark-2", "spark-3"]
    bad = [c for c in image_checks.values() if not c.ok]
    assert [c.node for c in bad] == ["spark-2"]
    assert "PYTHONPATH=<unset>, not PYTHONPATH=/opt/dsv41/adapter" in bad[0].detail
    assert "sparkctl stage image" in bad[0].detail


def test_preflight_asks_the_probe_for_the_image_environment_only_with_a_requirement(tmp_path: Path) -> None:

    cluster = load_inventory(_site(tmp_path))
    entry = plan_document(cluster)["nodes"][0]
    assert probe_params(cluster, entry, "preflight")["image_env"] is True
    r4 = load_inventory(EXAMPLE)
    assert "image_env" not in probe_params(r4, plan_document(r4)["nodes"][0], "preflight")


# --- the kit: Mia's repository as the build context ---------------------------------------------


def test_a_build_context_kit_needs_no_overlay_manifest(tmp_path: Path) -> None:
    from sparkctl.stage import kit as stage_kit

    tree = tmp_path / "mia"
    (tree / "adapter").mkdir(parents=True)
    (tree / "Dockerfile").write_text(f"FROM {BASE}\n")
    (tree / "adapter" / "row_store.cpp").write_text("// row store\n")
    res = stage_kit.prepare("dir", str(tmp_path / "cache"), path=str(tree), overlays=[])
    assert res["overlays"] == {} and "Dockerfile" in json.dumps(res["manifest"])
    # A profile that declares overlays still needs the manifest.
    with pytest.raises(stage_kit.KitSourceError, match=r"patches/manifest\.json"):
        stage_kit.prepare("dir", str(tmp_path / "cache"), path=str(tree), overlays=["python/x.py"])
