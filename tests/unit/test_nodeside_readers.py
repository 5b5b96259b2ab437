"""The node-side readers (links, RoCE GIDs, manifests) against fake sysfs trees and fake `ip`."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sparkctl.nodeside import links, manifests, rdma, system
from sparkctl.stage import dsv41en1, manifest

# --- links ---------------------------------------------------------------------------------------


def _netdev(root: Path, name: str, **files: str) -> None:
    base = root / name
    (base / "statistics").mkdir(parents=True)
    defaults = {"operstate": "up", "carrier": "1", "flags": "0x1003", "mtu": "9000", "speed": "200000"}
    for key, value in {**defaults, **files}.items():
        (base / key).write_text(value + "\n")
    for counter in links.COUNTERS:
        (base / "statistics" / counter).write_text("7\n")


def test_link_read_from_sysfs(tmp_path: Path) -> None:
    _netdev(tmp_path, "enp1s0f0np0")
    _netdev(tmp_path, "enP2p1s0f1np1", operstate="down", carrier="", flags="0x1002", speed="-1", mtu="1500")
    got = links.read_links(["enp1s0f0np0", "enP2p1s0f1np1", "missing0"], root=str(tmp_path))
    assert got["enp1s0f0np0"] == {
        "present": True, "state": "up", "carrier": True, "admin_up": True, "mtu": 9000, "speed_mbps": 200000,
        **{c: 7 for c in links.COUNTERS},
    }
    down = got["enP2p1s0f1np1"]
    assert (down["state"], down["carrier"], down["admin_up"], down["mtu"], down["speed_mbps"]) == (
        "down", False, False, 1500, None)
    assert got["missing0"] == {"present": False}


IP_ADDR_JSON = json.dumps([
    {"ifindex": 1, "ifname": "lo", "addr_info": [{"family": "inet", "local": "127.0.0.1", "prefixlen": 8},
                                                  {"family": "inet6", "local": "::1", "prefixlen": 128}]},
    {"ifindex": 4, "ifname": "enp1s0f0np0", "addr_info": [
        {"family": "inet", "local": "10.0.1.2", "prefixlen": 24},
        {"family": "inet", "local": "10.0.0.2", "prefixlen": 24}]},
    {"ifindex": 5, "ifname": "enP2p1s0f1np1", "addr_info": []},
])


def test_ip_json_gives_sorted_ipv4_per_interface() -> None:
    assert links.parse_ip_addr(IP_ADDR_JSON) == {
        "lo": ["127.0.0.1/8"], "enp1s0f0np0": ["10.0.0.2/24", "10.0.1.2/24"], "enP2p1s0f1np1": []}
    assert links.parse_ip_addr("not json") == {}


def test_ipv4_addresses_calls_ip_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "ip"
    fake.write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path}/calls\ncat <<'EOF'\n{IP_ADDR_JSON}\nEOF\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert links.ipv4_addresses()["enp1s0f0np0"] == ["10.0.0.2/24", "10.0.1.2/24"]
    assert (tmp_path / "calls").read_text() == "-j addr show\n"


# --- RoCE v2 GID index ---------------------------------------------------------------------------


def _gid(ib: Path, hca: str, idx: int, gid: str, kind: str | None, ndev: str | None) -> None:
    port = ib / hca / "ports" / "1"
    for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
        (port / sub).mkdir(parents=True, exist_ok=True)
    (port / "gids" / str(idx)).write_text(gid + "\n")
    if kind is not None:  # an unused entry's attributes cannot be read (EINVAL): no file here
        (port / "gid_attrs" / "types" / str(idx)).write_text(kind + "\n")
    if ndev is not None:
        (port / "gid_attrs" / "ndevs" / str(idx)).write_text(ndev + "\n")


V4 = "0000:0000:0000:0000:0000:ffff:0a00:0002"  # ::ffff:10.0.0.2
LINK_LOCAL = "fe80:0000:0000:0000:0000:ffff:0a00:0002"  # ends like the IPv4 GID, is not it


@pytest.fixture
def ib(tmp_path: Path) -> Path:
    root = tmp_path / "infiniband"
    hca = "rocep1s0f0"
    _gid(root, hca, 0, LINK_LOCAL, "IB/RoCE v1", "enp1s0f0np0")
    _gid(root, hca, 1, LINK_LOCAL, "RoCE v2", "enp1s0f0np0")
    _gid(root, hca, 2, V4, "IB/RoCE v1", "enp1s0f0np0")
    _gid(root, hca, 3, V4, "RoCE v2", "bond0")  # the address, but on another netdev
    _gid(root, hca, 10, V4.upper(), "RoCE v2", "enp1s0f0np0")  # sorted numerically, not as text
    _gid(root, hca, 11, "0000:0000:0000:0000:0000:0000:0000:0000", None, None)
    (root / hca / "fw_ver").write_text("28.45.1020\n")
    return root


def test_gid_index_is_the_roce_v2_entry_of_the_address_on_the_netdev(ib: Path) -> None:
    assert rdma.roce_v2_gid_index("rocep1s0f0", "enp1s0f0np0", "10.0.0.2/24", root=str(ib)) == (10, None)
    assert rdma.roce_v2_gid_index("rocep1s0f0", "bond0", "10.0.0.2", root=str(ib)) == (3, None)


def test_gid_index_names_what_is_missing(ib: Path) -> None:
    assert rdma.roce_v2_gid_index("rocep1s0f0", "enp1s0f0np0", "10.0.0.9/24", root=str(ib)) == (
        None, "rocep1s0f0: no RoCE v2 GID for 10.0.0.9 on enp1s0f0np0")
    assert rdma.roce_v2_gid_index("roceP2p1s0f0", "enP2p1s0f1np1", "10.0.1.2", root=str(ib)) == (
        None, "no RDMA device roceP2p1s0f0")


def test_ipv4_gid_text_matches_sysfs() -> None:
    assert rdma.ipv4_gid("10.0.0.2/24") == V4
    assert rdma.ipv4_gid("192.168.200.17") == "0000:0000:0000:0000:0000:ffff:c0a8:c811"


def test_rdma_presence_and_firmware(ib: Path, tmp_path: Path) -> None:
    assert rdma.present(str(ib)) and not rdma.present(str(tmp_path / "none"))
    assert rdma.has_device("rocep1s0f0", str(ib)) and not rdma.has_device("", str(ib))
    assert rdma.firmware(["rocep1s0f0", "rocep1s0f0", "gone"], str(ib)) == ["28.45.1020"]


def test_read_int_ignores_what_is_not_a_number(tmp_path: Path) -> None:
    (tmp_path / "speed").write_text("-1\n")
    (tmp_path / "odd").write_text("fast\n")
    assert system.read_int(str(tmp_path / "speed")) == -1
    assert system.read_int(str(tmp_path / "odd"), 0) == 0
    assert system.read_int(str(tmp_path / "absent")) is None
    assert system.run(["/nonexistent/tool"])[0] == 127


# --- manifests -----------------------------------------------------------------------------------


def _shards(root: Path, rank: int = 1, tp: int = 4, **doc: object) -> dict[str, object]:
    root.mkdir(parents=True, exist_ok=True)
    files = []
    for layer in (1, 14):
        name = f"engram-l{layer}-r{rank}of{tp}.bin"
        (root / name).write_bytes(b"x" * (100 + layer))
        st = (root / name).stat()
        files.append({"name": name, "size": st.st_size, "mtime_ns": st.st_mtime_ns})
    body = {"format": "DSV41EN1", "rank": rank, "tp": tp, "files": files, **doc}
    (root / manifests.shard_manifest_name(rank, tp)).write_text(json.dumps(body))
    return body


def test_shards_on_disk_verified_and_each_problem_named(tmp_path: Path) -> None:
    _shards(tmp_path)
    assert manifests.shards_on_disk(str(tmp_path), 1, 4) == {"verified": True, "files": 2, "bytes": 215}
    missing = manifests.shards_on_disk(str(tmp_path), 2, 4)["problem"]
    assert missing == f"manifest-r2of4.json missing in {tmp_path}"
    (tmp_path / "engram-l14-r1of4.bin").write_bytes(b"short")
    assert manifests.shards_on_disk(str(tmp_path), 1, 4)["problem"] == (
        "engram-l14-r1of4.bin is 5 B, manifest says 114")
    (tmp_path / "engram-l1-r1of4.bin").unlink()
    assert manifests.shards_on_disk(str(tmp_path), 1, 4)["problem"] == "engram-l1-r1of4.bin missing"


def test_shards_on_disk_refuses_other_formats_and_ranks(tmp_path: Path) -> None:
    _shards(tmp_path / "a", format="DSV41EN0")
    assert "not a DSV41EN1 manifest" in manifests.shards_on_disk(str(tmp_path / "a"), 1, 4)["problem"]
    _shards(tmp_path / "b", rank=1, tp=4)
    doc = json.loads((tmp_path / "b" / "manifest-r1of4.json").read_text())
    (tmp_path / "b" / "manifest-r1of4.json").write_text(json.dumps({**doc, "rank": 0}))
    problem = manifests.shards_on_disk(str(tmp_path / "b"), 1, 4)["problem"]
    assert problem == "manifest-r1of4.json records rank 0 of 4"


def test_read_names_the_file(tmp_path: Path) -> None:
    assert manifests.read(str(tmp_path / "none.json")) is None
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(manifests.ManifestError, match=f"{bad}: unreadable manifest"):
        manifests.read(str(bad))
    bad.write_text('{"files": {}}')
    with pytest.raises(manifests.ManifestError, match="not a sparkctl manifest"):
        manifests.read(str(bad))


def test_stage_reads_through_the_same_reader(tmp_path: Path) -> None:
    assert manifest.ManifestError is manifests.ManifestError
    assert manifest.MANIFEST_NAME == manifests.CHECKPOINT_MANIFEST
    (tmp_path / manifests.CHECKPOINT_MANIFEST).write_text('{"files": "nope"}')
    with pytest.raises(manifests.ManifestError, match="not a sparkctl manifest"):
        manifest.load(str(tmp_path))
    body = _shards(tmp_path / "e")
    assert dsv41en1.read_manifest(str(tmp_path / "e" / dsv41en1.manifest_name(1, 4))) == body
    (tmp_path / "e" / "manifest-r1of4.json").write_text('{"format": "other", "files": []}')
    with pytest.raises(dsv41en1.FormatError, match="not a DSV41EN1 manifest"):
        dsv41en1.read_manifest(str(tmp_path / "e" / "manifest-r1of4.json"))
