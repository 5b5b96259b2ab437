"""An API key kept with ansible-vault, end to end on the lab: validate, plan, provision, up.

A copy of the lab inventory whose ``sparkctl_secrets.api_key`` is ``{var: vault_sparkctl_api_key}``,
the variable living in a vault-encrypted ``group_vars/all/vault.yml``; the vault password comes from
``--vault-password-file``. The node's 0600 secrets config must hold the decrypted key, rank 0 must
accept it (and refuse a wrong one), and the key must appear in no run record, argv or rank file.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import yaml
from ansible.parsing.vault import VaultLib, VaultSecret

if TYPE_CHECKING:
    from conftest import Lab

pytestmark = pytest.mark.integration

HEAD = "spark-0"
SECRETS_FILE = "/etc/sparkctl/rank-secrets.yaml"


def _ok(proc: Any, what: str) -> None:
    tail = f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, f"{what} exited {proc.returncode}\n{tail}"


class Vaulted:
    def __init__(self, lab: Lab, inventory: Path, password_file: Path, key: str, runs: Path):
        self.lab, self.inventory, self.password_file, self.key, self.runs = (
            lab, inventory, password_file, key, runs,
        )

    def sparkctl(self, *args: str, json_out: bool = False, timeout: float = 900) -> Any:
        argv = ["-i", str(self.inventory), "--vault-password-file", str(self.password_file)]
        if json_out:
            argv.append("--json")
        # run_sparkctl puts `-i <lab inventory>` first; a later -i (ours) wins.
        return self.lab.run_sparkctl(*argv, *args, timeout=timeout, env={"SPARKCTL_RUNS_DIR": str(self.runs)})


@pytest.fixture(scope="module")
def vaulted(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Vaulted]:
    base = tmp_path_factory.mktemp("vault")
    inv = base / "site"
    shutil.copytree(lab.inventory, inv, ignore=shutil.ignore_patterns(".written-by-sparkctl-lab"))
    password_file = base / "vault-pass"
    password_file.write_text(secrets.token_urlsafe(24) + "\n")
    password_file.chmod(0o600)
    key = "vaulted-" + secrets.token_hex(16)
    site = inv / "group_vars/all/sparkctl.yml"
    doc = yaml.safe_load(site.read_text())
    doc["sparkctl_secrets"] = {"api_key": {"var": "vault_sparkctl_api_key"}}
    # The subject here is the key, not the fabric: ranks bootstrap and stage over the management
    # network, so provisioning needs only the base, runtime and firewall roles (the firewall must
    # let the stage agents and the ranks talk over management).
    doc["sparkctl_fabric"].update(bootstrap_over="mgmt", stage_over_fabric=False)
    site.write_text(yaml.safe_dump(doc, sort_keys=False))
    vault = VaultLib([("default", VaultSecret(password_file.read_text().strip().encode()))])
    plain = yaml.safe_dump({"vault_sparkctl_api_key": key}).encode()
    (inv / "group_vars/all/vault.yml").write_bytes(vault.encrypt(plain))
    handle = Vaulted(lab, inv, password_file, key, base / "runs")
    yield handle
    lab.heal()
    handle.sparkctl("down")


def test_validate_and_plan_with_a_vaulted_key(vaulted: Vaulted) -> None:
    _ok(vaulted.sparkctl("validate"), "validate")
    plan = vaulted.sparkctl("plan", json_out=True)
    _ok(plan, "plan --json")
    assert vaulted.key not in plan.stdout
    head = next(n for n in json.loads(plan.stdout)["nodes"] if n["name"] == HEAD)
    assert "<secret:api_key>" in head["files"][SECRETS_FILE]
    # Without the password the inventory does not load, and says which file and what to do.
    env = {k: v for k, v in os.environ.items() if k != "ANSIBLE_VAULT_PASSWORD_FILE"}
    bare = subprocess.run(
        [sys.executable, "-m", "sparkctl", "-i", str(vaulted.inventory), "--json", "validate"],
        capture_output=True, text=True, timeout=120, env=env,
    )
    assert bare.returncode == 2, bare.stdout + bare.stderr
    assert "group_vars/all/vault.yml" in bare.stdout and "vault-password-file" in bare.stdout


def test_provision_and_up_write_the_decrypted_key(vaulted: Vaulted) -> None:
    _ok(vaulted.sparkctl("provision", "--tags", "base,runtime,firewall"), "provision")
    _ok(vaulted.sparkctl("stage"), "stage")
    up = vaulted.sparkctl("up", "--yes", json_out=True)
    _ok(up, "up")
    assert json.loads(up.stdout)["result"] == "ready"

    lab = vaulted.lab
    assert lab.ssh(HEAD, f"stat -c %a {SECRETS_FILE}").stdout.strip() == "600"
    # The file holds the decrypted key: searched for on the node from stdin, never in argv.
    found = subprocess.run(
        ["ssh", "-F", str(lab.ssh_config), HEAD, f"umask 077; cat > /run/vault-pattern; "
         f"grep -c -F -f /run/vault-pattern {SECRETS_FILE}; rm -f /run/vault-pattern"],
        input=vaulted.key + "\n", capture_output=True, text=True, timeout=60,
    )
    assert found.stdout.strip() == "1", found.stdout + found.stderr

    url = f"http://{lab.mgmt_ip(HEAD)}:8004/v1/models"
    assert httpx.get(url, headers={"Authorization": f"Bearer {vaulted.key}"}, timeout=10).status_code == 200
    assert httpx.get(url, headers={"Authorization": "Bearer not-the-key"}, timeout=10).status_code == 401

    # Not in any run record (events, stdout, env, command) of validate/plan/provision/stage/up.
    leaked = [p for p in vaulted.runs.rglob("*") if p.is_file() and vaulted.key.encode() in p.read_bytes()]
    assert leaked == []
