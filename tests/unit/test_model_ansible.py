"""The inventory as ansible-core reads it: INI files, Ansible's precedence, templates and vault."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.parsing.vault import VaultLib, VaultSecret

from sparkctl import render
from sparkctl.ansible.runner import vault_environment
from sparkctl.errors import EXIT_USAGE, InputError
from sparkctl.model import load_inventory

PASSWORD = "correct horse battery staple"
KEY = "sk-vaulted-0123456789"
SITE = "group_vars/all/sparkctl.yml"


def _vault(password: str = PASSWORD) -> VaultLib:
    return VaultLib([("default", VaultSecret(password.encode()))])


def _inline(value: str, password: str = PASSWORD) -> str:
    """A YAML `!vault |` block, as `ansible-vault encrypt_string` writes it."""
    text = _vault(password).encrypt(value.encode()).decode()
    return "!vault |\n" + "".join(f"  {line}\n" for line in text.splitlines())


def _edit(path: Path, **changes: Any) -> None:
    doc = yaml.safe_load(path.read_text())
    doc.update(changes)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def _hosts(inv: Path) -> dict[str, Any]:
    return yaml.safe_load((inv / "hosts.yml").read_text())


@pytest.fixture
def password_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "vault-pass"
    path.write_text(PASSWORD + "\n")
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(path))
    return path


def _key_from_var(inv: Path) -> None:
    _edit(inv / SITE, sparkctl_secrets={"api_key": {"var": "vault_api_key"}})


# -- INI ------------------------------------------------------------------------------------------


def test_ini_inventory_loads_like_the_yaml_one(example_copy: Path) -> None:
    doc = _hosts(example_copy)
    (example_copy / "hosts.yml").unlink()
    lines = ["[sparks]"]
    (example_copy / "host_vars").mkdir()
    for name, hv in doc["all"]["children"]["sparks"]["hosts"].items():
        lines.append(f"{name} ansible_host={hv.pop('ansible_host')} sparkctl_rank={hv.pop('sparkctl_rank')}")
        (example_copy / "host_vars" / f"{name}.yml").write_text(yaml.safe_dump(hv))
    sw = doc["all"]["children"]["switches"]["hosts"]["crs812"]
    (example_copy / "host_vars/crs812.yml").write_text(yaml.safe_dump(sw))
    lines += ["[sparks:vars]", "ansible_become=true", "[switches]", "crs812",
              "[all:vars]", "ansible_user=operator"]
    (example_copy / "hosts.ini").write_text("\n".join(lines) + "\n")

    cluster = load_inventory(example_copy)
    reference = load_inventory(Path(__file__).resolve().parents[2] / "inventory/example")
    assert [(n.name, n.rank, n.mgmt_ip, n.fabric_ports) for n in cluster.nodes] == [
        (n.name, n.rank, n.mgmt_ip, n.fabric_ports) for n in reference.nodes
    ]
    assert cluster.switch == reference.switch.model_copy(update={"hostvars": cluster.switch.hostvars})
    assert cluster.ssh_user == "operator"


def test_ini_syntax_error_names_the_file(example_copy: Path, run_cli: Callable[..., Any]) -> None:
    (example_copy / "hosts.yml").unlink()
    (example_copy / "hosts.ini").write_text("[sparks]\nspark-0 ansible_host\n")
    result = run_cli("-i", str(example_copy), "--json", "validate")
    assert result.code == EXIT_USAGE
    errors = json.loads(result.out)["errors"]
    assert any(e.startswith("hosts.ini") and "ansible_host" in e for e in errors), errors


# -- precedence -----------------------------------------------------------------------------------


def test_host_var_beats_group_var_and_child_group_beats_parent(example_copy: Path) -> None:
    doc = _hosts(example_copy)
    sparks = doc["all"]["children"]["sparks"]
    for hv in sparks["hosts"].values():
        del hv["sparkctl_nvme_gib"]
    # spark-2 and spark-3 also sit in a child group of sparks: rack_b.
    sparks["children"] = {"rack_b": {"hosts": {"spark-2": None, "spark-3": None}}}
    sparks["hosts"]["spark-3"]["sparkctl_nvme_gib"] = 3500  # the host's own value wins over both
    (example_copy / "hosts.yml").write_text(yaml.safe_dump(doc))
    (example_copy / "group_vars/sparks.yml").write_text("sparkctl_nvme_gib: 2000\n")
    (example_copy / "group_vars/rack_b.yml").write_text("sparkctl_nvme_gib: 1500\n")
    cluster = load_inventory(example_copy)
    assert [n.nvme_gib for n in cluster.nodes] == [2000, 2000, 1500, 3500]


def test_group_vars_directory_beats_the_group_vars_inline(example_copy: Path) -> None:
    doc = _hosts(example_copy)
    sparks = doc["all"]["children"]["sparks"]
    for hv in sparks["hosts"].values():
        del hv["sparkctl_nvme_gib"]
    sparks["vars"] = {"sparkctl_nvme_gib": 1000}
    (example_copy / "hosts.yml").write_text(yaml.safe_dump(doc))
    assert {n.nvme_gib for n in load_inventory(example_copy).nodes} == {1000}
    (example_copy / "group_vars/sparks").mkdir()
    (example_copy / "group_vars/sparks/disk.yml").write_text("sparkctl_nvme_gib: 2500\n")
    assert {n.nvme_gib for n in load_inventory(example_copy).nodes} == {2500}


def test_a_group_outside_sparks_and_switches_is_refused(example_copy: Path) -> None:
    doc = _hosts(example_copy)
    doc["all"]["children"]["monitoring"] = {"hosts": {"graf": {"ansible_host": "192.168.7.50"}}}
    (example_copy / "hosts.yml").write_text(yaml.safe_dump(doc))
    with pytest.raises(InputError) as err:
        load_inventory(example_copy)
    assert any(d.startswith("hosts.yml: all.children.monitoring: unknown group") for d in err.value.details)


# -- templates ------------------------------------------------------------------------------------


def test_templated_values_resolve_as_ansible_would(example_copy: Path) -> None:
    _edit(example_copy / SITE, sparkctl_api_allow=["{{ sparkctl_mgmt.subnet }}"])
    host_vars = example_copy / "host_vars"
    host_vars.mkdir()
    (host_vars / "spark-1.yml").write_text("sparkctl_nvme_gib: \"{{ 3000 + sparkctl_rank * 100 }}\"\n")
    cluster = load_inventory(example_copy)
    assert [str(s) for s in cluster.api_allow] == ["192.168.7.0/24"]
    assert cluster.node("spark-1").nvme_gib == 3100


def test_undefined_template_variable_names_field_and_file(example_copy: Path) -> None:
    _edit(example_copy / SITE, sparkctl_cluster_name="{{ site_name }}")
    with pytest.raises(InputError) as err:
        load_inventory(example_copy)
    (line,) = err.value.details
    assert line.startswith("sparkctl_cluster_name: template cannot be resolved")
    assert "site_name" in line and f"({SITE}:" in line


def test_error_names_field_file_and_line(example_copy: Path) -> None:
    (example_copy / "host_vars").mkdir()
    (example_copy / "host_vars/spark-1.yml").write_text("---\nsparkctl_rank: one\n")
    with pytest.raises(InputError) as err:
        load_inventory(example_copy)
    field = "sparks.spark-1.sparkctl_rank: expected a whole number"
    assert any(d.startswith(field) and "(host_vars/spark-1.yml:2)" in d for d in err.value.details), (
        err.value.details
    )


# -- vault ----------------------------------------------------------------------------------------


def test_inline_vault_value_is_the_api_key(example_copy: Path, password_file: Path) -> None:
    _key_from_var(example_copy)
    with (example_copy / SITE).open("a") as fh:
        fh.write("vault_api_key: " + _inline(KEY))
    cluster = load_inventory(example_copy)
    ref = cluster.secrets["api_key"]
    assert ref.describe() == "var:vault_api_key" and ref.resolve() == KEY
    assert KEY not in cluster.model_dump_json()
    head = render.plan_document(cluster, node="spark-0")["nodes"][0]
    assert any("<secret:api_key>" in text for text in head["files"].values())
    assert KEY not in json.dumps(head)


def test_vault_encrypted_vars_file(example_copy: Path, tmp_path: Path) -> None:
    _key_from_var(example_copy)
    plain = yaml.safe_dump({"vault_api_key": KEY, "sparkctl_nvme_gib": 2222})
    (example_copy / "group_vars/all/vault.yml").write_bytes(_vault().encrypt(plain.encode()))
    doc = _hosts(example_copy)
    del doc["all"]["children"]["sparks"]["hosts"]["spark-2"]["sparkctl_nvme_gib"]
    (example_copy / "hosts.yml").write_text(yaml.safe_dump(doc))
    pw = tmp_path / "pw"
    pw.write_text(PASSWORD)
    cluster = load_inventory(example_copy, vault_password_file=pw)
    assert cluster.secrets["api_key"].resolve() == KEY
    assert cluster.node("spark-2").nvme_gib == 2222  # a host default kept in the encrypted file


def test_wrong_vault_password_exits_2_naming_the_file(
    example_copy: Path, tmp_path: Path, run_cli: Callable[..., Any], no_network: list[str]
) -> None:
    _key_from_var(example_copy)
    (example_copy / "group_vars/all/vault.yml").write_bytes(
        _vault().encrypt(yaml.safe_dump({"vault_api_key": KEY}).encode())
    )
    wrong = tmp_path / "wrong"
    wrong.write_text("not the password\n")
    result = run_cli("-i", str(example_copy), "--vault-password-file", str(wrong), "--json", "validate")
    assert result.code == EXIT_USAGE
    (line,) = json.loads(result.out)["errors"]
    assert line.startswith("group_vars/all/vault.yml: cannot be decrypted")
    assert "--vault-password-file" in line and KEY not in result.out + result.err


def test_wrong_password_for_an_inline_value_names_the_variable(
    example_copy: Path, tmp_path: Path, run_cli: Callable[..., Any]
) -> None:
    _key_from_var(example_copy)
    with (example_copy / SITE).open("a") as fh:
        fh.write("vault_api_key: " + _inline(KEY, password="another one"))
    wrong = tmp_path / "pw"
    wrong.write_text(PASSWORD)
    result = run_cli("-i", str(example_copy), "--vault-password-file", str(wrong), "--json", "validate")
    assert result.code == EXIT_USAGE
    errors = json.loads(result.out)["errors"]
    assert [e.split(":")[0] for e in errors] == ["vault_api_key"], errors
    assert "cannot be decrypted" in errors[0] and f"({SITE}:" in errors[0]


def test_vaulted_value_without_a_password_is_input_error(
    example_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANSIBLE_VAULT_PASSWORD_FILE", raising=False)
    _key_from_var(example_copy)
    with (example_copy / SITE).open("a") as fh:
        fh.write("vault_api_key: " + _inline(KEY))
    with pytest.raises(InputError) as err:
        load_inventory(example_copy)
    assert err.value.exit_code == EXIT_USAGE
    assert any(d.startswith("vault_api_key: cannot be decrypted") for d in err.value.details)


def test_a_secret_var_in_clear_text_is_refused(example_copy: Path) -> None:
    _key_from_var(example_copy)
    _edit(example_copy / SITE, vault_api_key=KEY)
    with pytest.raises(InputError) as err:
        load_inventory(example_copy)
    (line,) = err.value.details
    assert line.startswith("sparkctl_secrets.api_key.var: vault_api_key is written in clear text")
    assert KEY not in line


def test_missing_password_file_is_input_error(example_copy: Path, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not exist"):
        load_inventory(example_copy, vault_password_file=tmp_path / "nope")


def test_runner_hands_ansible_the_password_file_never_the_password(password_file: Path) -> None:
    env = vault_environment()
    assert env == {"ANSIBLE_VAULT_PASSWORD_FILE": str(password_file)}
    assert PASSWORD not in json.dumps(env)
