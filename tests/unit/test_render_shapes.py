"""The rank launch of the one-group shapes (TP3 on a triangle, TP8 on a switch, TP4 on a ring): the
rendered argv carries the group's size and each node's rank, the profile's padding and ring-only
environment reach every rank, and the rendezvous runs where the topology asks."""

from __future__ import annotations

from pathlib import Path

from sparkctl.model import load_inventory
from sparkctl.render.common import CONTAINER_ENGRAM_DIR
from sparkctl.render.rank import container_command, rank_argv, rank_env

EXAMPLES = Path(__file__).resolve().parents[2] / "inventory" / "examples"


def _flag(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_tp3_on_a_triangle_renders_three_ranks_padded_bootstrapped_over_management() -> None:
    cluster = load_inventory(EXAMPLES / "triangle-tp3")
    argv = rank_argv(cluster, cluster.node("spark-2"))
    flags = ("--tp-size", "--ep-size", "--nnodes", "--node-rank")
    assert [_flag(argv, f) for f in flags] == ["3", "3", "3", "2"]
    # A triangle's fabric addresses are each one cable's: the rendezvous is on the head's mgmt address.
    assert _flag(argv, "--dist-init-addr") == "192.168.7.10:29649"
    env = rank_env(cluster, cluster.node("spark-2"))
    assert env["DSV41_TP_PAD"] == "1"
    # Both physical ports (one per cable) are the rank's HCAs.
    assert env["NCCL_IB_HCA"] == "=rocep1s0f0:1,rocep1s0f1:1"


def test_tp8_on_a_switch_renders_eight_ranks() -> None:
    cluster = load_inventory(EXAMPLES / "switch-tp8")
    argv = rank_argv(cluster, cluster.node("spark-7"))
    flags = ("--tp-size", "--ep-size", "--nnodes", "--node-rank")
    assert [_flag(argv, f) for f in flags] == ["8", "4", "8", "7"]
    assert _flag(argv, "--dist-init-addr") == "10.77.0.10:29649"
    start = argv.index("--cuda-graph-bs-decode") + 1
    sizes = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 48, 64, 96, 128)
    assert argv[start:start + len(sizes)] == [str(n) for n in sizes]
    assert "OFFLOAD_MODE" not in rank_env(cluster, cluster.node("spark-7"))


def test_tp4_on_a_ring_runs_nccl_ring_only_on_every_rank() -> None:
    cluster = load_inventory(EXAMPLES / "ring-tp4")
    for node in cluster.nodes:
        env = rank_env(cluster, node)
        assert (env["NCCL_SWITCHLESS_RING_ONLY"], env["NCCL_ALGO"]) == ("1", "Ring")
        assert _flag(rank_argv(cluster, node), "--node-rank") == str(node.rank)


def _binds(cmd: list[str]) -> list[str]:
    return [cmd[i + 1] for i, a in enumerate(cmd) if a in ("-v", "--volume", "--mount")]


def test_resident_engram_mounts_no_engram_directory() -> None:
    # sg17-tp8 keeps its Engram tables in unified memory: stage packs nothing into paths.engram_dir
    # (and never creates it), so the rank's container must not bind it (Docker refuses a missing source).
    cluster = load_inventory(EXAMPLES / "switch-tp8")
    assert cluster.profile.engram == "resident" and cluster.runtime.kind == "container"
    for node in cluster.nodes:
        cmd = container_command(cluster, node)
        binds = _binds(cmd)
        assert binds, cmd
        assert not any(f"src={cluster.paths.engram_dir}," in b or f"dst={CONTAINER_ENGRAM_DIR}," in b
                       or b.endswith(f"dst={CONTAINER_ENGRAM_DIR}") for b in binds), binds
        assert not any(str(cluster.paths.engram_dir) in v for v in rank_env(cluster, node).values())
    # The same site with NVMe-packed Engram binds the directory read-only where the engine reads it.
    packed = cluster.model_copy(update={"profile": cluster.profile.model_copy(update={"engram": "nvme"})})
    binds = _binds(container_command(packed, packed.node("spark-0")))
    assert [b for b in binds if f"src={cluster.paths.engram_dir}," in b] == [
        f"type=bind,src={cluster.paths.engram_dir},dst={CONTAINER_ENGRAM_DIR},readonly"
    ]
