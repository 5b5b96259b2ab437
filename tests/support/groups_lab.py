"""Two serving groups on the four-node lab, for the lab modules that need them (the groups module,
the router module): a copy of the lab's inventory with group a (spark-0, spark-1) and group b
(spark-2, spark-3), each TP2, optionally with SGLang's gateway in front; and ``restore``, which
leaves the lab as the lab's own one-group inventory had it.

What two groups leave behind, and ``restore`` takes away:

* on every node the TP2 Engram shards and their manifests (``*-r{0,1}of2*`` in ``engram_dir``,
  next to the lab's own ``r{rank}of4``);
* on every node the rank unit, environment and secret files rendered for a TP2 group: the lab's own
  `up` puts its own back (its fast path sees them differ);
* on the controller each group's supervisor directory (``<site>-a``, ``<site>-b``: ready marks,
  pause, lock);
* with the router: its unit, credential file and venv on the router node, and the firewalls that
  put the groups' API port behind it (the lab's own are loaded again).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
GROUPS = {"a": ["spark-0", "spark-1"], "b": ["spark-2", "spark-3"]}
TP2 = {"args": {"--tp-size": 2, "--ep-size": 2}}
RANK_UNIT = "sparkctl-rank.service"
ROUTER_UNIT = "sparkctl-router.service"


def ok(proc: Any, what: str) -> None:
    tail = f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, f"{what} exited {proc.returncode}\n{tail}"


class GroupsSite:
    """The lab (``conftest.Lab``) served as two TP2 groups through the inventory copy ``inventory``."""

    def __init__(self, lab: Any, inventory: Path, router: dict[str, Any] | None = None):
        self.lab, self.inventory, self.router = lab, inventory, router

    @classmethod
    def make(cls, lab: Any, where: Path, router: dict[str, Any] | None = None) -> GroupsSite:
        """Copy the lab's inventory to ``where``/lab and give it the two groups (and ``router`` as
        ``sparkctl_router``); the lab's own inventory is not changed."""
        inv = where / "lab"
        shutil.copytree(lab.inventory, inv, symlinks=True)
        gv = next(inv.glob("group_vars/all/sparkctl*.yml"))
        doc = yaml.safe_load(gv.read_text())
        doc["sparkctl_groups"] = [{"name": name, "nodes": nodes, "profile_overrides": TP2}
                                  for name, nodes in GROUPS.items()]
        if router is not None:
            doc["sparkctl_router"] = router
        gv.write_text(yaml.safe_dump(doc))
        return cls(lab, inv, router)

    def run(self, *args: str, json_out: bool = False,
            timeout: float = 1200) -> subprocess.CompletedProcess[str]:
        """`sparkctl -i <the two-group copy> [--json] ARGS` (exit code not checked)."""
        flags = ["--json"] if json_out else []
        argv = [sys.executable, "-m", "sparkctl", "-i", str(self.inventory), *flags, *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=REPO,
                              env=dict(os.environ))

    def doc(self) -> dict[str, Any]:
        return dict(yaml.safe_load(next(self.inventory.glob("group_vars/all/sparkctl*.yml")).read_text()))

    def units(self) -> dict[str, str]:
        return {n: self.lab.ssh(n, f"systemctl is-active {RANK_UNIT}", check=False).stdout.strip()
                for nodes in GROUPS.values() for n in nodes}

    def rank_argv(self, node: str) -> str:
        """The running rank's engine command line on ``node`` (the lab image's simulator runs as
        ``python3 /usr/local/bin/sglang serve …`` in the rank's container), found by a pattern
        anchored at the interpreter, so neither the shell running the probe nor `docker run` can
        match it; nothing at all when no rank runs."""
        cmd = ("pid=$(pgrep -o -f '^[^ ]*python[^ ]* [^ ]*/sglang serve ') && "
               "tr '\\0' ' ' < /proc/$pid/cmdline")
        return str(self.lab.ssh(node, cmd, check=False).stdout)

    def served_requests(self, client: Any, node: str, key: str) -> float:
        """Requests ``node``'s rank 0 has counted (sglang:num_requests_total, the simulator's too)."""
        port = self.doc()["sparkctl_ports"]["api"]
        text = client.get(f"http://{self.lab.mgmt_ip(node)}:{port}/metrics",
                          headers={"Authorization": f"Bearer {key}"}).text
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("sglang:num_requests_total"))

    def router_row(self) -> dict[str, Any]:
        """`status`'s router row, read once. Right after `up` it lists every group's rank 0: `up`
        gates on it (``serve.routergate``), so a row missing a group is a failure, not a wait."""
        import json

        proc = self.run("status", json_out=True)
        return dict(json.loads(proc.stdout).get("router") or {}) if proc.stdout.strip() else {}

    def restore(self) -> list[str]:
        """Stop both groups (and the router) and leave the lab as its own inventory had it (the
        module docstring says what that takes). Returns what could not be undone, one line each."""
        from sparkctl.model import load_inventory
        from sparkctl.render import groups as rgroups
        from sparkctl.serve import events

        problems: list[str] = []
        down = self.run("down")
        if down.returncode != 0:
            problems.append(f"down (two groups) exited {down.returncode}: {down.stderr[-500:]}")
        cluster = load_inventory(self.inventory)
        if self.router is not None:
            node = self.router["node"]
            gone = self.lab.ssh(node, f"systemctl stop {ROUTER_UNIT}; systemctl reset-failed {ROUTER_UNIT}; "
                                f"rm -rf /etc/systemd/system/{ROUTER_UNIT} /etc/sparkctl/router-api-key "
                                "/opt/sparkctl/router && systemctl daemon-reload", check=False)
            if gone.returncode != 0:
                problems.append(f"{node}: removing the router exited {gone.returncode}: {gone.stderr[-300:]}")
            fw = self.lab.run_sparkctl("provision", "--tags", "firewall", timeout=1200)
            if fw.returncode != 0:
                problems.append(f"provision --tags firewall (the lab's own) exited {fw.returncode}: "
                                f"{fw.stderr[-500:]}")
        engram = cluster.paths.engram_dir
        tp2 = f"rm -f {engram}/engram-*-r[0-9]of2.bin* {engram}/manifest-r[0-9]of2.json"
        for nodes in GROUPS.values():
            for node in nodes:
                rm = self.lab.ssh(node, tp2, check=False)
                if rm.returncode != 0:
                    problems.append(f"{node}: removing the TP2 shards exited {rm.returncode}: "
                                    f"{rm.stderr[-300:]}")
        for g in cluster.groups:
            shutil.rmtree(events.supervisor_dir(rgroups.view_name(cluster, g)), ignore_errors=True)
        return problems
