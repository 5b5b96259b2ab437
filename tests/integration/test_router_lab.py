"""SGLang's gateway in front of two serving groups on the lab (written to run on the lab; needs the
gateway's x86_64 wheel on the controller, see below).

The lab's four nodes serve as group a (spark-0, spark-1) and group b (spark-2, spark-3), each TP2,
and sparkctl_router puts the gateway on spark-1 with round_robin. The lab has no route out, so the
wheel comes from the controller: ``SPARKCTL_ROUTER_WHEELS`` names a directory holding
``smg-1.13.0-cp38-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl`` (``pip download --no-deps
--only-binary=:all: smg==1.13.0 -d DIR`` on an x86_64 controller with a route out); without it the
module is skipped with that reason. The lab's rootfs must carry python3-venv (the exporter's venv
already needs it).

provision loads the firewalls (the router port open to the API clients, the groups' API behind it);
`up --full` runs the up playbook, which installs the wheel (digest-checked on both ends) and starts
the router after the groups; status shows the router active and routing to both groups; requests
through the router with the site's key reach both groups' rank 0 (each counts them in
sglang:num_requests_total); a request without the key is refused by the router; `down` stops the router
first.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
from support.groups_lab import GROUPS, GroupsSite, ok

if TYPE_CHECKING:
    from conftest import Lab

pytestmark = pytest.mark.integration

ROUTER_NODE = "spark-1"
PORT, METRICS_PORT = 8889, 29000
WHEELS = os.environ.get("SPARKCTL_ROUTER_WHEELS", "")
UNIT = "sparkctl-router.service"


def _url(site: GroupsSite) -> str:
    return f"http://{site.lab.mgmt_ip(ROUTER_NODE)}:{PORT}"


@pytest.fixture(scope="module")
def site(served: Lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GroupsSite]:
    if not WHEELS or not any(Path(WHEELS).glob("smg-1.13.0-*x86_64*.whl")):
        pytest.skip("SPARKCTL_ROUTER_WHEELS names no directory holding the smg 1.13.0 x86_64 wheel "
                    "(the lab has no route out: the wheel comes from the controller)")
    served.run_sparkctl("down")
    router = {"node": ROUTER_NODE, "port": PORT, "metrics_port": METRICS_PORT,
              "policy": "round_robin", "wheel_dir": str(Path(WHEELS).absolute())}
    s = GroupsSite.make(served, tmp_path_factory.mktemp("router"), router)
    try:
        ok(s.run("validate"), "validate")
        ok(s.run("provision"), "provision (the firewalls: the router's port, the groups' API behind it)")
        ok(s.run("stage", "engram", timeout=1800), "stage engram (r0of2/r1of2 per group)")
        yield s
    finally:
        # The lab as its own inventory had it: the router gone, its own firewalls, no TP2 shards.
        left = s.restore()
        assert not left, left


def test_up_starts_the_router_after_the_groups(site: GroupsSite) -> None:
    ok(site.run("up", "--yes", "--full", json_out=True), "up --full")
    state = site.lab.ssh(ROUTER_NODE, f"systemctl is-active {UNIT}", check=False).stdout.strip()
    assert state == "active"
    cmdline = site.lab.ssh(ROUTER_NODE, "cat /proc/$(systemctl show -p MainPID --value "
                           f"{UNIT})/cmdline | tr '\\0' ' '", check=False).stdout
    key = site.lab.api_key_file.read_text().strip()
    assert "--worker-urls" in cmdline and key not in cmdline
    router = site.router_row()
    assert router["unit"] == "active" and router["health"] == 200 and router["missing"] == [], router


def test_requests_through_the_router_reach_both_groups(site: GroupsSite) -> None:
    key = site.lab.api_key_file.read_text().strip()
    auth = {"Authorization": f"Bearer {key}"}
    with httpx.Client(timeout=120) as client:
        before = {name: site.served_requests(client, nodes[0], key) for name, nodes in GROUPS.items()}
        models = client.get(f"{_url(site)}/v1/models", headers=auth)
        assert models.status_code == 200, models.text
        model = models.json()["data"][0]["id"]
        for i in range(6):  # round_robin over two workers: three each
            r = client.post(f"{_url(site)}/v1/chat/completions", headers=auth,
                            json={"model": model, "max_tokens": 8,
                                  "messages": [{"role": "user", "content": f"say {i}"}]})
            assert r.status_code == 200, r.text
        refused = client.post(f"{_url(site)}/v1/chat/completions",
                              json={"model": model, "messages": [{"role": "user", "content": "hi"}]})
        assert refused.status_code == 401
        after = {name: site.served_requests(client, nodes[0], key) for name, nodes in GROUPS.items()}
    assert all(after[name] > before[name] for name in GROUPS), (before, after)


def test_a_killed_router_is_restarted_and_down_stops_it_first(site: GroupsSite) -> None:
    site.lab.ssh(ROUTER_NODE, f"systemctl kill --signal=KILL {UNIT}", check=False)
    probe = f"sleep 8; systemctl is-active {UNIT}"
    assert site.lab.ssh(ROUTER_NODE, probe, check=False).stdout.strip() == "active"
    ok(site.run("down"), "down")
    assert site.lab.ssh(ROUTER_NODE, f"systemctl is-active {UNIT}", check=False).stdout.strip() != "active"
