"""The lab's Docker engines: running on every Spark after `lab up`, the base engine image on the
head, images that move between nodes with `docker save | docker load`, and the node firewall
beside Docker's own rules (SSH still gets in, neither removes the other's table)."""

from __future__ import annotations

import base64
import json
import shlex
import subprocess
from typing import Any

import pytest

pytestmark = pytest.mark.integration

BASE = "sparkctl-lab/engine-base:bookworm"


def test_docker_runs_on_every_spark_and_not_on_the_switch(lab: Any) -> None:
    for node in lab.nodes:
        assert lab.ssh(node, "systemctl is-active docker.service").stdout.strip() == "active", node
        info = lab.ssh(node, "docker info --format '{{.Driver}} {{.DockerRootDir}} {{.CgroupDriver}}'")
        assert info.stdout.split() == ["overlay2", "/var/lib/docker", "cgroupfs"], node
    switch = lab.ssh("lab-switch", "systemctl is-active docker.service", check=False)
    assert switch.stdout.strip() != "active"


def test_the_head_runs_the_base_image_offline(lab: Any) -> None:
    from sparkctl_lab import engine, kit

    head = lab.nodes[0]
    fmt = f'{{{{ index .Config.Labels "{engine.CONTENT_LABEL}" }}}}'
    label = lab.ssh(head, f"docker image inspect --format '{fmt}' {BASE}").stdout.strip()
    assert label == engine.ensure_tarball().key  # what `lab up` imported is what this checkout builds
    run = f"docker run --rm --network host --pull never {BASE}"
    assert "sglang serve" in lab.ssh(head, f"{run} sglang --help").stdout
    assert lab.ssh(head, f"{run} python3 -c 'import sparkctl_sim'").returncode == 0
    for path, data in kit.image_files().items():
        digest = lab.ssh(head, f"{run} sha256sum {path}").stdout.split()[0]
        assert digest == kit.sha256(data), path
    # The ranks' limits inside the machine's own hard limits, as the lab profile renders them.
    limits = lab.ssh(head, f"docker run --rm --pull never --cap-add IPC_LOCK --ulimit memlock=8388608 "
                           f"--ulimit nofile=20000:20000 {BASE} sh -c 'ulimit -l; ulimit -n'").stdout.split()
    assert limits == ["8192", "20000"]


def test_the_base_image_builds_the_kit_row_store_as_r4_does_and_names_its_commit(lab: Any) -> None:
    """What `stage kit` needs of the engine image (R4 scripts/cluster.py stage()): g++ as the
    entrypoint compiles adapter/row_store.cpp under -Wall -Wextra -Werror with the kit bound at
    /opt/sglang4, offline; and SGLANG_BUILD_COMMIT is the lock's sglang_commit (runtime/launch.py)."""
    from sparkctl_lab import kit

    head = lab.nodes[0]
    offline = "docker run --rm --network none --pull never"
    assert lab.ssh(head, f"{offline} {BASE} printenv SGLANG_BUILD_COMMIT").stdout.strip() == kit.SGLANG_COMMIT
    lock = json.loads(kit.files()[kit.LOCK])
    assert lock["sglang_commit"] == kit.SGLANG_COMMIT
    work = "/tmp/sparkctl-row-store-test"
    source = base64.b64encode(kit.files()[kit.ROW_STORE_SOURCE]).decode()
    dst = f"{work}/{kit.ROW_STORE_SOURCE}"
    lab.ssh(head, f"rm -rf {work} && mkdir -p {work}/adapter && echo {source} | base64 -d > {dst}")
    try:
        mount = f"type=bind,src={work},dst={kit.KIT_MOUNT}"
        build = ["docker", "run", "--rm", "--network", "none", "--pull", "never", "--mount", mount,
                 "--entrypoint", kit.ROW_STORE_BUILD[0], BASE, *kit.ROW_STORE_BUILD[1:]]
        proc = lab.ssh(head, shlex.join(build), check=False, timeout=180)
        assert proc.returncode == 0 and "warning" not in proc.stderr.lower(), proc.stderr[-2000:]
        probe = (
            "import ctypes; lib = ctypes.CDLL('/opt/sglang4/adapter/librow_store.so'); "
            "lib.row_store_version.restype = ctypes.c_char_p; print(lib.row_store_version().decode())"
        )
        loaded = lab.ssh(head, f"{offline} --mount {mount} {BASE} python3 -c {shlex.quote(probe)}")
        assert loaded.stdout.strip() == "sparkctl-lab-row-store 1"
    finally:
        lab.ssh(head, f"rm -rf {work}", check=False)


def test_an_image_moves_between_nodes_with_save_and_load(lab: Any) -> None:
    head, far = lab.nodes[0], lab.nodes[-1]
    probe = "sparkctl-lab/save-load-probe:test"
    lab.ssh(head, f"docker tag {BASE} {probe}")
    try:
        save = subprocess.Popen(
            ["ssh", "-F", str(lab.ssh_config), head, f"docker save {probe} | zstd -1 -q"],
            stdout=subprocess.PIPE,
        )
        load = subprocess.run(
            ["ssh", "-F", str(lab.ssh_config), far, "zstd -d -q | docker load"],
            stdin=save.stdout, capture_output=True, text=True, timeout=300, check=False,
        )
        assert save.wait(timeout=60) == 0 and load.returncode == 0, load.stderr
        ids = {n: lab.ssh(n, f"docker image inspect --format '{{{{.Id}}}}' {probe}").stdout.strip()
               for n in (head, far)}
        assert ids[head] == ids[far] and ids[head].startswith("sha256:")
        assert lab.ssh(far, f"docker run --rm --pull never {probe} true").returncode == 0
    finally:
        for node in (head, far):
            lab.ssh(node, f"docker image rm {probe} >/dev/null", check=False)


def test_the_node_firewall_and_docker_rules_coexist(lab: Any) -> None:
    # The whole provision (the firewall with it): the modules after this one in its stream then find
    # the lab provisioned, and their own `provision` is the fast path's one SSH round.
    proc = lab.run_sparkctl("provision", timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    node = lab.nodes[1]
    assert lab.ssh(node, "systemctl is-active sparkctl-firewall.service").stdout.strip() == "active"
    for restart in ("docker.service", "sparkctl-firewall.service"):
        lab.ssh(node, f"systemctl restart {restart}")
        tables = lab.ssh(node, "nft list tables").stdout.splitlines()
        # Docker's iptables-nft tables and the firewall's own table, after either restarts.
        assert {"table inet sparkctl", "table ip filter", "table ip nat"} <= set(tables), (restart, tables)
        # A fresh SSH connection still gets in (the firewall admits the controller).
        fresh = subprocess.run(
            ["ssh", "-F", str(lab.ssh_config), "-o", "ControlPath=none", node, "true"],
            capture_output=True, text=True, timeout=30, check=False,
        )
        assert fresh.returncode == 0, fresh.stderr
