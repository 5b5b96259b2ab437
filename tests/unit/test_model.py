"""The example inventory loads into the typed cluster with the right values."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path, PurePosixPath

import pytest
import yaml
from support.pair_site import make_switchless_pair

from sparkctl.errors import EXIT_USAGE, InputError
from sparkctl.model import Cluster, load_inventory

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "inventory" / "example"
IMAGE = "lmsysorg/sglang@sha256:" + "3f" * 32
# m1-1m needs Mia's image: built on the head from Mia's repository (the kit, only the build context).
M1_RUNTIME = {"kind": "container", "image_source": "build", "image": "dsv41-4x-spark:local"}
M1_KIT = {"source": "git", "url": "https://github.com/MiaAI-Lab/DeepSeek-v4.1-Flash-DGX-Sparks.git",
          "commit": "e0985205caea5a3afd43e88bebb076eeefdec8b5"}


@pytest.fixture(scope="module")
def example() -> Cluster:
    return load_inventory(EXAMPLE)


def _edit(path: Path, **changes: object) -> None:
    doc = yaml.safe_load(path.read_text())
    doc.update(changes)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def test_example_site_values(example: Cluster) -> None:
    assert example.name == "example"
    assert example.inventory_dir == EXAMPLE
    assert example.ssh_user == "operator"
    assert example.known_hosts == EXAMPLE.absolute() / "known_hosts"  # read from the inventory directory
    assert example.runtime.kind == "container"
    assert (example.runtime.image, example.runtime.image_source) == ("deepseek-v41-sglang4:tp4-nvme", "build")
    assert example.runtime.allow_mutable_tag is False
    assert example.kit is not None and (example.kit.source, example.kit.on) == ("git", "controller")
    assert example.kit.commit == "25e7cb82f6524e3bbc46db6a9a54125e75e36d0e"
    assert example.mgmt.subnet == IPv4Network("192.168.7.0/24")
    assert example.mgmt.interface == "enP7s7"
    assert example.fabric.subnets == [IPv4Network("10.77.0.0/24"), IPv4Network("10.77.1.0/24")]
    assert (example.fabric.mtu, example.fabric.host_qos, example.fabric.bootstrap_over) == (
        9000,
        True,
        "fabric",
    )
    assert (example.ports.dist_init, example.ports.api, example.ports.nccl_test) == (29649, 8004, 29659)
    assert example.api_allow == [IPv4Network("192.168.7.0/24")]
    assert example.paths.model_dir == PurePosixPath("/mnt/nvme/models/DeepSeek-V4.1-Flash")
    assert example.paths.nvme_mount == PurePosixPath("/mnt/nvme")
    assert example.checkpoint.source == "hf"
    assert example.checkpoint.revision is not None and len(example.checkpoint.revision) == 40
    assert example.checkpoint.size_gib == 476
    assert example.checkpoint.on is None
    assert example.secrets["api_key"].env == "SPARKCTL_API_KEY"


def test_example_nodes_sorted_by_rank_with_both_pcie_halves(example: Cluster) -> None:
    assert [(n.name, n.rank) for n in example.nodes] == [(f"spark-{i}", i) for i in range(4)]
    assert example.head.name == "spark-0" and example.head.is_head
    assert [n.name for n in example.workers] == ["spark-1", "spark-2", "spark-3"]
    n2 = example.node("spark-2")
    assert n2.mgmt_ip == IPv4Address("192.168.7.12")
    assert n2.fabric_ip == IPv4Address("10.77.0.12")
    assert [(p.netdev, p.hca, str(p.address)) for p in n2.fabric_ports] == [
        ("enp1s0f0np0", "rocep1s0f0", "10.77.0.12/24"),
        ("enP2p1s0f0np0", "roceP2p1s0f0", "10.77.1.12/24"),
    ]
    assert n2.nvme_gib == 3600
    assert n2.hostvars["ansible_host"] == "192.168.7.12"  # its own, with the site's connection keys
    assert n2.hostvars["ansible_user"] == "operator"
    assert example.bootstrap_ips["spark-3"] == IPv4Address("10.77.0.13")


def test_example_switch(example: Cluster) -> None:
    sw = example.switch
    assert sw is not None
    assert (sw.name, sw.host, sw.type, sw.mtu, sw.l2mtu) == ("crs812", "192.168.7.2", "routeros", 9216, 9216)
    assert sw.ports["spark-3"] == {"enp1s0f0np0": "qsfp56-dd-4-1", "enP2p1s0f0np0": "qsfp56-dd-4-1"}
    assert sw.hostvars["ansible_network_os"] == "community.routeros.routeros"


def test_example_profile_and_memory_note(example: Cluster) -> None:
    prof = example.profile
    assert prof.name == "r4-nvme"
    assert prof.args["--tp-size"] == 4 and prof.args["--context-length"] == 1_000_000
    # r4-nvme's 2,048-token chunks at 1M exceed the ~24 GiB outside the 0.80 pool (reference E.4);
    # it fits only thanks to the pin's headroom, which validate reports as a note.
    assert len(example.warnings) == 1
    assert "26.70 GiB exceeds the 24.34 GiB outside the static pool" in example.warnings[0]


def test_unknown_node_name_is_input_error(example: Cluster) -> None:
    with pytest.raises(InputError) as err:
        example.node("spark-9")
    assert "spark-0, spark-1, spark-2, spark-3" in (err.value.hint or "")


def test_m1_profile_passes_without_a_note(example_copy: Path) -> None:
    _edit(example_copy / "group_vars/all/sparkctl.yml", sparkctl_profile="m1-1m", sparkctl_kit=M1_KIT,
          sparkctl_runtime=M1_RUNTIME)
    cluster = load_inventory(example_copy)
    assert cluster.profile.name == "m1-1m"
    assert cluster.profile.args["--context-length"] == 1_048_576
    assert cluster.profile.max_total_tokens == 8_000_000
    assert cluster.warnings == []


def test_lab_runtime_needs_no_image(example_copy: Path) -> None:
    path = example_copy / "group_vars/all/sparkctl.yml"
    _edit(path, sparkctl_profile="lab", sparkctl_runtime={"kind": "lab"}, sparkctl_kit=None)
    cluster = load_inventory(example_copy)
    assert cluster.runtime.kind == "lab" and cluster.runtime.image is None
    assert cluster.profile.simulator is not None


def test_mutable_tag_allowed_when_asked(example_copy: Path) -> None:
    _edit(
        example_copy / "group_vars/all/sparkctl.yml",
        sparkctl_runtime={"kind": "container", "image": "lmsysorg/sglang:dev", "allow_mutable_tag": True},
    )
    assert load_inventory(example_copy).runtime.image == "lmsysorg/sglang:dev"


def test_bootstrap_over_mgmt(example_copy: Path) -> None:
    path = example_copy / "group_vars/all/sparkctl.yml"
    fabric = yaml.safe_load(path.read_text())["sparkctl_fabric"]
    _edit(path, sparkctl_fabric={**fabric, "bootstrap_over": "mgmt"})
    cluster = load_inventory(example_copy)
    assert cluster.bootstrap_ips["spark-1"] == IPv4Address("192.168.7.11")


def test_switchless_site(example_copy: Path) -> None:
    make_switchless_pair(example_copy)  # four nodes would need a switch
    assert load_inventory(example_copy).switch is None


def test_variable_precedence_follows_ansible(example_copy: Path) -> None:
    # group_vars/all < group_vars/sparks < host entry < host_vars
    _edit(example_copy / "group_vars/all/sparkctl.yml", sparkctl_nvme_gib=1000)
    hosts = example_copy / "hosts.yml"
    doc = yaml.safe_load(hosts.read_text())
    for host in doc["all"]["children"]["sparks"]["hosts"].values():
        del host["sparkctl_nvme_gib"]
    doc["all"]["children"]["sparks"]["hosts"]["spark-1"]["sparkctl_nvme_gib"] = 3000
    hosts.write_text(yaml.safe_dump(doc))
    (example_copy / "group_vars/sparks.yml").write_text("sparkctl_nvme_gib: 2000\n")
    (example_copy / "host_vars/spark-2").mkdir(parents=True)
    (example_copy / "host_vars/spark-2/disk.yml").write_text("sparkctl_nvme_gib: 4000\n")
    cluster = load_inventory(example_copy)
    assert [n.nvme_gib for n in cluster.nodes] == [2000, 3000, 4000, 2000]


def test_group_vars_all_as_one_file(example_copy: Path) -> None:
    folder = example_copy / "group_vars/all"
    shutil.move(folder / "sparkctl.yml", example_copy / "group_vars/all.yml")
    folder.rmdir()
    assert load_inventory(example_copy).name == "example"


def test_site_vars_in_hosts_file_are_overridden_by_group_vars(example_copy: Path) -> None:
    hosts = example_copy / "hosts.yml"
    doc = yaml.safe_load(hosts.read_text())
    doc["all"]["vars"]["sparkctl_cluster_name"] = "from-hosts-file"
    hosts.write_text(yaml.safe_dump(doc))
    assert load_inventory(example_copy).name == "example"


def test_secret_from_environment(example_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _edit(
        example_copy / "group_vars/all/sparkctl.yml",
        sparkctl_secrets={"api_key": {"env": "SPARKCTL_TEST_KEY"}},
    )
    ref = load_inventory(example_copy).secrets["api_key"]
    monkeypatch.delenv("SPARKCTL_TEST_KEY", raising=False)
    with pytest.raises(InputError, match="SPARKCTL_TEST_KEY is not set"):
        ref.resolve()
    monkeypatch.setenv("SPARKCTL_TEST_KEY", "from-env")
    assert ref.resolve() == "from-env"
    assert ref.describe() == "env:SPARKCTL_TEST_KEY"


def test_secret_from_file_relative_to_the_inventory(example_copy: Path) -> None:
    (example_copy / "api.key").write_text("s3cret\n")
    _edit(example_copy / "group_vars/all/sparkctl.yml", sparkctl_secrets={"api_key": {"file": "api.key"}})
    ref = load_inventory(example_copy).secrets["api_key"]
    assert ref.resolve() == "s3cret"
    assert ref.describe() == "file:api.key"
    (example_copy / "api.key").write_text("")
    with pytest.raises(InputError, match="is empty"):
        ref.resolve()
    (example_copy / "api.key").unlink()
    with pytest.raises(InputError, match="cannot be read"):
        ref.resolve()


def test_secrets_never_in_the_model_dump(example: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKCTL_API_KEY", "do-not-leak")
    assert "do-not-leak" not in example.model_dump_json()


@pytest.mark.parametrize("where", ["missing", "file"])
def test_inventory_path_must_be_a_directory(tmp_path: Path, where: str) -> None:
    target = tmp_path / "inv"
    if where == "file":
        target.write_text("")
    with pytest.raises(InputError) as err:
        load_inventory(target)
    assert err.value.exit_code == EXIT_USAGE
    assert str(target) in err.value.message


def test_problems_are_listed_together_with_paths(example_copy: Path) -> None:
    path = example_copy / "group_vars/all/sparkctl.yml"
    doc = yaml.safe_load(path.read_text())
    doc["sparkctl_ports"]["api"] = 22
    doc["sparkctl_fabric"]["mtu"] = 1500
    doc["sparkctl_paths"]["run_dir"] = "run"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(InputError) as err:
        load_inventory(example_copy)
    assert err.value.message.endswith("has 3 problems; nothing was contacted")
    assert sorted(d.split(":")[0] for d in err.value.details) == [
        "sparkctl_fabric.mtu",
        "sparkctl_paths.run_dir",
        "sparkctl_ports.api",
    ]


def test_million_context_refusal_shows_the_arithmetic(example_copy: Path) -> None:
    _edit(
        example_copy / "group_vars/all/sparkctl.yml",
        sparkctl_profile="m1-1m",
        sparkctl_profile_overrides={"args": {"--chunked-prefill-size": 4096}},
        sparkctl_kit=M1_KIT,
        sparkctl_runtime=M1_RUNTIME,
    )
    with pytest.raises(InputError) as err:
        load_inventory(example_copy)
    (line,) = err.value.details
    assert line.startswith("sparkctl_profile_overrides.args.--chunked-prefill-size: ")
    # 14 B x 4,096 x 1,048,576 = 56 GiB against 121.7 - 2 - 79.5 - 12.45 = 27.75 GiB of room
    assert "= 56.00 GiB > 27.75 GiB" in line
    assert "--chunked-prefill-size 1024 or less" in line


def test_disk_budget_uses_the_checkpoint_size(example_copy: Path) -> None:
    path = example_copy / "group_vars/all/sparkctl.yml"
    doc = yaml.safe_load(path.read_text())
    doc["sparkctl_checkpoint"]["size_gib"] = 3545  # + 47.21 + 8 = 3600.21 > 3600
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(InputError) as err:
        load_inventory(example_copy)
    assert len(err.value.details) == 4
    assert all("= 3600.21 GiB" in d for d in err.value.details)
    del doc["sparkctl_checkpoint"]["size_gib"]  # unknown size: no disk check
    path.write_text(yaml.safe_dump(doc))
    assert load_inventory(example_copy).checkpoint.size_gib is None


def test_ansible_reads_the_same_hosts_and_vars() -> None:
    """The inventory stays a plain Ansible inventory: ansible-inventory agrees with the model."""
    exe = Path(sys.executable).with_name("ansible-inventory")
    if not exe.exists():
        pytest.skip("ansible-inventory not installed")
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}
    out = subprocess.run(
        [str(exe), "-i", str(EXAMPLE), "--list"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
        env=env,
    ).stdout
    doc = json.loads(out[out.index("{") :])
    hostvars = doc["_meta"]["hostvars"]
    cluster = load_inventory(EXAMPLE)
    assert sorted(doc["sparks"]["hosts"]) == [n.name for n in cluster.nodes]
    assert doc["switches"]["hosts"] == ["crs812"]
    for node in cluster.nodes:
        hv = hostvars[node.name]
        assert hv["ansible_host"] == str(node.mgmt_ip)
        assert hv["sparkctl_rank"] == node.rank
        assert hv["sparkctl_profile"] == cluster.profile.name
        assert [p["address"] for p in hv["sparkctl_fabric_ports"]] == [
            str(p.address) for p in node.fabric_ports
        ]
