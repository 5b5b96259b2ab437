"""The all-reduce bandwidth script: size parsing, nccl-tests arithmetic, verdict, JSON shape, CLI.

The end-to-end runs use the Gloo backend on CPU tensors and need torch; where torch is absent
they are skipped and the pure tests still run.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.ports import free_port as _free_port

from sparkctl.qa import fabric
from sparkctl.qa import nccl_allreduce as na

SCRIPT = Path(na.__file__)
RECORDED = Path(__file__).resolve().parents[2] / "bench" / "nccl_allreduce_device"
HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed (pip install torch==2.13.0)")


# --- sizes ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4096", 4096),
        ("64K", 65536),
        ("16M", 16 << 20),
        ("1G", 1 << 30),
        ("2g", 2 << 30),
        ("1MiB", 1 << 20),
        ("8kb", 8192),
        (" 3 M ", 3 << 20),
    ],
)
def test_parse_size_binary_units(text: str, expected: int) -> None:
    assert na.parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "0", "0M", "1.5M", "-1M", "16T", "M", "1 MB2"])
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(na.UsageError, match="size"):
        na.parse_size(text)


def test_parse_sizes_sorted_distinct_whole_elements() -> None:
    assert na.parse_sizes("256M,1M,16M,1M") == [1 << 20, 16 << 20, 256 << 20]
    assert na.parse_sizes("7,1K", "bf16") == [6, 1024]  # 7 bytes -> three bf16 elements
    assert na.parse_sizes("6", "fp32") == [4]
    with pytest.raises(na.UsageError, match="smaller than one fp32 element"):
        na.parse_sizes("2", "fp32")
    with pytest.raises(na.UsageError, match="no size"):
        na.parse_sizes(" , ")


def test_human_size() -> None:
    assert [na.human_size(n) for n in (1 << 30, 3 << 20, 1024, 1000)] == ["1 GiB", "3 MiB", "1 KiB", "1000 B"]


# --- arithmetic ----------------------------------------------------------------------------------


def test_bus_factor_is_the_nccl_tests_one() -> None:
    assert na.bus_factor(2) == 1.0
    assert na.bus_factor(4) == 1.5
    assert na.bus_factor(8) == 1.75
    assert na.bus_factor(1) == 0.0
    with pytest.raises(ValueError):
        na.bus_factor(0)


def test_algbw_and_busbw() -> None:
    # 1 GB in 0.1 s is 10 GB/s algorithm bandwidth; four ranks move 1.5x that over the bus.
    assert na.algbw_gbps(1_000_000_000, 0.1) == pytest.approx(10.0)
    assert na.busbw_gbps(1_000_000_000, 0.1, 4) == pytest.approx(15.0)
    # The Spark figure: 22 GB/s busbw on four nodes is 1 GiB all-reduced in ~73 ms.
    t = (1 << 30) / (22e9 / 1.5)
    assert na.busbw_gbps(1 << 30, t, 4) == pytest.approx(22.0)
    with pytest.raises(ValueError):
        na.algbw_gbps(1, 0.0)


def test_summarize_takes_the_slowest_rank_then_the_median() -> None:
    per_rank = [[0.010, 0.020, 0.012], [0.011, 0.015, 0.030]]  # slowest per iteration: 11, 20, 30 ms
    row = na.summarize(1_000_000, 500_000, per_rank, correct=True)
    assert row["ms"] == pytest.approx(20.0)
    assert (row["ms_min"], row["ms_max"]) == (pytest.approx(11.0), pytest.approx(30.0))
    assert row["algbw_gbps"] == pytest.approx(0.05)
    assert row["busbw_gbps"] == pytest.approx(0.05)  # two ranks: factor 1
    assert row["correct"] is True and row["count"] == 500_000
    even = na.summarize(8, 2, [[1.0, 2.0, 3.0, 4.0]] * 4, correct=False)
    assert even["ms"] == pytest.approx(2500.0)
    assert even["busbw_gbps"] == pytest.approx(8 / 2.5 / 1e9 * 1.5, abs=1e-3)
    for bad in ([], [[0.1], [0.1, 0.2]], [[], []]):
        with pytest.raises(ValueError):
            na.summarize(8, 2, bad, correct=True)


# --- verdict -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("busbw", "status"),
    [
        (24.0, "ok"),
        (20.0, "ok"),
        (330.0, "ok"),
        (19.9, "slow"),
        (11.0, "slow"),
        (3.7, "slow"),
        (3.6, "misconfigured"),
        (3.0, "misconfigured"),
        (0.4, "misconfigured"),
        (0.0, "misconfigured"),
    ],
)
def test_verdict_thresholds(busbw: float, status: str) -> None:
    got, reason = na.verdict(busbw)
    assert got == status
    assert f"{busbw:.1f} GB/s" in reason


def test_verdict_reasons_point_at_the_cause() -> None:
    assert "NCCL_IB_HCA must list both PCIe halves" in na.verdict(3.1)[1]
    assert "one PCIe half" in na.verdict(11.0)[1]


def test_verdict_thresholds_are_parameters() -> None:
    assert na.verdict(15.0, expected_gbps=12.0)[0] == "ok"
    assert na.verdict(5.0, misconfigured_gbps=5.0)[0] == "misconfigured"
    assert na.verdict(5.0, misconfigured_gbps=3.0, misconfigured_margin=2.0)[0] == "misconfigured"
    for bad in (float("nan"), -1.0):
        with pytest.raises(ValueError):
            na.verdict(bad)


def test_the_fabric_verdict_is_the_scripts_verdict() -> None:
    # One set of thresholds: qa/fabric.py judges with the script's own verdict().
    assert fabric.nccl_verdict is na.verdict


# --- environment and document --------------------------------------------------------------------


def test_env_seen_and_mismatch() -> None:
    env = {
        "NCCL_IB_HCA": "rocep1s0f0,roceP2p1s0f0",
        "HOME": "/root",
        "TORCH_NCCL_BLOCKING_WAIT": "1",
        "GLOO_SOCKET_IFNAME": "enp1s0f0np0",
        "CUDA_VISIBLE_DEVICES": "0",
        "PATH": "/bin",
    }
    seen = na.env_seen(env)
    assert list(seen) == [
        "CUDA_VISIBLE_DEVICES",
        "GLOO_SOCKET_IFNAME",
        "NCCL_IB_HCA",
        "TORCH_NCCL_BLOCKING_WAIT",
    ]
    other = dict(seen, NCCL_IB_HCA="rocep1s0f0")
    other.pop("GLOO_SOCKET_IFNAME")
    assert na.env_mismatch([seen, seen, other]) == {
        "GLOO_SOCKET_IFNAME": {"0": "enp1s0f0np0", "1": "enp1s0f0np0", "2": None},
        "NCCL_IB_HCA": {"0": "rocep1s0f0,roceP2p1s0f0", "1": "rocep1s0f0,roceP2p1s0f0", "2": "rocep1s0f0"},
    }
    assert na.env_mismatch([seen, dict(seen)]) == {}


def _meta(world: int = 4) -> dict:
    return {
        "backend": "nccl",
        "world_size": world,
        "dtype": "bf16",
        "iters": 20,
        "warmup": 5,
        "torch_version": "2.9.1",
        "nccl_version": "2.28.9",
        "device": "NVIDIA GB10",
        "ranks": [
            {"rank": r, "host": f"spark-{r}", "device": "NVIDIA GB10", "local_rank": 0} for r in range(world)
        ],
        "env": {"NCCL_IB_HCA": "rocep1s0f0,roceP2p1s0f0"},
        "env_mismatch": {},
    }


def _rows(busbw_by_size: dict[int, float], world: int = 4, correct: bool = True) -> list[dict]:
    rows = []
    for nbytes, busbw in busbw_by_size.items():
        t = nbytes / (busbw / na.bus_factor(world) * 1e9)
        rows.append(na.summarize(nbytes, nbytes // 2, [[t] * 3] * world, correct))
    return rows


def test_document_shape_peak_and_verdict() -> None:
    rows = _rows({1 << 20: 2.0, 16 << 20: 12.0, 256 << 20: 21.5, 1 << 30: 21.2})
    doc = json.loads(json.dumps(na.build_document(_meta(), rows)))
    assert doc["schema"] == na.SCHEMA
    for key in (
        "backend",
        "world_size",
        "world",
        "dtype",
        "iters",
        "warmup",
        "torch_version",
        "nccl_version",
        "device",
        "ranks",
        "env",
        "env_mismatch",
        "bus_factor",
        "sizes",
        "busbw_gbps",
        "peak_at_bytes",
        "verdict",
    ):
        assert key in doc, key
    assert doc["world"] == doc["world_size"] == 4 and doc["bus_factor"] == 1.5
    # What roles/spark_fabric/tasks/nccl.yml and qa/fabric.py read: top-level busbw_gbps, rows.
    assert doc["busbw_gbps"] == pytest.approx(21.5, abs=1e-3)
    assert doc["peak_at_bytes"] == 256 << 20
    assert [r["bytes"] for r in doc["sizes"]] == [1 << 20, 16 << 20, 256 << 20, 1 << 30]
    for r in doc["sizes"]:
        assert set(r) == {"bytes", "count", "ms", "ms_min", "ms_max", "algbw_gbps", "busbw_gbps", "correct"}
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * 1.5, rel=1e-3)
    assert doc["verdict"] == {
        "status": "ok",
        "reason": na.verdict(doc["busbw_gbps"])[1],
        "expected_gbps": 20.0,
        "misconfigured_gbps": 3.0,
    }


def test_document_wrong_sums_are_misconfigured_whatever_the_speed() -> None:
    rows = _rows({1 << 20: 22.0}) + _rows({1 << 30: 23.0}, correct=False)
    doc = na.build_document(_meta(), rows)
    assert doc["verdict"]["status"] == "misconfigured"
    assert "wrong sums at 1 GiB" in doc["verdict"]["reason"]
    with pytest.raises(ValueError):
        na.build_document(_meta(), [])


def test_document_thresholds_passed_through() -> None:
    doc = na.build_document(_meta(), _rows({1 << 30: 11.0}), expected_gbps=10.0, misconfigured_gbps=2.0)
    assert doc["verdict"]["status"] == "ok"
    assert (doc["verdict"]["expected_gbps"], doc["verdict"]["misconfigured_gbps"]) == (10.0, 2.0)


def test_table_lists_every_size_and_the_verdict() -> None:
    meta = dict(_meta(), env_mismatch={"NCCL_IB_HCA": {"0": "a", "1": "b"}})
    doc = na.build_document(meta, _rows({1 << 20: 2.0, 1 << 30: 3.2}, correct=True))
    text = na.render_table(doc)
    assert "1 MiB" in text and "1 GiB" in text and "nccl 2.28.9" in text
    assert "peak busbw 3.20 GB/s — misconfigured" in text
    assert "warning: NCCL_IB_HCA differs between ranks" in text


@pytest.mark.parametrize("name", sorted(p.name for p in RECORDED.glob("*.json")))
def test_recorded_device_documents_have_the_current_shape(name: str) -> None:
    doc = json.loads((RECORDED / name).read_text())
    assert doc["schema"] == na.SCHEMA and doc["backend"] == "nccl"
    assert all(r["correct"] for r in doc["sizes"])
    assert doc["busbw_gbps"] == max(r["busbw_gbps"] for r in doc["sizes"])
    assert doc["verdict"]["status"] == na.verdict(doc["busbw_gbps"])[0]


# --- standalone script and CLI -------------------------------------------------------------------


def test_script_imports_only_stdlib_and_torch() -> None:
    tree = ast.parse(SCRIPT.read_text())
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "relative import"
            roots.add((node.module or "").split(".")[0])
    assert roots - set(sys.stdlib_module_names) == {"torch"}


def _run(args: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    # -I: isolated, so nothing but the copied file and the interpreter's packages is importable.
    return subprocess.run(
        [sys.executable, "-I", str(cwd / "nccl_allreduce.py"), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture
def copied(tmp_path: Path) -> Path:
    shutil.copy(SCRIPT, tmp_path / "nccl_allreduce.py")
    return tmp_path


def test_copied_script_runs_alone(copied: Path) -> None:
    res = _run(["--help"], copied)
    assert res.returncode == 0, res.stderr
    for flag in (
        "--rank",
        "--world-size",
        "--master-addr",
        "--master-port",
        "--local-procs",
        "--backend",
        "--sizes",
        "--dtype",
        "--iters",
        "--warmup",
        "--json",
        "--output",
    ):
        assert flag in res.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--local-procs", "2", "--sizes", "0"], "size '0'"),
        (
            ["--rank", "0", "--world-size", "1", "--master-addr", "h", "--master-port", "1"],
            "--world-size: at least 2",
        ),
        (["--rank", "4", "--world", "4", "--addr", "h", "--port", "1"], "--rank 4: must be in 0..3"),
        (["--world-size", "4"], "missing --rank, --master-addr, --master-port"),
        (["--local-procs", "1"], "--local-procs: at least 2"),
        (["--local-procs", "2", "--world-size", "4"], "contradicts"),
        (["--local-procs", "2", "--iters", "0"], "--iters"),
        (["--local-procs", "2", "--misconfigured-gbps", "30"], "--misconfigured-gbps"),
        (["--rank", "0", "--world", "2", "--addr", "h", "--port", "70000"], "not a TCP port"),
    ],
)
def test_bad_arguments_exit_2_naming_the_flag(copied: Path, args: list[str], message: str) -> None:
    res = _run(args, copied)
    assert res.returncode == 2
    assert message in res.stderr


def test_args_from_torchrun_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in {
        "RANK": "3",
        "WORLD_SIZE": "4",
        "MASTER_ADDR": "10.0.0.1",
        "MASTER_PORT": "29659",
        "LOCAL_RANK": "0",
    }.items():
        monkeypatch.setenv(k, v)
    args = na.check_args(na.build_parser().parse_args([]))
    assert (args.rank, args.world_size, args.master_addr, args.master_port) == (3, 4, "10.0.0.1", 29659)
    assert args.size_list == [1 << 20, 16 << 20, 256 << 20, 1 << 30]


# --- end to end on Gloo (CPU) --------------------------------------------------------------------


def _doc(stdout: str) -> dict:
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, stdout
    return dict(json.loads(lines[0]))


@needs_torch
def test_gloo_local_procs_end_to_end(copied: Path) -> None:
    out = copied / "doc.json"
    res = _run(
        [
            "--backend",
            "gloo",
            "--local-procs",
            "2",
            "--sizes",
            "4K,256K",
            "--iters",
            "3",
            "--warmup",
            "1",
            "--dtype",
            "fp32",
            "--json",
            "--output",
            str(out),
        ],
        copied,
        timeout=240,
    )
    assert res.returncode == 0, res.stderr
    doc = _doc(res.stdout)
    assert doc == json.loads(out.read_text())
    assert (doc["backend"], doc["world_size"], doc["nccl_version"], doc["device"]) == ("gloo", 2, None, "cpu")
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    assert [r["bytes"] for r in doc["sizes"]] == [4096, 262144]
    assert all(
        r["correct"] and r["busbw_gbps"] > 0 and r["ms_min"] <= r["ms"] <= r["ms_max"] for r in doc["sizes"]
    )
    assert doc["verdict"]["status"] in ("ok", "slow", "misconfigured")


@needs_torch
def test_gloo_separate_ranks_with_the_role_flags(copied: Path) -> None:
    port = str(_free_port())
    common = [
        "--backend",
        "gloo",
        "--world",
        "2",
        "--addr",
        "127.0.0.1",
        "--port",
        port,
        "--sizes",
        "64K",
        "--iters",
        "2",
        "--warmup",
        "0",
        "--dtype",
        "fp32",
    ]
    script = str(copied / "nccl_allreduce.py")
    rank1 = subprocess.Popen(
        [sys.executable, "-I", script, "--rank", "1", *common],
        cwd=copied,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        res = _run(["--rank", "0", *common], copied, timeout=240)
        out1, err1 = rank1.communicate(timeout=60)
    finally:
        rank1.kill()
    assert res.returncode == 0, res.stderr
    assert rank1.returncode == 0, err1
    assert out1 == ""  # only rank 0 reports
    doc = _doc(res.stdout)  # stdout is a pipe: JSON without --json
    assert doc["world"] == 2 and doc["sizes"][0]["correct"]


@needs_torch
def test_rendezvous_timeout_reports_an_error_document(copied: Path) -> None:
    res = _run(
        [
            "--backend",
            "gloo",
            "--rank",
            "0",
            "--world-size",
            "2",
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            str(_free_port()),
            "--timeout-s",
            "2",
        ],
        copied,
        timeout=120,
    )
    assert res.returncode == 1
    doc = _doc(res.stdout)
    assert "busbw_gbps" not in doc
    assert doc["error"].startswith("rank 0: ") and "1/2 clients joined" in doc["error"]
    assert "nccl_allreduce: rank 0:" in res.stderr
