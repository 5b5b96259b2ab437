"""Renderer behaviour on inventory/example: what every rank gets, and what never leaks."""

from __future__ import annotations

import json
from ipaddress import IPv4Network
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.published import R4_PUBLISHED, split_flags

from sparkctl import render
from sparkctl.errors import InputError
from sparkctl.model import Runtime, load_inventory
from sparkctl.profiles import load_profile
from sparkctl.render import common, host, plan_document, rank, switch

EXAMPLE = Path(__file__).resolve().parents[2] / "inventory" / "example"


@pytest.fixture(scope="module")
def example() -> Any:
    return load_inventory(EXAMPLE)


def test_rank3_argv_and_env(example: Any) -> None:
    doc = plan_document(example)
    r3 = next(n for n in doc["nodes"] if n["rank"] == 3)
    argv = r3["rank_launch"]["argv"]
    flags = dict(split_flags(argv[2:]))
    assert argv[:2] == ["sglang", "serve"]
    assert flags["--node-rank"] == ["3"]
    assert flags["--nnodes"] == ["4"]
    assert flags["--dist-init-addr"] == ["10.77.0.10:29649"]  # the head's fabric address
    assert flags["--host"] == ["0.0.0.0"]
    assert flags["--min-free-slots-delay"] == ["1"]
    assert flags["--tp-size"] == ["4"] and flags["--ep-size"] == ["4"]
    env = r3["rank_launch"]["env"]
    assert env["NCCL_IB_HCA"] == "=rocep1s0f0:1,roceP2p1s0f0:1"
    assert env["SGLANG_HOST_IP"] == "10.77.0.13"
    assert env["NCCL_SOCKET_IFNAME"] == "=enp1s0f0np0"
    assert env["GLOO_SOCKET_IFNAME"] == "enp1s0f0np0"
    assert env["NCCL_IB_TC"] == "106"


def test_full_argv_is_profile_then_cluster_flags(example: Any) -> None:
    argv = rank.rank_argv(example, example.node("spark-2"))
    pairs = split_flags(argv[2:])
    assert pairs[0] == ("--model-path", ["/models/DeepSeek-V4.1-Flash"])
    assert pairs[1 : 1 + len(R4_PUBLISHED)] == R4_PUBLISHED
    assert pairs[1 + len(R4_PUBLISHED)] == ("--enable-metrics", [])  # the profile's own addition
    assert pairs[2 + len(R4_PUBLISHED) :] == [
        ("--nnodes", ["4"]),
        ("--node-rank", ["2"]),
        ("--dist-init-addr", ["10.77.0.10:29649"]),
        ("--host", ["0.0.0.0"]),
        ("--port", ["8004"]),
        ("--config", [common.RANK_SECRETS_FILE]),
    ]


def test_ranks_differ_only_in_node_rank(example: Any) -> None:
    argvs = [rank.rank_argv(example, n) for n in example.nodes]
    i = argvs[0].index("--node-rank") + 1
    for k, argv in enumerate(argvs):
        assert argv[i] == str(k)
        assert argv[:i] + argv[i + 1 :] == argvs[0][:i] + argvs[0][i + 1 :]
    envs = [rank.rank_env(example, n) for n in example.nodes]
    for env in envs:
        others = {k: v for k, v in env.items() if k != "SGLANG_HOST_IP"}
        assert others == {k: v for k, v in envs[0].items() if k != "SGLANG_HOST_IP"}


def test_secrets_never_rendered(example: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKCTL_API_KEY", "sk-never-in-plan-0123456789")
    text = json.dumps(plan_document(example))
    assert "sk-never-in-plan" not in text
    assert "--api-key" not in text
    node = plan_document(example, "spark-0")["nodes"][0]
    assert node["secret_files"] == [common.RANK_SECRETS_FILE]
    assert node["file_modes"][common.RANK_SECRETS_FILE] == "0600"
    assert node["file_modes"][common.RANK_ENV_FILE] == "0600"
    assert yaml.safe_load(node["files"][common.RANK_SECRETS_FILE]) == {"api-key": "<secret:api_key>"}


def test_no_secret_no_config_flag(example: Any) -> None:
    cluster = example.model_copy(update={"secrets": {}})
    argv = rank.rank_argv(cluster, cluster.head)
    assert "--config" not in argv
    assert common.RANK_SECRETS_FILE not in plan_document(cluster)["nodes"][0]["files"]


def test_container_invocation(example: Any) -> None:
    cmd = rank.container_command(example, example.node("spark-1"))
    words = " ".join(cmd)
    for part in (
        "--pull never", "--network host", "--ipc host", "--cap-add IPC_LOCK", "--ulimit memlock=-1",
        "--ulimit nofile=1048576:1048576", "--gpus all", "--device /dev/infiniband",
        f"--env-file {common.RANK_ENV_FILE}",
        "src=/mnt/nvme/models/DeepSeek-V4.1-Flash,dst=/models/DeepSeek-V4.1-Flash,readonly",
        "src=/mnt/nvme/engram-tp4,dst=/engram,readonly",
    ):
        assert part in words, part
    image = cmd[cmd.index("--entrypoint") + 2]
    assert image == example.runtime.image
    # With the kit mounted, the container runs the kit's pre-start checks, then the rank's argv.
    argv = rank.rank_argv(example, example.node("spark-1"))
    checks = rank.prestart_command(example, argv)
    assert cmd[cmd.index("--entrypoint") + 1] == checks[0] == "python3"
    assert cmd[cmd.index("--entrypoint") + 3 :] == [*checks[1:], *argv]


def test_container_invocation_without_a_kit_runs_the_engine_directly(example: Any) -> None:
    bare = example.model_copy(update={"kit": None})
    cmd = rank.container_command(bare, bare.node("spark-1"))
    i = cmd.index("--entrypoint")
    assert [cmd[i + 1], *cmd[i + 3 :]] == rank.rank_argv(bare, bare.node("spark-1"))
    assert not any(rank.CONTAINER_PRESTART in w for w in cmd)
    assert rank.rank_launch(bare, bare.node("spark-1")).as_json().get("prestart") is None


def test_lab_argv_differs_from_venv_only_in_program(example: Any) -> None:
    lab = example.model_copy(update={"runtime": Runtime(kind="lab")})
    venv = example.model_copy(update={"runtime": Runtime(kind="venv", venv_path="/opt/v")})
    node = example.node("spark-1")
    lab_argv, venv_argv = rank.rank_argv(lab, node), rank.rank_argv(venv, node)
    assert lab_argv[0] == "sparkctl-sim-rank" and venv_argv[0] == "/opt/v/bin/sglang"
    assert lab_argv[1:] == venv_argv[1:]
    assert rank.rank_env(lab, node)["DSV41_PACKED_DIR"] == "/mnt/nvme/engram-tp4"


def test_mgmt_bootstrap(example: Any) -> None:
    fabric = example.fabric.model_copy(update={"bootstrap_over": "mgmt"})
    cluster = example.model_copy(update={"fabric": fabric})
    node = cluster.node("spark-1")
    assert dict(split_flags(rank.rank_argv(cluster, node)[2:]))["--dist-init-addr"] == ["192.168.7.10:29649"]
    env = rank.rank_env(cluster, node)
    assert env["NCCL_SOCKET_IFNAME"] == "=enP7s7" and env["SGLANG_HOST_IP"] == "192.168.7.11"
    # RoCE still uses both fabric halves.
    assert env["NCCL_IB_HCA"] == "=rocep1s0f0:1,roceP2p1s0f0:1"
    assert "192.168.7.12" in host.firewall(cluster, node)


def test_host_qos_off(example: Any) -> None:
    cluster = example.model_copy(update={"fabric": example.fabric.model_copy(update={"host_qos": False})})
    entry = plan_document(cluster, "spark-0")["nodes"][0]
    assert "NCCL_IB_TC" not in entry["rank_launch"]["env"]
    assert common.QOS_SCRIPT not in entry["files"]
    assert common.QOS_UNIT_NAME not in entry["rank_launch"]["unit"]


def test_unit_has_no_restart_loop(example: Any) -> None:
    for node in example.nodes:
        unit = rank.rank_unit(example, node)
        assert "Restart=no" in unit and "Type=exec" in unit
        assert f"EnvironmentFile={common.RANK_ENV_FILE}" in unit
        assert "\n[Install]\n" not in unit


def test_netplan_fabric_only(example: Any) -> None:
    node = example.node("spark-0")
    doc = yaml.safe_load(host.netplan(example, node))
    eths = doc["network"]["ethernets"]
    assert set(eths) == {"enp1s0f0np0", "enP2p1s0f0np0"}
    assert example.mgmt.interface not in eths
    for cfg in eths.values():
        assert cfg["mtu"] == 9000 and "routes" not in cfg and "gateway4" not in cfg
    assert eths["enP2p1s0f0np0"]["addresses"] == ["10.77.1.10/24"]
    assert doc["network"]["renderer"] == "networkd"


def test_qos_numbers(example: Any) -> None:
    script = host.qos_script(example, example.head)
    assert "dscp-prio 26:3 48:6" in script and "prio-pfc all:off 3:on" in script
    assert "--pfc 0,0,0,1,0,0,0,0" in script and "echo 106 >" in script
    assert "enp1s0f0np0|enP2p1s0f0np0" in host.qos_link_hook(example, example.head)


def test_firewall_scopes(example: Any) -> None:
    nft = host.firewall(example, example.head)
    assert "elements = { 10.77.0.0/24, 10.77.1.0/24 }" in nft
    assert "elements = { 192.168.7.0/24 }" in nft  # admin_sources: the management subnet
    assert "ip saddr @admin_sources tcp dport 22 accept" in nft
    assert "ip saddr @api_clients tcp dport 8004 accept" in nft
    assert "policy drop" in nft
    assert nft.rstrip().endswith('include "/etc/sparkctl/firewall.d/*.nft"')


def test_firewall_allows_ssh_on_the_nodes_own_port_and_the_admin_sources(example: Any) -> None:
    head = example.head.model_copy(update={"hostvars": {**example.head.hostvars, "ansible_port": 2222}})
    mgmt = example.mgmt.model_copy(update={"admin_sources": [IPv4Network("100.64.0.0/10")]})
    nft = host.firewall(example.model_copy(update={"mgmt": mgmt}), head)
    assert "tcp dport 2222 accept" in nft and "tcp dport 22 " not in nft
    assert "elements = { 192.168.7.0/24, 100.64.0.0/10 }" in nft


def test_routeros_l2mtu_before_mtu(example: Any) -> None:
    rsc = switch.routeros(example)
    for port in ("qsfp56-dd-1-1", "qsfp56-dd-4-1"):
        assert rsc.index(f'set "{port}" l2mtu=9216') < rsc.index(f'set "{port}" mtu=9216')
        assert f'set "{port}" auto-negotiation=no speed=200G-baseCR4' in rsc
    assert rsc.count("add bridge=sparkctl-fabric") == 4  # both halves share one port
    assert "pfc=sparkctl-pfc3" in rsc and "ecn=yes" in rsc


def test_nvue_and_linux(example: Any) -> None:
    nvue_switch = example.switch.model_copy(update={"type": "nvue"})
    nv = switch.nvue(example.model_copy(update={"switch": nvue_switch}))
    assert "nv set qos roce mode lossless" in nv and "link mtu 9216" in nv
    sh = switch.linux(example)
    assert "ip link set dev qsfp56-dd-2-1 mtu 9216" in sh


def test_switchless(example: Any) -> None:
    doc = plan_document(example.model_copy(update={"switch": None}))
    assert doc["switch"] == {"type": "none", "config": ""}


def test_env_file_refuses_values_that_need_quotes() -> None:
    with pytest.raises(InputError, match="EXTRA"):
        common.env_file_text({"EXTRA": "a b"}, "t")


def test_systemd_words() -> None:
    assert common.systemd_word("50%") == "50%%"
    assert common.systemd_word("$HOME") == "$$HOME"
    assert common.systemd_word('{"a":1}') == '"{\\"a\\":1}"'
    assert common.systemd_word("a b") == '"a b"'


def test_profile_override_reaches_argv(example: Any) -> None:
    profile = load_profile("r4-nvme", {"args": {"--watchdog-timeout": 2400}})
    cluster = example.model_copy(update={"profile": profile})
    assert dict(split_flags(rank.rank_argv(cluster, cluster.head)[2:]))["--watchdog-timeout"] == ["2400"]


def test_unknown_node(example: Any) -> None:
    with pytest.raises(InputError, match="spark-9"):
        plan_document(example, "spark-9")


def test_rank_0_drains_for_the_profiles_time_and_down_waits_as_long(example: Any) -> None:
    assert example.profile.gates.drain_s == 75
    head = render.node_entry(example, example.head)["rank_launch"]
    assert head["drain_s"] == 75 and head["stop_timeout_s"] == 90
    gates = example.profile.gates.model_copy(update={"drain_s": 120})
    slow = example.model_copy(update={"profile": example.profile.model_copy(update={"gates": gates})})
    unit = rank.rank_unit(slow, slow.head)
    assert "TimeoutStopSec=135" in unit and "stop --time 120 " in unit
    # `down`'s default grace is that same value (roles/spark_rank/defaults/main.yml).
    defaults = (Path(__file__).resolve().parents[2] / "roles/spark_rank/defaults/main.yml").read_text()
    assert 'spark_rank_grace_s: "{{ spark_rank_launch.drain_s }}"' in defaults
