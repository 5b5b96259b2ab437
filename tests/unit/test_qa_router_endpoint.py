"""Which endpoint qualify and bench measure on a site of several serving groups: each group is its
own cluster (its rank 0); the whole site is its router's client port (sparkctl_router), or bad
input where there is no router or the groups serve under different names."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkctl.errors import EXIT_USAGE, InputError
from sparkctl.model import load_inventory
from sparkctl.qa import endpoint
from sparkctl.render import groups as rgroups

REPO = Path(__file__).resolve().parents[2]
TWO_GROUPS = REPO / "inventory" / "examples" / "switch-2xtp4"


def _site(tmp_path: Path, **changes: Any) -> Path:
    inv = tmp_path / "site"
    shutil.copytree(TWO_GROUPS, inv)
    path = inv / "group_vars/all/sparkctl.yml"
    doc = yaml.safe_load(path.read_text())
    for key, value in changes.items():
        if value is None:
            doc.pop(key, None)
        else:
            doc[key] = value
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return inv


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """What ``discover`` was asked (the root it talks to, the served name it expects)."""
    monkeypatch.setenv("SPARKCTL_API_KEY", "k-site")
    calls: list[dict[str, Any]] = []

    def discover(root: str, api_key: str = "", model: str | None = None, timeout: float = 10.0) -> Any:
        calls.append({"root": root, "api_key": api_key, "model": model})
        return endpoint.Endpoint(root=root, api_key=api_key, model=model or "", simulator=True)

    def check_models(root: str, api_key: str, model: str, timeout: float) -> None:
        calls.append({"root": root, "api_key": api_key, "model": model, "models": True})

    monkeypatch.setattr(endpoint, "discover", discover)
    monkeypatch.setattr(endpoint, "_check_models", check_models)
    return calls


def test_the_whole_site_is_measured_through_its_router(asked: list[dict[str, Any]]) -> None:
    cluster = load_inventory(TWO_GROUPS)
    found = endpoint.for_cluster(cluster)
    assert found.root == "http://192.168.7.10:8889"  # spark-0's management address, the client port
    model = endpoint.served_model_name(rgroups.view(cluster, cluster.groups[0]))
    assert found.model == model and found.api_key == "k-site"
    # What each group is comes from its own rank 0 (the gateway does not answer /server_info); the
    # router must list the model with the site's key (it requires it and passes it on).
    heads = [a["root"] for a in asked if "models" not in a]
    assert [h.rsplit(":", 1)[0] for h in heads] == ["http://192.168.7.10", "http://192.168.7.14"]
    assert [w.root for w in found.workers] == heads
    assert {"root": found.root, "api_key": "k-site", "model": model, "models": True} in asked


def test_each_group_is_measured_on_its_own_rank_0(asked: list[dict[str, Any]]) -> None:
    cluster = load_inventory(TWO_GROUPS)
    b = rgroups.view(cluster, cluster.groups[1])
    found = endpoint.for_cluster(b)
    assert found.root.startswith("http://192.168.7.14:")  # spark-4, group b's rank 0, not the router


def test_a_site_of_several_groups_without_a_router_has_no_one_endpoint(
        tmp_path: Path, asked: list[dict[str, Any]]) -> None:
    cluster = load_inventory(_site(tmp_path, sparkctl_router=None))
    with pytest.raises(InputError) as err:
        endpoint.for_cluster(cluster)
    assert err.value.exit_code == EXIT_USAGE
    assert "sparkctl_router" in str(err.value) and "(a, b)" in str(err.value)
    assert "--group" in (err.value.hint or "")
    assert asked == []


def test_groups_serving_under_different_names_are_not_measured_through_the_router(
        tmp_path: Path, asked: list[dict[str, Any]]) -> None:
    doc = yaml.safe_load((TWO_GROUPS / "group_vars/all/sparkctl.yml").read_text())
    groups = doc["sparkctl_groups"]
    groups[1]["profile_overrides"] = {"args": {"--served-model-name": "other-name"}}
    cluster = load_inventory(_site(tmp_path, sparkctl_groups=groups))
    with pytest.raises(InputError) as err:
        endpoint.for_router(cluster)
    assert err.value.exit_code == EXIT_USAGE
    assert "b: other-name" in str(err.value)
    assert asked == []


def test_a_group_measured_on_its_own_rank_0_has_no_router_in_front(asked: list[dict[str, Any]]) -> None:
    """The router sits on spark-0, in group a: group b measured on its own (``--group b``, or every
    group in turn) renders its plan, identity and /server_info check from its own nodes, without a
    router on a node outside them."""
    from sparkctl.render import plan_document
    from sparkctl.serve.groups import named_clusters

    cluster = load_inventory(TWO_GROUPS)
    assert cluster.router is not None and cluster.router.node == "spark-0"
    for names in (["b"], None):
        measured = named_clusters(cluster, names)
        assert [name for name, _ in measured] == (names or ["a", "b"])
        for name, group in measured:
            assert group.router is None, name
            doc = plan_document(group)  # the router's node is not in group b: this used to refuse
            assert {e["name"] for e in doc["nodes"]} == set(rgroups.group(cluster, str(name)).nodes)
            assert endpoint.for_cluster(group).root == f"http://{group.head.mgmt_ip}:{group.ports.api}"
