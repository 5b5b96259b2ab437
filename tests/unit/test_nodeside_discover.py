"""nodeside.discover on a fake node's sysfs (netdevs, PCI addresses, drivers, RDMA devices), its
LLDP and lsblk readers, and the whole probe shipped over real SSH (the in-process sshd) after the
host key was read and pinned the way `sparkctl init` does it."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import paramiko
import pytest
from support.node_tree import fake_net
from support.sshd_fake import FakeSshd

from sparkctl.nodeside import discover
from sparkctl.site import facts, hostkeys
from sparkctl.site import init as site_init
from sparkctl.ssh.targets import Target


def _pci_netdev(net: Path, devices: Path, name: str, pci: str, driver: str | None, state: str = "up") -> None:
    fake_net(net, name, state=state)
    dev = devices / pci
    dev.mkdir(parents=True, exist_ok=True)
    if driver:
        (devices / "drivers" / driver).mkdir(parents=True, exist_ok=True)
        os.symlink(devices / "drivers" / driver, dev / "driver")
    os.symlink(dev, net / name / "device")


def test_netdevs_report_driver_pci_address_link_and_rdma_device(tmp_path: Path) -> None:
    net, ib, devices = tmp_path / "net", tmp_path / "ib", tmp_path / "devices"
    _pci_netdev(net, devices, "enp1s0f0np0", "0000:01:00.0", "mlx5_core")
    _pci_netdev(net, devices, "enP2p1s0f0np0", "0002:01:00.0", "mlx5_core", state="down")
    (net / "enP2p1s0f0np0" / "carrier").write_text("0\n")
    fake_net(net, "veth0")  # virtual: no device link
    fake_net(net, "lo")
    for hca, netdev in (("rocep1s0f0", "enp1s0f0np0"), ("roceP2p1s0f0", "enP2p1s0f0np0")):
        (ib / hca / "device" / "net" / netdev).mkdir(parents=True)
        (ib / hca / "fw_ver").write_text("28.45.1020\n")
    found = {n["name"]: n for n in discover.netdevs(str(net), str(ib), {"enp1s0f0np0": ["10.77.0.10/24"]})}
    assert sorted(found) == ["enP2p1s0f0np0", "enp1s0f0np0", "veth0"]
    a, b, v = found["enp1s0f0np0"], found["enP2p1s0f0np0"], found["veth0"]
    assert (a["driver"], a["pci"], a["hca"], a["hca_fw"], a["carrier"], a["ipv4"]) == (
        "mlx5_core", "0000:01:00.0", "rocep1s0f0", "28.45.1020", True, ["10.77.0.10/24"])
    assert (b["pci"], b["hca"], b["carrier"]) == ("0002:01:00.0", "roceP2p1s0f0", False)
    assert (v["driver"], v["pci"], v["hca"]) == (None, None, None)
    # the controller groups them into one port with half B down
    node = facts.from_answer("192.168.7.10", {"netdevs": list(found.values())})
    (port,) = node.cx7_ports()
    assert [h.name for h in port.halves] == ["enp1s0f0np0", "enP2p1s0f0np0"]
    assert port.any_up and not port.up


def test_lldp_is_read_in_both_of_lldpctls_shapes() -> None:
    one = {"lldp": {"interface": {"enp1s0f0np0": {
        "chassis": {"crs812": {"id": {"type": "mac", "value": "aa"}}},
        "port": {"id": {"type": "ifname", "value": "qsfp56-dd-1-1"}}}}}}
    many = {"lldp": {"interface": [
        {"enp1s0f0np0": {"chassis": {"sw": {}}, "port": {"id": {"type": "ifname", "value": "swp1"}}}},
        {"enP2p1s0f0np0": {"chassis": {"sw": {}}, "port": {"id": {"type": "ifname", "value": "swp1"}}}},
    ]}}
    assert discover.parse_lldp(json.dumps(one)) == {
        "enp1s0f0np0": {"chassis": "crs812", "port": "qsfp56-dd-1-1"}}
    assert discover.parse_lldp(json.dumps(many)) == {
        "enp1s0f0np0": {"chassis": "sw", "port": "swp1"}, "enP2p1s0f0np0": {"chassis": "sw", "port": "swp1"}}
    assert discover.parse_lldp("not json") == {}


def test_nvme_disks_and_release_files_are_parsed(tmp_path: Path) -> None:
    text = json.dumps({"blockdevices": [
        {"name": "nvme0n1", "type": "disk", "size": 4000787030016, "model": "ESL04TBTLCZ "},
        {"name": "sda", "type": "disk", "size": 100, "model": None}]})
    assert discover._lsblk_disks(text) == [
        {"name": "nvme0n1", "size_bytes": 4000787030016, "model": "ESL04TBTLCZ"}]
    rel = tmp_path / "dgx-release"
    rel.write_text('DGX_NAME="DGX Spark"\nDGX_SWBUILD_VERSION="7.2.3"\n')
    assert discover.dgx_release(str(rel)) == {"DGX_NAME": "DGX Spark", "DGX_SWBUILD_VERSION": "7.2.3"}
    assert discover.dgx_release(str(tmp_path / "absent")) is None
    rel.write_text(rel.read_text() + 'DGX_OTA_VERSION="7.2.1"\nDGX_OTA_VERSION="7.3.0"\n')
    node = facts.from_answer("10.0.0.1", {"dgx": discover.dgx_release(str(rel))})
    assert node.dgx_os == "7.3.0"  # the newest over-the-air update


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[FakeSshd]:
    server = FakeSshd(tmp_path)
    yield server
    server.close()


def test_the_probe_runs_over_ssh_once_its_key_is_pinned(sshd: FakeSshd, tmp_path: Path) -> None:
    key = hostkeys.scan("127.0.0.1", sshd.port)
    assert key.blob == sshd.host_key.get_base64() and key.name == f"[127.0.0.1]:{sshd.port}"
    known = tmp_path / "pinned_known_hosts"
    target = Target(name="spark-0", address="127.0.0.1", user="root", port=sshd.port,
                    key_files=(sshd.key_file,), known_hosts=known, rank=0)
    known.write_text("")  # nothing pinned yet: the fan-out refuses the node
    (refused,) = site_init.discover_over_ssh([target], {"mounts": ["/"]}).values()
    assert isinstance(refused, str) and "not in" in refused
    known.write_text(hostkeys.text_with("", [key]))
    (doc,) = site_init.discover_over_ssh([target], {"mounts": ["/"]}).values()
    assert isinstance(doc, dict) and doc["mode"] == "discover"
    assert doc["kernel"] == os.uname().release
    assert any(f["mount"] == "/" and f["size_bytes"] > 0 for f in doc["filesystems"])
    assert all(n["name"] != "lo" for n in doc["netdevs"])


class _TwoKeys(paramiko.ServerInterface):
    pass


def _serve_two_host_keys(keys: list[paramiko.PKey]) -> tuple[int, threading.Event]:
    """An SSH server with several host keys (an RSA and an ECDSA one, as sshd usually has) that
    only does the key exchange."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(4)
    sock.settimeout(0.2)
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            t = paramiko.Transport(conn)
            for k in keys:
                t.add_server_key(k)
            # The scan closes its side once it has the key, and the server's negotiation may then end
            # in a reset (an OSError): the loop goes on to the next connection whatever ended this one.
            with contextlib.suppress(paramiko.SSHException, EOFError, OSError):
                t.start_server(server=_TwoKeys())
        sock.close()

    threading.Thread(target=loop, daemon=True).start()
    return sock.getsockname()[1], stop


# A loopback SSH server answering within the scan's banner timeout: starved beside the lab tests it
# did not ("Error reading SSH protocol banner"). `make test` runs it first, alone.
@pytest.mark.timing
def test_a_scan_asks_for_the_pinned_key_type_first() -> None:
    rsa, ecdsa = paramiko.RSAKey.generate(2048), paramiko.ECDSAKey.generate()
    port, stop = _serve_two_host_keys([rsa, ecdsa])
    try:
        assert hostkeys.scan("127.0.0.1", port).blob == ecdsa.get_base64()  # paramiko's preference
        pinned_rsa = hostkeys.scan("127.0.0.1", port, key_types=["ssh-rsa"])
        assert (pinned_rsa.keytype, pinned_rsa.blob) == ("ssh-rsa", rsa.get_base64())
    finally:
        stop.set()


def test_bios_is_version_and_date_or_none_without_a_dmi_table(tmp_path: Path) -> None:
    """One reader for the firmware line: the bench identity and preflight's identity module both use it."""
    dmi = tmp_path / "dmi"
    assert discover.bios(str(dmi)) is None
    dmi.mkdir()
    (dmi / "bios_version").write_text("5.36_0ACUM018\n")
    assert discover.bios(str(dmi)) == "5.36_0ACUM018"
    (dmi / "bios_date").write_text("07/03/2025\n")
    assert discover.bios(str(dmi)) == "5.36_0ACUM018 (07/03/2025)"
