"""The fabric of every shape: netplan and addresses, host QoS, the switch for any port count, the
firewall's rank peers, the NCCL environment and the `check fabric` matrix, rendered from each
example inventory (triangle-tp3, ring-tp4, switch-tp8, switch-2xtp4) and from variants of them (a
pair on one cable, a triangle on /30 cables with both PCIe halves of each physical port)."""

from __future__ import annotations

import re
import shutil
from ipaddress import ip_interface, ip_network
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.fabric_answers import fabric_answers
from support.pair_site import make_switchless_pair

from sparkctl.errors import InputError
from sparkctl.model import load_inventory
from sparkctl.qa import fabric as verdict
from sparkctl.render import cluster_facts, fabric, host, rank, switch

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "inventory" / "examples"
SHAPES = ("triangle-tp3", "ring-tp4", "switch-tp8", "switch-2xtp4")


def _load(name: str) -> Any:
    return load_inventory(EXAMPLES / name)


def _edit(inv: Path, hosts: Any = None, site: Any = None) -> None:
    for rel, fn in (("hosts.yml", hosts), ("group_vars/all/sparkctl.yml", site)):
        if fn is None:
            continue
        path = inv / rel
        doc = yaml.safe_load(path.read_text())
        fn(doc)
        path.write_text(yaml.safe_dump(doc, sort_keys=False))


# Both PCIe halves of each physical port: (netdev, hca) by physical port, half A then half B.
HALVES = {
    0: [("enp1s0f0np0", "rocep1s0f0"), ("enP2p1s0f0np0", "roceP2p1s0f0")],
    1: [("enp1s0f1np1", "rocep1s0f1"), ("enP2p1s0f1np1", "roceP2p1s0f1")],
}
# The triangle's cables: (node, physical port) at each end, as in inventory/examples/triangle-tp3.
CABLES = [
    (("spark-0", 0), ("spark-1", 0)),
    (("spark-0", 1), ("spark-2", 0)),
    (("spark-1", 1), ("spark-2", 1)),
]


@pytest.fixture
def triangle30(tmp_path: Path) -> Any:
    """The triangle example on /30 cables, both PCIe halves of each physical port: two /30 per cable."""
    inv = tmp_path / "tri30"
    shutil.copytree(EXAMPLES / "triangle-tp3", inv)
    subnets: list[str] = []
    ports: dict[str, list[dict[str, str]]] = {"spark-0": [], "spark-1": [], "spark-2": []}
    for k, ends in enumerate(CABLES):
        for half in (0, 1):
            net = ip_network(f"10.77.{k + 1}.{4 * half}/30")
            subnets.append(str(net))
            for (node, phys), addr in zip(ends, net.hosts(), strict=True):
                netdev, hca = HALVES[phys][half]
                ports[node].append({"netdev": netdev, "hca": hca, "address": f"{addr}/30"})

    def hosts(doc: Any) -> None:
        for name, host_vars in doc["all"]["children"]["sparks"]["hosts"].items():
            host_vars["sparkctl_fabric_ports"] = ports[name]

    def site(doc: Any) -> None:
        doc["sparkctl_fabric"]["subnets"] = subnets

    _edit(inv, hosts, site)
    return load_inventory(inv)


@pytest.fixture
def pair(example_copy: Path) -> Any:
    """Two Sparks on one cable, both PCIe halves, one subnet per half (sparkctl_topology: pair)."""
    make_switchless_pair(example_copy)
    _edit(example_copy, site=lambda doc: doc.update(sparkctl_topology="pair"))
    return load_inventory(example_copy)


def _netplan(cluster: Any, node: Any) -> dict[str, Any]:
    ethernets: dict[str, Any] = yaml.safe_load(host.netplan(cluster, node))["network"]["ethernets"]
    return ethernets


# --- netplan and addresses --------------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
def test_netplan_addresses_every_fabric_port_at_mtu_9000(shape: str) -> None:
    cluster = _load(shape)
    seen: set[str] = set()
    for node in cluster.nodes:
        eth = _netplan(cluster, node)
        assert list(eth) == [str(p.netdev) for p in node.fabric_ports]
        for port in node.fabric_ports:
            conf = eth[str(port.netdev)]
            assert conf["addresses"] == [str(port.address)]
            flags = (conf["mtu"], conf["dhcp4"], conf["dhcp6"], conf["accept-ra"])
            assert flags == (9000, False, False, False)
            assert "routes" not in conf and "gateway4" not in conf
            assert str(port.address) not in seen  # no address twice on the site
            seen.add(str(port.address))
        # A node's ports are each in a subnet of their own (no two interfaces on one subnet).
        nets = [str(p.address.network) for p in node.fabric_ports]
        assert len(set(nets)) == len(nets)


def test_triangle_each_node_uses_both_physical_ports_one_subnet_per_cable() -> None:
    cluster = _load("triangle-tp3")
    links = fabric.links(cluster)
    assert [(lk.subnet, lk.nodes) for lk in links] == [
        ("10.77.1.0/24", ("spark-0", "spark-1")),
        ("10.77.2.0/24", ("spark-0", "spark-2")),
        ("10.77.3.0/24", ("spark-1", "spark-2")),
    ]
    for node in cluster.nodes:
        eth = _netplan(cluster, node)
        assert sorted(re.search(r"np(\d)$", dev).group(1) for dev in eth) == ["0", "1"]  # type: ignore[union-attr]
        assert {lk.subnet for lk in fabric.node_links(cluster, node)} == {
            str(ip_interface(conf["addresses"][0]).network) for conf in eth.values()
        }


def test_triangle_on_30_cables_with_both_halves_of_each_port(triangle30: Any) -> None:
    links = fabric.links(triangle30)
    assert len(links) == 6 and len({lk.subnet for lk in links}) == 6
    assert all(len(lk.ends) == 2 and ip_network(lk.subnet).prefixlen == 30 for lk in links)
    spark1 = triangle30.node("spark-1")
    eth = _netplan(triangle30, spark1)
    assert list(eth) == ["enp1s0f0np0", "enP2p1s0f0np0", "enp1s0f1np1", "enP2p1s0f1np1"]
    assert [c["addresses"][0] for c in eth.values()] == ["10.77.1.2/30", "10.77.1.6/30", "10.77.3.1/30",
                                                         "10.77.3.5/30"]
    assert {c["mtu"] for c in eth.values()} == {9000}
    # Every HCA of both physical ports, both halves, in the rank's NCCL list.
    env = rank.rank_env(triangle30, spark1)
    assert env["NCCL_IB_HCA"] == "=rocep1s0f0:1,roceP2p1s0f0:1,rocep1s0f1:1,roceP2p1s0f1:1"
    # The matrix: each cable's two halves, both ways: 2 peers x 2 halves from each node.
    pings = fabric.pings(triangle30, spark1)
    assert [(p.peer, p.netdev, p.dst) for p in pings] == [
        ("spark-0", "enp1s0f0np0", "10.77.1.1"), ("spark-0", "enP2p1s0f0np0", "10.77.1.5"),
        ("spark-2", "enp1s0f1np1", "10.77.3.2"), ("spark-2", "enP2p1s0f1np1", "10.77.3.6"),
    ]


def test_pair_is_one_cable_both_halves(pair: Any) -> None:
    assert pair.topology == "pair" and fabric.cabled(pair)
    assert [(lk.subnet, lk.nodes) for lk in fabric.links(pair)] == [
        ("10.77.0.0/24", ("spark-0", "spark-1")), ("10.77.1.0/24", ("spark-0", "spark-1")),
    ]
    matrix = fabric.check_matrix(pair)
    assert [(p["peer"], p["netdev"], p["dst"]) for p in matrix["pings"]["spark-0"]] == [
        ("spark-1", "enp1s0f0np0", "10.77.0.11"), ("spark-1", "enP2p1s0f0np0", "10.77.1.11"),
    ]
    assert matrix["no_direct_path"] == []
    assert "sparkctl-fabric" not in switch.switch_config(pair)  # no switch: nothing to configure


# --- host QoS per port ------------------------------------------------------------------------------


def test_host_qos_configures_every_port_of_a_triangle(triangle30: Any) -> None:
    node = triangle30.node("spark-0")
    script = host.qos_script(triangle30, node)
    ports = re.search(r'^PORTS="([^"]*)"$', script, re.M)
    assert ports is not None
    assert ports.group(1).split() == [f"{p.netdev}:{p.hca}" for p in node.fabric_ports]
    assert len(ports.group(1).split()) == 4
    hook = host.qos_link_hook(triangle30, node)
    assert "enp1s0f0np0|enP2p1s0f0np0|enp1s0f1np1|enP2p1s0f1np1)" in hook
    unit = host.qos_unit(triangle30, node)
    assert unit.count("sys-subsystem-net-devices-") == 8  # After= and Wants= name each of the four


# --- the switch for any port count ------------------------------------------------------------------


@pytest.mark.parametrize("shape", ["switch-tp8", "switch-2xtp4"])
@pytest.mark.parametrize("kind", ["routeros", "nvue", "linux"])
def test_switch_config_carries_every_nodes_port(shape: str, kind: str) -> None:
    cluster = _load(shape)
    sw = cluster.switch.model_copy(update={"type": kind})
    cluster = cluster.model_copy(update={"switch": sw})
    wanted = [f"qsfp56-dd-{i}-1" for i in range(1, 9)]
    assert [name for name, _ in switch.switch_ports(cluster)] == wanted
    text = switch.switch_config(cluster)
    for i, name in enumerate(wanted):
        if kind == "routeros":
            speed = f'set "{name}" auto-negotiation=no speed=200G-baseCR4'
            assert f'{speed} comment="sparkctl: spark-{i}"' in text
            assert f'set "{name}" trust-l3=keep pfc=sparkctl-pfc3' in text
            assert f'interface="{name}" bridge=sparkctl-fabric' in text
        elif kind == "nvue":
            assert f"nv set interface {name} link mtu 9216" in text
            assert f"nv set interface {name} bridge domain br_default" in text
        else:
            assert f"# spark-{i}\nip link set dev {name} mtu 9216\nip link set dev {name} up\n" in text


# --- firewall ---------------------------------------------------------------------------------------


def _rank_peers(text: str) -> list[str]:
    block = text.split("set rank_peers", 1)[1].split("}", 1)[0] + "}"
    m = re.search(r"elements = \{ ([^}]*) \}", block)
    assert m is not None
    return m.group(1).split(", ")


def test_firewall_opens_rank_traffic_to_the_nodes_own_cables() -> None:
    cluster = _load("ring-tp4")
    mgmt = ["192.168.7.10", "192.168.7.11", "192.168.7.12", "192.168.7.13"]
    spark0, spark2 = cluster.node("spark-0"), cluster.node("spark-2")
    assert _rank_peers(host.firewall(cluster, spark0)) == ["10.77.1.0/24", "10.77.4.0/24", *mgmt]
    assert _rank_peers(host.firewall(cluster, spark2)) == ["10.77.2.0/24", "10.77.3.0/24", *mgmt]
    assert "the subnets of spark-2's cables" in host.firewall(cluster, cluster.node("spark-2"))
    tri = _load("triangle-tp3")
    assert _rank_peers(host.firewall(tri, tri.node("spark-1")))[:2] == ["10.77.1.0/24", "10.77.3.0/24"]


def test_firewall_on_a_switch_opens_every_fabric_subnet() -> None:
    cluster = _load("switch-tp8")
    for node in (cluster.node("spark-0"), cluster.node("spark-7")):
        assert _rank_peers(host.firewall(cluster, node)) == ["10.77.0.0/24", "10.77.1.0/24"]


# --- NCCL environment -------------------------------------------------------------------------------


def test_ring_nccl_runs_ring_only_over_both_cables() -> None:
    cluster = _load("ring-tp4")
    for node in cluster.nodes:
        env = rank.rank_env(cluster, node)
        assert env["NCCL_SWITCHLESS_RING_ONLY"] == "1" and env["NCCL_ALGO"] == "Ring"
        assert env["NCCL_IB_HCA"] == "=rocep1s0f0:1,rocep1s0f1:1"
        assert env["NCCL_IB_SUBNET_PREFIX_LEN"] == "24"
        assert env["NCCL_SOCKET_IFNAME"] == "=enP7s7"  # bootstrap over management


def test_ring_on_30_cables_routes_nccl_by_the_cables_prefix(tmp_path: Path) -> None:
    inv = tmp_path / "ring30"
    shutil.copytree(EXAMPLES / "ring-tp4", inv)
    cables = {1: ("spark-0", "spark-1"), 2: ("spark-1", "spark-2"), 3: ("spark-2", "spark-3"),
              4: ("spark-3", "spark-0")}

    def hosts(doc: Any) -> None:
        for name, hv in doc["all"]["children"]["sparks"]["hosts"].items():
            for port in hv["sparkctl_fabric_ports"]:
                k = int(port["address"].split(".")[2])
                port["address"] = f"10.77.{k}.{cables[k].index(name) + 1}/30"

    _edit(inv, hosts, lambda doc: doc["sparkctl_fabric"].update(
        subnets=[f"10.77.{k}.0/30" for k in cables]))
    cluster = load_inventory(inv)
    env = rank.rank_env(cluster, cluster.node("spark-1"))
    # The publisher's /24 would have NCCL take every /30 cable of 10.77.k for one subnet.
    assert env["NCCL_IB_SUBNET_PREFIX_LEN"] == "30"
    assert [p.dst for p in fabric.pings(cluster, cluster.node("spark-1"))] == ["10.77.1.1", "10.77.2.2"]

    mixed = cluster.model_copy(update={"fabric": cluster.fabric.model_copy(update={"subnets": [
        ip_network("10.77.1.0/30"), ip_network("10.77.2.0/24"), *cluster.fabric.subnets[2:]]})})
    with pytest.raises(InputError) as err:
        rank.rank_env(mixed, mixed.node("spark-1"))
    assert "sparkctl_fabric.subnets" in err.value.message and "NCCL_IB_SUBNET_PREFIX_LEN" in err.value.message


def test_switch_nccl_env_has_no_cabling_variables() -> None:
    cluster = _load("switch-tp8")
    env = rank.rank_env(cluster, cluster.node("spark-3"))
    assert env["NCCL_IB_HCA"] == "=rocep1s0f0:1,roceP2p1s0f0:1"
    assert "NCCL_SWITCHLESS_RING_ONLY" not in env and "NCCL_IB_SUBNET_PREFIX_LEN" not in env
    assert rank.fabric_nccl_env(cluster) == {}


# --- the check fabric matrix ------------------------------------------------------------------------


def test_triangle_matrix_is_every_cable_both_directions() -> None:
    cluster = _load("triangle-tp3")
    matrix = fabric.check_matrix(cluster)
    sent = sorted((src, p["peer"], p["subnet"]) for src, ps in matrix["pings"].items() for p in ps)
    assert sent == sorted([
        ("spark-0", "spark-1", "10.77.1.0/24"), ("spark-1", "spark-0", "10.77.1.0/24"),
        ("spark-0", "spark-2", "10.77.2.0/24"), ("spark-2", "spark-0", "10.77.2.0/24"),
        ("spark-1", "spark-2", "10.77.3.0/24"), ("spark-2", "spark-1", "10.77.3.0/24"),
    ])
    # Each ping leaves from the port on that cable, to the port at its other end.
    p = next(p for p in matrix["pings"]["spark-2"] if p["peer"] == "spark-1")
    assert (p["netdev"], p["src"], p["dst_netdev"], p["dst"]) == ("enp1s0f1np1", "10.77.3.12", "enp1s0f1np1",
                                                                  "10.77.3.11")
    assert matrix["no_direct_path"] == []


def test_ring_matrix_is_neighbours_only_and_names_the_opposite_pairs() -> None:
    cluster = _load("ring-tp4")
    matrix = fabric.check_matrix(cluster)
    assert {src: [p["peer"] for p in ps] for src, ps in matrix["pings"].items()} == {
        "spark-0": ["spark-1", "spark-3"], "spark-1": ["spark-0", "spark-2"],
        "spark-2": ["spark-1", "spark-3"], "spark-3": ["spark-0", "spark-2"],
    }
    gaps = matrix["no_direct_path"]
    assert [(g["nodes"], g["expected"]) for g in gaps] == [(["spark-0", "spark-2"], True),
                                                          (["spark-1", "spark-3"], True)]
    assert "opposite nodes on the ring" in gaps[0]["why"]
    # What the role's probe reads: the vars plugin hands every host the cluster facts.
    assert cluster_facts(cluster)["fabric_check"] == matrix


@pytest.mark.parametrize(("shape", "count"), [("switch-tp8", 8 * 7 * 2), ("switch-2xtp4", 8 * 7 * 2)])
def test_switch_matrix_is_every_ordered_pair_over_every_half(shape: str, count: int) -> None:
    cluster = _load(shape)
    matrix = fabric.check_matrix(cluster)
    pings = [p for ps in matrix["pings"].values() for p in ps]
    assert len(pings) == count and matrix["no_direct_path"] == []
    # As the probe always paired them: the same half index on both ends.
    assert all(p["netdev"] == p["dst_netdev"] for p in pings)
    assert {p["subnet"] for p in pings if p["index"] == 1} == {"10.77.1.0/24"}


def test_a_node_off_the_switch_subnets_has_no_direct_path_and_that_is_a_problem() -> None:
    cluster = _load("switch-tp8")
    lone = cluster.node("spark-7")
    port = lone.fabric_ports[0].model_copy(update={"address": ip_interface("10.99.0.17/24")})
    moved = lone.model_copy(update={"fabric_ports": [port]})
    odd = cluster.model_copy(update={"nodes": [*cluster.nodes[:7], moved]})
    gaps = fabric.no_direct_path(odd)
    assert [(g.nodes, g.expected) for g in gaps][:1] == [(("spark-0", "spark-7"), False)]
    v = verdict.judge(odd, _answers(odd))
    assert any(p.startswith("spark-0 <-> spark-7: no direct path") for p in v.problems)


# --- the verdict on the matrix ----------------------------------------------------------------------


def _answers(cluster: Any, failing: set[tuple[str, str]] = frozenset()) -> dict[str, Any]:  # type: ignore[assignment]
    """Every node's probe answering the rendered matrix: links up at MTU 9000, pings ok except
    ``failing`` (src, peer), which the probe classes as MTU-broken."""
    return fabric_answers(cluster, failing)


def test_ring_verdict_passes_with_the_opposite_pairs_expected_absent() -> None:
    cluster = _load("ring-tp4")
    v = verdict.judge(cluster, _answers(cluster))
    assert v.ok, v.problems
    assert len(v.pairs) == 8
    assert [a.split(":")[0] for a in v.absent] == ["spark-0 <-> spark-2", "spark-1 <-> spark-3"]
    assert all("no direct path, as expected" in a for a in v.absent)
    assert any("all 8 pings over every cable, both directions" in p for p in v.passed)
    assert v.as_dict()["absent"] == v.absent


def test_ring_verdict_refuses_a_probe_that_crossed_a_missing_cable() -> None:
    cluster = _load("ring-tp4")
    probes = _answers(cluster)
    probes["spark-0"]["pings"].append({"peer": "spark-2", "index": 0, "netdev": "enp1s0f0np0",
                                       "src": "10.77.1.10", "dst": "10.77.3.12", "ok": False,
                                       "kind": "unreachable", "detail": "0/15"})
    v = verdict.judge(cluster, probes)
    assert any("spark-0 <-> spark-2: 1 ping(s) sent where no cable runs" in p for p in v.problems)


def test_triangle_verdict_names_the_broken_cable() -> None:
    cluster = _load("triangle-tp3")
    v = verdict.judge(cluster, _answers(cluster, {("spark-0", "spark-2"), ("spark-2", "spark-0")}))
    assert not v.ok
    assert ("likely culprit: the cable spark-0 enp1s0f1np1 - spark-2 enp1s0f0np0 (10.77.2.0/24): every jumbo "
            "ping over it fails in both directions") in "\n".join(v.problems)
    mtu = next(p for p in v.problems if p.startswith("MTU broken"))
    assert "spark-0 enp1s0f1np1 -> spark-2 enp1s0f0np0 10.77.2.12" in mtu
    # The peer's port on that cable (its np0), not its port of the source's index (np1).
    assert "spark-2 enp1s0f0np0=9000" in mtu and "spark-2 enp1s0f1np1" not in mtu


def test_triangle_verdict_points_at_a_node_whose_every_cable_fails() -> None:
    cluster = _load("triangle-tp3")
    bad = {(a, b) for a in ("spark-0", "spark-1", "spark-2") for b in ("spark-0", "spark-1", "spark-2")
           if a != b and "spark-0" in (a, b)}
    v = verdict.judge(cluster, _answers(cluster, bad))
    culprit = "likely culprit: spark-0 — every jumbo ping to or from it fails, on every one of its cables"
    assert culprit in v.problems


# --- the hardware rounds (ib_write_bw) --------------------------------------------------------------


def test_bandwidth_rounds_pair_every_linked_node_pair_once() -> None:
    switch4 = load_inventory(ROOT / "inventory" / "example")
    rounds = fabric.bandwidth_rounds(switch4)
    # The round-robin the role always ran: disjoint pairs, every pair once, both halves of the port.
    assert [[(p["src"], p["dst"]) for p in r] for r in rounds] == [
        [("spark-0", "spark-3"), ("spark-1", "spark-2")],
        [("spark-0", "spark-1"), ("spark-2", "spark-3")],
        [("spark-0", "spark-2"), ("spark-3", "spark-1")],
    ]
    lanes = rounds[0][0]["lanes"]
    assert [(ln["netdev"], ln["peer_hca"], ln["peer_ip"]) for ln in lanes] == [
        ("enp1s0f0np0", "rocep1s0f0", "10.77.0.13"), ("enP2p1s0f0np0", "roceP2p1s0f0", "10.77.1.13"),
    ]
    ring = fabric.bandwidth_rounds(_load("ring-tp4"))
    measured = sorted(tuple(sorted((p["src"], p["dst"]))) for r in ring for p in r)
    assert measured == [("spark-0", "spark-1"), ("spark-0", "spark-3"), ("spark-1", "spark-2"),
                        ("spark-2", "spark-3")]  # never the opposite pairs


def _render_round(cluster: Any, node: str, round_: list[dict[str, Any]]) -> str:
    """roles/spark_fabric/tasks/ib_round.yml's command for ``node``, rendered with Jinja as Ansible would."""
    import jinja2

    tasks = yaml.safe_load((ROOT / "roles/spark_fabric/tasks/ib_round.yml").read_text())
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    pair_expr = tasks[0]["vars"]["spark_fabric_pair"]
    pair = env.from_string(pair_expr.replace("{{", "{{ (").replace("}}", ") | tojson }}")).render(
        spark_fabric_round=round_, inventory_hostname=node)
    probes = {n.name: {"spark_fabric_probe_result": {"ports": [{"gid_index": 3 + i} for i, _ in
                                                               enumerate(n.fabric_ports)]}}
              for n in cluster.nodes}
    return env.from_string(tasks[0]["ansible.builtin.shell"]["cmd"]).render(
        spark_fabric_pair=yaml.safe_load(pair), hostvars=probes,
        spark_fabric_probe_result=probes[node]["spark_fabric_probe_result"],
        spark_fabric_mesh_user="operator", spark_fabric_ib_seconds=7,
        spark_fabric_host_suffixes=["fab-a", "fab-b", "fab-c", "fab-d"])


def test_ib_round_measures_a_triangle_cable_from_the_ports_at_its_ends() -> None:
    cluster = _load("triangle-tp3")
    rounds = fabric.check_matrix(cluster)["bandwidth_rounds"]
    round_ = next(r for r in rounds if r[0]["src"] == "spark-0" and r[0]["dst"] == "spark-2")
    cmd = " ".join(_render_round(cluster, "spark-0", round_).replace("\\\n", " ").split())
    # spark-0's np1 (its port [1]) is cabled to spark-2's np0 (its port [0], name spark-2-fab-a).
    assert "spark-2-fab-a \"timeout 37 ib_write_bw -d rocep1s0f0 -x 3 -p 18515" in cmd
    client = "ib_write_bw -d rocep1s0f1 -x 4 -p 18515 -F --report_gbits -D 7 -q 1 -s 65536 -m 4096"
    assert f"{client} 10.77.2.12" in cmd
    assert 'echo "1 enp1s0f1np1 ${bw:-0}"' in cmd
    assert cmd.count("ib_write_bw -d") == 2  # one lane: one server, one client


# --- the probe sends the rendered pings -------------------------------------------------------------


def _load_probe(monkeypatch: pytest.MonkeyPatch) -> Any:
    import importlib.util
    import sys

    import sparkctl
    import sparkctl.nodeside

    monkeypatch.setitem(sys.modules, "ansible.module_utils.sparkctl", sparkctl)
    monkeypatch.setitem(sys.modules, "ansible.module_utils.sparkctl.nodeside", sparkctl.nodeside)
    path = ROOT / "roles/spark_fabric/library/sparkctl_fabric_probe.py"
    spec = importlib.util.spec_from_file_location("sparkctl_fabric_probe_topology", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_probe_sends_exactly_the_rendered_pings(monkeypatch: pytest.MonkeyPatch) -> None:
    probe = _load_probe(monkeypatch)
    cluster = _load("triangle-tp3")
    node = cluster.node("spark-0")
    rendered = cluster_facts(cluster)["fabric_check"]["pings"]["spark-0"]
    sent: list[tuple[str, str]] = []
    done: dict[str, Any] = {}

    class Module:
        def __init__(self, argument_spec: dict[str, Any], supports_check_mode: bool) -> None:
            assert "pings" in argument_spec
            self.params = {"ports": [{"netdev": str(p.netdev), "hca": str(p.hca), "address": str(p.address)}
                                     for p in node.fabric_ports],
                           "peers": [], "pings": rendered, "size": 8972, "count": 5, "rounds": 3,
                           "timeout": 1, "counters": False}

        def exit_json(self, **kw: Any) -> None:
            done.update(kw)

    def ping(dev: str, dst: str, *_: Any) -> dict[str, Any]:
        sent.append((dev, dst))
        return {"ok": True, "kind": "ok", "detail": "5/5 replies"}

    monkeypatch.setattr(probe, "AnsibleModule", Module)
    monkeypatch.setattr(probe, "ping", ping)
    monkeypatch.setattr(probe, "port_facts", lambda port, addresses: {"netdev": port["netdev"]})
    monkeypatch.setattr(probe.links, "ipv4_addresses", dict)
    monkeypatch.setattr(probe.rdma, "present", lambda: False)
    probe.main()
    # From each cable's port to the other end of that cable, not from port [i] to the peer's port [i].
    assert sorted(sent) == [("enp1s0f0np0", "10.77.1.11"), ("enp1s0f1np1", "10.77.2.12")]
    assert [(p["peer"], p["dst_netdev"], p["subnet"]) for p in done["pings"]] == [
        ("spark-1", "enp1s0f0np0", "10.77.1.0/24"), ("spark-2", "enp1s0f0np0", "10.77.2.0/24"),
    ]


# --- the node-to-node details: the cables named in netplan, the traffic class on a QoS'd cable ------


def test_netplan_of_a_cabled_node_names_each_ports_cable() -> None:
    cluster = _load("triangle-tp3")
    text = host.netplan(cluster, cluster.node("spark-2"))
    assert ("# enp1s0f0np0: 10.77.2.0/24, the cable to spark-0 enp1s0f1np1 (10.77.2.10)\n"
            "# enp1s0f1np1: 10.77.3.0/24, the cable to spark-1 enp1s0f1np1 (10.77.3.11)\n") in text
    switched = _load("switch-tp8")
    assert "the cable to" not in host.netplan(switched, switched.node("spark-0"))


def test_host_qos_on_both_ends_of_a_cable_gets_the_traffic_class() -> None:
    cluster = _load("triangle-tp3")
    assert not cluster.fabric.host_qos  # the example leaves the publisher's environment alone
    assert "NCCL_IB_TC" not in rank.rank_env(cluster, cluster.node("spark-0"))
    qos = cluster.model_copy(update={"fabric": cluster.fabric.model_copy(update={"host_qos": True})})
    env = rank.rank_env(qos, qos.node("spark-0"))
    # Node to node both ends are hosts with PFC on priority 3: the marked class is lossless end to end.
    assert (env["NCCL_IB_TC"], env["B12X_ROCE_TRAFFIC_CLASS"]) == ("106", "106")
    assert "After=network-online.target sparkctl-roce-qos.service" in rank.rank_unit(qos, qos.node("spark-0"))
