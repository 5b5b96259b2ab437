"""The fast path of `up` (sparkctl.serve.fastup): what a node must hold for the playbook to be skipped,
the node-side check run for real on this machine, and the start in the rendered order."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support import gates_fakes as fakes
from support.gates_fakes import KIT_VERSION, container_site

from sparkctl.errors import SparkctlError
from sparkctl.nodeside import kit as nodekit
from sparkctl.serve import fastup, probe
from sparkctl.ssh.fleet import HostResult, Target

HEAD_ID = "sha256:" + "1" * 64
OTHER_ID = "sha256:" + "2" * 64


@pytest.fixture
def site(tmp_path: Path) -> tuple[Any, dict[str, Any]]:
    return container_site(tmp_path)


def answers(cluster: Any, doc: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: fakes.clean_upcheck(cluster, e, HEAD_ID, KIT_VERSION) for e in doc["nodes"]}


def test_nodes_holding_what_the_playbook_installs_take_the_fast_path(site: Any) -> None:
    cluster, doc = site
    assert fastup.judge(cluster, doc, answers(cluster, doc), kit_needed=True) == []
    entry = doc["nodes"][1]
    assert fastup.installed_files(entry) == [
        "/etc/systemd/system/sparkctl-rank.service", "/etc/sparkctl/rank.env",
        "/etc/sparkctl/rank-secrets.yaml", "/srv/sparkctl/run/kit-files/profile.json", PRESTART]


def test_the_prestart_is_checked_against_the_file_the_role_copies(site: Any) -> None:
    """The spark_rank role copies roles/spark_rank/files/nodeside/prestart.py; the fast path expects
    exactly those bytes (keyed), so a node holding an older copy takes the playbook."""
    cluster, doc = site
    entry = doc["nodes"][0]
    role_copy = Path(__file__).resolve().parents[2] / "roles/spark_rank/files/nodeside/prestart.py"
    key = bytes.fromhex(probe.HASH_KEY)
    want = hmac.new(key, role_copy.read_bytes(), hashlib.sha256).hexdigest()
    assert fastup.expected_digests(cluster, entry)[PRESTART] == want


def _set(ans: dict[str, Any], node: str, path: list[str], value: Any) -> None:
    where = ans[node]
    for key in path[:-1]:
        where = where[key]
    where[path[-1]] = value


ENV, SECRETS, KIT_FILE = "/etc/sparkctl/rank.env", "/etc/sparkctl/rank-secrets.yaml", \
    "/srv/sparkctl/run/kit-files/profile.json"
PRESTART = "/opt/sparkctl/rank/prestart.py"  # the kit's pre-start checks (render.rank.PRESTART_SCRIPT)


@pytest.mark.parametrize(("path", "value", "reason"), [
    (["files", ENV, "digest"], "0" * 64, f"spark-2: {ENV} differs from the rendered file"),
    (["files", SECRETS], None, f"spark-2: {SECRETS} is not installed"),
    (["files", KIT_FILE, "digest"], "f" * 64, f"spark-2: {KIT_FILE} differs from the rendered file"),
    (["files", ENV, "mode"], "0644", f"spark-2: {ENV} has mode 0644, rendered 0600"),
    (["files", ENV, "uid"], 1000, f"spark-2: {ENV} is owned by 1000:0, not root"),
    (["files", PRESTART, "digest"], "e" * 64, f"spark-2: {PRESTART} differs from the rendered file"),
    (["files", PRESTART], None, f"spark-2: {PRESTART} is not installed"),
    (["dirs", "/etc/sparkctl", "mode"], "0755", "spark-2: directory /etc/sparkctl has mode 0755, want 0700"),
    (["dirs", "/srv/sparkctl/run/state"], None, "spark-2: directory /srv/sparkctl/run/state is missing"),
    (["unit", "NeedDaemonReload"], "yes", "spark-2: systemd has not loaded the installed unit"),
    (["kit", "problems"], [nodekit.problem("patches/source/x.py", "content differs", "a" * 64, "b" * 64)],
     f"spark-2: kit {KIT_VERSION} fails verification: patches/source/x.py: content differs "
     f"(expected {'a' * 64}, actual {'b' * 64})"),
    (["image", "found"], None, "spark-2: has no image under sparkctl-lab/engine:kit"),
    (["image", "found", "id"], OTHER_ID, f"spark-2: the image under sparkctl-lab/engine:kit is {OTHER_ID}, "
                                         f"not the head's {HEAD_ID}"),
])
def test_each_difference_on_one_node_is_named(site: tuple[Any, dict[str, Any]], path: list[str], value: Any,
                                               reason: str) -> None:
    cluster, doc = site
    ans = answers(cluster, doc)
    _set(ans, "spark-2", path, value)
    reasons = fastup.judge(cluster, doc, ans, kit_needed=True)
    assert len(reasons) == 1 and reasons[0].startswith(reason), reasons


def test_the_pin_is_the_reference_when_there_is_one(tmp_path: Path) -> None:
    cluster, doc = container_site(tmp_path, image_id=OTHER_ID)
    reasons = fastup.judge(cluster, doc, answers(cluster, doc), kit_needed=True)
    assert reasons == [f"{n}: the image under sparkctl-lab/engine:kit is {HEAD_ID}, "
                       f"not the pinned image {OTHER_ID}" for n in ("spark-0", "spark-1", "spark-2",
                                                                     "spark-3")]


def test_an_unreachable_node_or_no_kit_answer_means_the_playbook(site: tuple[Any, dict[str, Any]]) -> None:
    cluster, doc = site
    ans: dict[str, Any] = answers(cluster, doc)
    ans["spark-3"] = "unreachable: timed out connecting to 10.250.0.13:22"
    del ans["spark-1"]["kit"]
    assert fastup.judge(cluster, doc, ans, kit_needed=True) == [
        "spark-1: the kit was not checked", "spark-3: unreachable: timed out connecting to 10.250.0.13:22"]


def test_the_secrets_file_is_compared_by_keyed_digest_only(site: tuple[Any, dict[str, Any]]) -> None:
    cluster, doc = site
    entry = doc["nodes"][0]
    want = fastup.expected_digests(cluster, entry)
    text = f"api-key: {fakes.API_KEY}\n"
    assert want[SECRETS] != hashlib.sha256(text.encode()).hexdigest()  # not a guessing oracle
    scripts = [fastup.check_script(fastup.check_params(cluster, e, None)) for e in doc["nodes"]]
    assert not any(fakes.API_KEY in s for s in scripts)
    assert all(probe.HASH_KEY in s for s in scripts)  # the nodes digest under the controller's key


# --- the node side, run here ---------------------------------------------------------------------


def _run(script: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["/bin/sh", "-s"], input=script, capture_output=True, text=True, timeout=60,
                          env=env, check=False)


def test_the_node_check_reads_files_kit_and_image(tmp_path: Path) -> None:
    etc = tmp_path / "etc"
    etc.mkdir(mode=0o700)
    env_file, secrets = etc / "rank.env", etc / "rank-secrets.yaml"
    env_file.write_text("A=1\n")
    env_file.chmod(0o600)
    secrets.write_text(f"api-key: {fakes.API_KEY}\n")
    secrets.chmod(0o644)
    store = tmp_path / "kit"
    (store / KIT_VERSION / "patches").mkdir(parents=True)
    (store / KIT_VERSION / "patches" / "a.py").write_text("print(1)\n")
    (store / "current").symlink_to(KIT_VERSION)
    _digest, files = nodekit.tree(str(store / KIT_VERSION))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    docker = bin_dir / "docker"  # what `docker image inspect --format '{{.Id}} {{.Size}}' REF` prints
    docker.write_text(f"#!/bin/sh\necho '{HEAD_ID} 4096'\n")
    docker.chmod(0o755)
    params = {"mode": "upcheck", "files": [str(env_file), str(secrets), str(etc / "absent")],
              "dirs": [str(etc)], "unit": "sparkctl-rank.service", "hash_key": probe.HASH_KEY,
              "kit": {"store": str(store), "version": KIT_VERSION,
                      "expected": nodekit.file_manifest(_digest, files, {"source": "git"})},
              "image": {"ref": "sparkctl-lab/engine:kit", "want_id": None}}
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    proc = _run(fastup.check_script(params), env)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.splitlines()[-1])
    key = bytes.fromhex(probe.HASH_KEY)
    assert out["files"][str(env_file)]["digest"] == hmac.new(key, b"A=1\n", hashlib.sha256).hexdigest()
    assert out["files"][str(env_file)]["mode"] == "0600" and out["files"][str(secrets)]["mode"] == "0644"
    assert out["files"][str(etc / "absent")] is None
    assert out["dirs"][str(etc)]["mode"] == "0700" and out["dirs"][str(etc)]["dir"]
    assert out["kit"] == {"version": KIT_VERSION, "current": KIT_VERSION, "problems": [], "count": 0}
    assert out["image"]["found"] == {"id": HEAD_ID, "size": 4096, "by": "ref"}
    assert fakes.API_KEY not in proc.stdout + proc.stderr

    (store / KIT_VERSION / "patches" / "a.py").write_text("print(2)\n")  # tampered in place
    (store / "current").unlink()
    out = json.loads(_run(fastup.check_script(params), env).stdout.splitlines()[-1])
    problems = {(p["path"], p["problem"].split(",")[0]) for p in out["kit"]["problems"]}
    assert ("patches/a.py", "content differs") in problems
    assert any(p.endswith("current") and "points at nothing" in what for p, what in problems)


# --- the start -------------------------------------------------------------------------------------


def _fake_systemctl(tmp: Path, fail_starts: int) -> dict[str, str]:
    """A systemctl whose first ``fail_starts`` starts fail; `show` answers active after a start."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "systemctl").write_text(f"""#!/bin/sh
log={tmp}/log
if [ "$1" = start ]; then
  echo start >> $log
  n=$(grep -c start $log)
  [ $n -le {fail_starts} ] && {{ echo "Job failed (219/CGROUP)" >&2; exit 1; }}
  touch {tmp}/started; exit 0
fi
[ -e {tmp}/started ] && echo active || echo inactive
""")
    (bin_dir / "systemctl").chmod(0o755)
    return dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


@pytest.mark.parametrize(("fail_starts", "rc", "said"), [
    (0, 0, "active"), (2, 0, "active"), (3, 1, "systemctl start failed 3 times: Job failed (219/CGROUP)")])
def test_the_start_script_retries_then_waits_for_active(tmp_path: Path, fail_starts: int, rc: int,
                                                        said: str) -> None:
    env = _fake_systemctl(tmp_path, fail_starts)
    proc = _run(fastup.start_script("sparkctl-rank.service", wait_s=2, delay_s=0), env)
    assert proc.returncode == rc and proc.stdout.strip().splitlines()[-1] == said


class StartFleet:
    """Records which nodes each start round reached, in order; ``fail`` nodes answer exit 1."""

    def __init__(self, names: list[str], fail: tuple[str, ...] = ()) -> None:
        self.targets = {n: Target(n, "10.250.0.1") for n in names}
        self.rounds: list[list[str]] = []
        self.fail = fail

    def run(self, script: Any, timeout: float = 10.0, only: Any = None) -> dict[str, HostResult]:
        names = list(only)
        self.rounds.append(names)
        assert "systemctl start sparkctl-rank.service" in script
        return {n: HostResult(n, 1, "sparkctl-rank.service failed right after its start\n") if n in self.fail
                else HostResult(n, 0, "active\n") for n in names}


def test_the_units_start_workers_first_then_rank_0(site: tuple[Any, dict[str, Any]]) -> None:
    cluster, doc = site
    fleet = StartFleet([e["name"] for e in doc["nodes"]])
    took = fastup.start(cluster, doc, fleet)
    assert fleet.rounds == [["spark-1", "spark-2", "spark-3"], ["spark-0"]] and len(took) == 2


def test_a_worker_that_does_not_start_keeps_rank_0_stopped(site: tuple[Any, dict[str, Any]]) -> None:
    cluster, doc = site
    fleet = StartFleet([e["name"] for e in doc["nodes"]], fail=("spark-2",))
    with pytest.raises(SparkctlError) as err:
        fastup.start(cluster, doc, fleet)
    assert fleet.rounds == [["spark-1", "spark-2", "spark-3"]]
    assert err.value.details == ["spark-2: sparkctl-rank.service failed right after its start"]
