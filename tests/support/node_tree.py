"""A fake node's files for the node-side readers: sysfs network and InfiniBand trees, and Engram
shards with their manifest."""

from __future__ import annotations

import json
from pathlib import Path


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def fake_net(root: Path, netdev: str, *, state: str = "up", speed: int = 200000, rx_errors: int = 0) -> None:
    d = root / netdev
    for name, value in {"operstate": state, "carrier": "1", "flags": "0x1003", "mtu": "9000",
                        "speed": str(speed)}.items():
        _write(d / name, value)
    for name, value in {"rx_bytes": 1000, "tx_bytes": 2000, "rx_errors": rx_errors, "tx_errors": 0,
                        "rx_dropped": 5}.items():
        _write(d / "statistics" / name, str(value))


def fake_ib(root: Path, hca: str) -> None:
    _write(root / hca / "ports" / "1" / "counters" / "port_xmit_discards", "9")
    _write(root / hca / "ports" / "1" / "counters" / "port_rcv_errors", "2")
    _write(root / hca / "ports" / "1" / "hw_counters" / "out_of_buffer", "11")
    _write(root / hca / "ports" / "1" / "hw_counters" / "np_cnp_sent", "4")


def fake_shards(engram: Path, rank: int = 1, tp: int = 4) -> Path:
    engram.mkdir(parents=True, exist_ok=True)
    shard = engram / f"engram-r{rank}.bin"
    shard.write_bytes(b"x" * 4096)
    st = shard.stat()
    doc = {"format": "DSV41EN1", "rank": rank, "tp": tp,
           "files": [{"name": shard.name, "size": st.st_size, "mtime_ns": st.st_mtime_ns}]}
    (engram / f"manifest-r{rank}of{tp}.json").write_text(json.dumps(doc))
    return shard
