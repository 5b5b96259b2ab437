"""One place for each fact: the container flags, the cluster dict, the API URL, the served model
name and the secrets file are each rendered by one function that every consumer shares."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkctl.model import Runtime, load_inventory
from sparkctl.model.offline import validate_inventory
from sparkctl.profiles import load_profile
from sparkctl.render import cluster_facts, common, node_facts, plan_document, rank
from sparkctl.serve import probe
from sparkctl.serve.probe import expected_hashes

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "inventory" / "example"
LOOKUPS = ROOT / "roles" / "spark_rank" / "lookup_plugins"


@pytest.fixture(scope="module")
def example() -> Any:
    return load_inventory(EXAMPLE)


def _flags(cmd: list[str]) -> list[str]:
    """The `docker run` options before the first mount, without those that name this container."""
    head = cmd[: cmd.index("--mount")]
    out, skip = [], False
    for word in head:
        if skip:
            skip = False
            continue
        if word in ("--name", "--env-file"):
            skip = True
            continue
        if word != "--rm":
            out.append(word)
    return out


def test_nccl_check_runs_in_the_ranks_container(example: Any) -> None:
    node = example.node("spark-2")
    rank_cmd = rank.container_command(example, node)
    nccl = rank.nccl_check(example, node)
    cmd = nccl["command"]
    assert _flags(cmd) == _flags(rank_cmd)
    assert {"--pull", "never"} <= set(cmd) and "nofile=1048576:1048576" in cmd
    assert cmd[cmd.index("--env-file") + 1] == nccl["env_file"] == common.NCCL_CHECK_ENV_FILE
    assert not any(w == "-e" for w in cmd), "environment goes through the env file"
    image = cmd[cmd.index("--entrypoint") + 2]
    assert image == rank_cmd[rank_cmd.index("--entrypoint") + 2] == example.runtime.image
    tail = cmd[cmd.index("--entrypoint") + 3 :]
    assert tail[:1] == [common.CONTAINER_NCCL_SCRIPT]
    assert tail[tail.index("--rank") + 1] == "2" and tail[tail.index("--world-size") + 1] == "4"
    assert tail[tail.index("--master-addr") + 1] == str(example.head.fabric_ip)
    assert tail[tail.index("--master-port") + 1] == str(example.ports.nccl_test)
    assert nccl["env"] == {}, "a container gets its environment from the file, not the process"


def test_nccl_check_outside_a_container_uses_the_runtimes_python(example: Any) -> None:
    venv = example.model_copy(update={"runtime": Runtime(kind="venv", venv_path="/opt/v")})
    node = venv.node("spark-1")
    nccl = rank.nccl_check(venv, node)
    assert nccl["command"][:2] == ["/opt/v/bin/python", common.NCCL_CHECK_SCRIPT]
    assert nccl["env"] == rank.rank_env(venv, node)
    lab = example.model_copy(update={"runtime": Runtime(kind="lab")})
    assert rank.nccl_check(lab, node)["command"][:3] == ["/usr/bin/env", "python3", common.NCCL_CHECK_SCRIPT]


def test_plan_document_carries_the_nccl_check(example: Any) -> None:
    entry = plan_document(example, "spark-3")["nodes"][0]
    assert entry["nccl_check"] == rank.nccl_check(example, example.node("spark-3"))


@pytest.mark.parametrize(
    "value", ["sk-plain", 'a"quote', "back\\slash", "colon: hash #", "{{ jinja }}", "é ü"]
)
def test_secrets_file_holds_any_value_verbatim(example: Any, value: str) -> None:
    text = rank.rank_secrets_text(example, {"api_key": value})
    assert yaml.safe_load(text) == {"api-key": value}
    assert rank.rank_secrets_text(example) == rank.rank_secrets_text(example, None)
    assert yaml.safe_load(rank.rank_secrets_text(example)) == {"api-key": "<secret:api_key>"}


def test_cluster_facts_is_the_one_dict(example: Any) -> None:
    facts = cluster_facts(example)
    assert json.loads(json.dumps(facts)) == facts
    assert facts["nodes"] == [node_facts(example, n) for n in example.nodes]
    for entry in plan_document(example)["nodes"]:
        node = example.node(entry["name"])
        assert {k: entry[k] for k in node_facts(example, node)} == node_facts(example, node)
    assert facts["api_url"] == rank.api_url(example) == "http://192.168.7.10:8004"
    assert facts["served_model_name"] == "deepseek-v41-flash"
    assert facts["tp_size"] == 4
    assert facts["memory"]["disk_margin_gib"] == example.profile.memory.disk_margin_gib
    assert facts["secrets"] == ["api_key"] and "SPARKCTL_API_KEY" not in json.dumps(facts)


def test_served_model_name_defaults_to_the_model_path_the_rank_gets(example: Any) -> None:
    profile = load_profile("r4-nvme")
    args = {k: v for k, v in profile.args.items() if k != "--served-model-name"}
    bare = example.model_copy(update={"profile": profile.model_copy(update={"args": args})})
    argv = rank.rank_argv(bare, bare.head)
    model_path = argv[argv.index("--model-path") + 1]
    assert rank.served_model_name(bare) == model_path == "/models/DeepSeek-V4.1-Flash"


def _lookup(inv: Path, expr: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    bin_dir = Path(sys.executable).parent
    full = {k: v for k, v in os.environ.items() if k != "SPARKCTL_API_KEY"}
    full.update(env, ANSIBLE_LOOKUP_PLUGINS=str(LOOKUPS), ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
                PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    return subprocess.run(
        [str(bin_dir / "ansible"), "localhost", "-i", "localhost,", "-c", "local", "-o",
         "-m", "ansible.builtin.debug", "-a", f"msg={{{{ {expr} | to_json }}}}"],
        capture_output=True, text=True, cwd=ROOT, env=full, timeout=120, check=False,
    )


def test_secrets_lookup_resolves_through_the_model(example_copy: Path) -> None:
    value = 'sk-"lookup" \\ {{ x }}'
    proc = _lookup(example_copy, f"lookup('sparkctl_rank_secrets', '{example_copy}')",
                   {"SPARKCTL_API_KEY": value})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = json.loads(json.loads(proc.stdout.split('"msg": ', 1)[1].rsplit("}", 1)[0]))
    cluster = load_inventory(example_copy)
    assert got == rank.rank_secrets_text(cluster, {"api_key": value})
    assert yaml.safe_load(got) == {"api-key": value}


def test_secrets_lookup_check_names_the_missing_secret(example_copy: Path) -> None:
    proc = _lookup(example_copy, f"query('sparkctl_rank_secrets', '{example_copy}', check=true)", {})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "secret api_key (env:SPARKCTL_API_KEY)" in proc.stdout and "is not set" in proc.stdout


def test_validate_json_prints_the_cluster_facts(run_cli: Any) -> None:
    result = run_cli("-i", str(EXAMPLE), "--json", "validate")
    assert result.code == 0, result.err
    doc = json.loads(result.out)
    assert doc.pop("ok") is True
    assert isinstance(doc.pop("sglang_parser"), bool)  # whether SGLang's own parser ran too
    # the cluster's facts, with validate's notes on this controller among its warnings
    assert doc == json.loads(json.dumps(cluster_facts(validate_inventory(EXAMPLE))))


def test_status_hashes_the_secrets_file_the_role_writes(
    example: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    value = 'sk-"quoted" \\ value'
    monkeypatch.setenv("SPARKCTL_API_KEY", value)
    entry = plan_document(example, "spark-0")["nodes"][0]
    written = rank.rank_secrets_text(example, {"api_key": value})
    hashes = expected_hashes(example, entry)
    key = bytes.fromhex(probe.HASH_KEY)  # keyed: a published digest is no oracle for the key
    assert hashes[common.RANK_SECRETS_FILE] == hmac.new(key, written.encode(), hashlib.sha256).hexdigest()
