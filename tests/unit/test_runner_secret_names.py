"""Only the secrets the inventory declares leave the playbook's environment: a vault password
script reading $VAULT_PASS, ANSIBLE_BECOME_PASS or a git token keep their variables, whatever their
names look like; the declared ones are withheld and reach the playbook through the memfd."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparkctl.ansible import plan as plan_
from sparkctl.ansible import runner
from sparkctl.ansible.plan import Plan
from sparkctl.model import load_inventory, secretenv

VAULT_PASS = "vault-pass-1f3e"
DECLARED = "sk-declared-9a8b7c"
HF = "hf_declared_token_5d4c"
KEPT = {"VAULT_PASS": VAULT_PASS, "ANSIBLE_BECOME_PASS": "become-pass-0a0b", "GITHUB_TOKEN": "ghp_kept",
        "DEPLOY_API_KEY": "kept-key", "ANSIBLE_PRIVATE_KEY_FILE": "/dev/null"}
ANSIBLE_BIN = Path(sys.executable).parent


def _project(tmp: Path) -> Path:
    """A playbook whose inventory holds a vaulted variable; the vault password comes from a script
    that reads $VAULT_PASS (the way many sites feed vault passwords to Ansible)."""
    script = tmp / "vault-pass.sh"
    script.write_text('#!/bin/sh\nprintf "%s\\n" "$VAULT_PASS"\n')
    script.chmod(0o700)
    pw_file = tmp / "pw"
    pw_file.write_text(VAULT_PASS + "\n")
    # Only this password: a vault setting another test left in the worker's environment
    # (ANSIBLE_VAULT_*) or an ansible.cfg in the working directory would add a second vault id,
    # and encrypt_string then refuses to choose (exit 5).
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    (tmp / "ansible.cfg").write_text("[defaults]\n")
    proc = subprocess.run([str(ANSIBLE_BIN / "ansible-vault"), "encrypt_string", "--vault-password-file",
                           str(pw_file), "vaulted-value", "--name", "vaulted"],
                          capture_output=True, text=True, timeout=60, cwd=tmp,
                          env={**env, "ANSIBLE_CONFIG": str(tmp / "ansible.cfg")})
    assert proc.returncode == 0, proc.stderr
    enc = proc.stdout
    pw_file.unlink()
    (tmp / "playbooks").mkdir()
    env_facts = "".join(f"          {n}: \"{{{{ lookup('ansible.builtin.env', '{n}') }}}}\"\n" for n in KEPT)
    (tmp / "playbooks" / "probe.yml").write_text(
        "- name: Environment probe\n  hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - name: What the playbook sees\n      ansible.builtin.set_fact:\n"
        "        seen:\n" + env_facts +
        "          SITE_API_KEY: \"{{ lookup('ansible.builtin.env', 'SITE_API_KEY') }}\"\n"
        "          HF_TOKEN: \"{{ lookup('ansible.builtin.env', 'HF_TOKEN') }}\"\n"
        + "".join(f"          memfd_{n}: \"{{{{ (lookup('ansible.builtin.file', "
                  f"lookup('ansible.builtin.env', 'SPARKCTL_SECRETS_FD')) | from_json).{n} "
                  "| hash('sha256') }}\"\n"
                  for n in ("SITE_API_KEY", "HF_TOKEN")) +
        "          vaulted: \"{{ vaulted }}\"\n"
    )
    (tmp / "hosts.yml").write_text(
        "all:\n  vars:\n    ansible_connection: local\n"
        f"    ansible_python_interpreter: {sys.executable}\n"
        + "".join(f"    {line}\n" for line in enc.strip().splitlines())
        + "  hosts:\n    a: {}\n"
    )
    return tmp


def test_undeclared_secret_looking_variables_stay_and_declared_ones_go_through_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = _project(tmp_path)
    for name, value in {**KEPT, "SITE_API_KEY": DECLARED, "HF_TOKEN": HF}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(project / "vault-pass.sh"))
    plan = Plan("probe.yml", project / "hosts.yml", secret_env=("HF_TOKEN", "SITE_API_KEY"))
    res = runner.execute(plan, runs_dir=project / "runs", project_dir=project)
    assert res.ok, res.failures  # the vault password script found $VAULT_PASS
    seen = res.task_results("What the playbook sees")["a"]["ansible_facts"]["seen"]
    assert seen["vaulted"] == "vaulted-value"
    assert {n: seen[n] for n in KEPT} == KEPT
    assert seen["SITE_API_KEY"] == "" and seen["HF_TOKEN"] == ""  # withheld from the environment ...
    assert seen["memfd_SITE_API_KEY"] == _sha(DECLARED) and seen["memfd_HF_TOKEN"] == _sha(HF)  # in memory
    command = json.loads((res.artifact_dir / "command").read_text())
    assert "SITE_API_KEY" not in command["env"] and "HF_TOKEN" not in command["env"]
    for path in (project / "runs").rglob("*"):
        if path.is_file():
            text = path.read_text(errors="replace")
            assert DECLARED not in text and HF not in text, path


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_withheld_takes_only_the_declared_names(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in KEPT.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("SITE_API_KEY", DECLARED)
    with secretenv.withheld(["SITE_API_KEY", "NOT_SET_ANYWHERE"]) as child:
        assert all(os.environ[n] == v for n, v in KEPT.items())
        assert "SITE_API_KEY" not in os.environ
        assert json.loads(Path(child[secretenv.SECRETS_FD_ENV]).read_text()) == {"SITE_API_KEY": DECLARED}
    assert os.environ["SITE_API_KEY"] == DECLARED


def test_the_plan_declares_the_inventorys_secret_variables(example_copy: Path) -> None:
    cluster = load_inventory(example_copy)
    assert plan_.secret_env_names(cluster) == ("HF_TOKEN", "SPARKCTL_API_KEY")
    assert plan_.for_up(cluster).secret_env == ("HF_TOKEN", "SPARKCTL_API_KEY")
