"""`sparkctl validate` checks what the inventory names on this controller, nothing contacted: the
pinned known_hosts and the SSH key files exist (relative paths from the inventory directory,
whatever the working directory), the API key's file is there, readable, private and filled in, and
no placeholder stands in for a commit or digest. Each mistake is one line naming its field (and
file:line), all of them together, exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkctl.errors import EXIT_OK, EXIT_USAGE
from sparkctl.model import load_inventory, placeholders
from sparkctl.model.offline import validate_inventory
from sparkctl.ssh.targets import targets_for

REPO = Path(__file__).resolve().parents[2]
SITE = "group_vars/all/sparkctl.yml"
KEY = "sk-offline-9f2c41d7e0b3"


def _hosts(inv: Path) -> dict[str, Any]:
    return yaml.safe_load((inv / "hosts.yml").read_text())


def _write_hosts(inv: Path, doc: dict[str, Any]) -> None:
    (inv / "hosts.yml").write_text(yaml.safe_dump(doc, sort_keys=False))


def _site(inv: Path) -> dict[str, Any]:
    return yaml.safe_load((inv / SITE).read_text())


def _write_site(inv: Path, doc: dict[str, Any]) -> None:
    (inv / SITE).write_text(yaml.safe_dump(doc, sort_keys=False))


def _errors(run_cli: Callable[..., Any], inv: Path) -> list[str]:
    res = run_cli("-i", str(inv), "--json", "validate")
    assert res.code == EXIT_USAGE, (res.out, res.err)
    return list(json.loads(res.out)["errors"])


PRIVATE = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbg==\n"


def _key_file(inv: Path, mode: int = 0o600, text: str = PRIVATE) -> Path:
    path = inv / "keys" / "id_ed25519"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


def _secret_file(inv: Path, text: str = KEY + "\n", mode: int = 0o600) -> Path:
    site = _site(inv)
    site["sparkctl_secrets"] = {"api_key": {"file": "api_key"}}
    _write_site(inv, site)
    path = inv / "api_key"
    path.write_text(text)
    path.chmod(mode)
    return path


@pytest.fixture
def inv(example_copy: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPARKCTL_API_KEY", KEY)
    return example_copy


def test_the_example_validates_from_any_directory(run_cli: Callable[..., Any], inv: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir("/")
    res = run_cli("-i", str(inv), "validate")
    assert res.code == EXIT_OK, res.err
    # the pinned file is the inventory's, not one beside wherever sparkctl runs
    (target, *_) = targets_for(load_inventory(inv))
    assert target.known_hosts == inv.absolute() / "known_hosts"


def test_missing_known_hosts(run_cli: Callable[..., Any], inv: Path) -> None:
    (inv / "known_hosts").unlink()
    (line,) = _errors(run_cli, inv)
    assert line.startswith(f"ansible_ssh_common_args: UserKnownHostsFile {inv}/known_hosts ('known_hosts'; "
                           "relative paths are read from the inventory directory) does not exist (hosts.yml:")
    assert "pin every node's host key in it" in line


def test_relative_path_is_the_inventory_directorys_not_the_working_directorys(
    run_cli: Callable[..., Any], inv: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "known_hosts").write_text("")
    (inv / "known_hosts").rename(inv / "pinned")
    monkeypatch.chdir(elsewhere)  # a known_hosts here must not stand in for the inventory's
    (line,) = _errors(run_cli, inv)
    assert f"{inv}/known_hosts" in line and "does not exist" in line
    doc = _hosts(inv)
    doc["all"]["vars"]["ansible_ssh_common_args"] = ("-o UserKnownHostsFile=pinned "
                                                     "-o StrictHostKeyChecking=yes")
    _write_hosts(inv, doc)
    assert run_cli("-i", str(inv), "validate").code == EXIT_OK


def test_missing_key_file(run_cli: Callable[..., Any], inv: Path) -> None:
    doc = _hosts(inv)
    doc["all"]["children"]["sparks"]["hosts"]["spark-2"]["ansible_ssh_private_key_file"] = "keys/id_ed25519"
    _write_hosts(inv, doc)
    (line,) = _errors(run_cli, inv)
    assert line.startswith("sparks.spark-2.ansible_ssh_private_key_file: SSH key file "
                           f"{inv}/keys/id_ed25519 ('keys/id_ed25519'; relative paths are read from the "
                           "inventory directory) does not exist (hosts.yml:")


def test_key_file_readable_by_others(run_cli: Callable[..., Any], inv: Path) -> None:
    key = _key_file(inv, mode=0o644)
    doc = _hosts(inv)
    doc["all"]["vars"]["ansible_ssh_private_key_file"] = str(key)
    _write_hosts(inv, doc)
    (line,) = _errors(run_cli, inv)
    assert line.startswith(f"ansible_ssh_private_key_file: SSH key file {key} is mode 0644: the group or "
                           "others may read it")
    assert line.endswith(f"— chmod 600 {key}")
    key.chmod(0o600)
    assert run_cli("-i", str(inv), "validate").code == EXIT_OK
    key.with_suffix(".pub").write_text("ssh-ed25519 AAAAC3Nza test\n")
    doc["all"]["vars"]["ansible_ssh_private_key_file"] = "keys/id_ed25519.pub"
    _write_hosts(inv, doc)
    (line,) = _errors(run_cli, inv)
    assert "holds a public key" in line


def test_missing_secret_file(run_cli: Callable[..., Any], inv: Path) -> None:
    _secret_file(inv).unlink()
    (line,) = _errors(run_cli, inv)
    assert line.startswith(f"sparkctl_secrets.api_key.file: secret file {inv}/api_key ('api_key'; relative "
                           f"paths are read from the inventory directory) does not exist ({SITE}:")


def test_secret_file_open_to_the_group(run_cli: Callable[..., Any], inv: Path) -> None:
    path = _secret_file(inv, mode=0o640)
    (line,) = _errors(run_cli, inv)
    assert line.startswith(f"sparkctl_secrets.api_key.file: secret file {path} is mode 0640")
    assert KEY not in line


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its mode")
def test_unreadable_secret_file(run_cli: Callable[..., Any], inv: Path) -> None:
    _secret_file(inv, mode=0o000)
    (line,) = _errors(run_cli, inv)
    assert "cannot be read: Permission denied" in line


def test_secret_file_empty_or_a_placeholder(run_cli: Callable[..., Any], inv: Path) -> None:
    path = _secret_file(inv, text="\n")
    (line,) = _errors(run_cli, inv)
    assert line.startswith(f"sparkctl_secrets.api_key.file: secret file {path} is empty")
    path.write_text("changeme\n")
    (line,) = _errors(run_cli, inv)
    assert "holds a placeholder word" in line and "changeme" not in line  # never the secret itself


def test_undecryptable_vault_value(run_cli: Callable[..., Any], inv: Path, tmp_path: Path) -> None:
    from ansible.parsing.vault import VaultLib, VaultSecret

    site = _site(inv)
    site["sparkctl_secrets"] = {"api_key": {"var": "vault_api_key"}}
    _write_site(inv, site)
    vault = VaultLib([("default", VaultSecret(b"the right one"))])
    encrypted = vault.encrypt(KEY.encode()).decode()
    with (inv / SITE).open("a") as fh:
        fh.write("vault_api_key: !vault |\n" + "".join(f"  {ln}\n" for ln in encrypted.splitlines()))
    (inv / "known_hosts").unlink()  # reported in the same run
    wrong = tmp_path / "pw"
    wrong.write_text("not the password\n")
    res = run_cli("-i", str(inv), "--vault-password-file", str(wrong), "--json", "validate")
    assert res.code == EXIT_USAGE
    errors = json.loads(res.out)["errors"]
    assert [e.split(":")[0] for e in errors] == ["vault_api_key", "ansible_ssh_common_args"], errors
    assert "cannot be decrypted" in errors[0] and KEY not in res.out + res.err


def test_placeholder_revision(run_cli: Callable[..., Any], inv: Path) -> None:
    site = _site(inv)
    site["sparkctl_checkpoint"]["revision"] = "0123456789abcdef0123456789abcdef01234567"
    _write_site(inv, site)
    (line,) = _errors(run_cli, inv)
    assert line.startswith("sparkctl_checkpoint.revision: '0123456789abcdef0123456789abcdef01234567' is a "
                           f"made-up hex pattern, not a real commit or digest ({SITE}:")


def test_all_mistakes_are_reported_together(run_cli: Callable[..., Any], inv: Path) -> None:
    site = _site(inv)
    site["sparkctl_kit"]["commit"] = "0" * 40
    site["sparkctl_fabric"]["mtu"] = 1500  # one of the inventory's own problems
    _write_site(inv, site)
    (inv / "known_hosts").unlink()
    errors = _errors(run_cli, inv)
    assert [e.split(":")[0] for e in errors] == ["sparkctl_fabric.mtu", "ansible_ssh_common_args",
                                                "sparkctl_kit.commit"], errors


@pytest.mark.parametrize(("value", "placeholder"), [
    ("0123456789abcdef0123456789abcdef01234567", True),
    ("fedcba9876543210fedcba9876543210fedcba98", True),
    ("0" * 40, True),
    ("sha256:" + "a" * 64, True),
    ("lmsysorg/sglang@sha256:" + "0" * 64, True),
    ("<64 hex>", True),
    ("CHANGEME", True),
    ("df42c109f1defefcbfcedbe7d905718a12266e40", False),
    ("25e7cb82f6524e3bbc46db6a9a54125e75e36d0e", False),
    ("sk-lab-7f3a9c2e1b5d4f60a8e9", False),
])
def test_what_a_placeholder_is(value: str, placeholder: bool) -> None:
    assert bool(placeholders.why(value)) is placeholder


def test_the_env_secret_not_set_here_is_a_note(run_cli: Callable[..., Any], inv: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARKCTL_API_KEY")
    cluster = validate_inventory(inv)
    assert any("$SPARKCTL_API_KEY is not set in this environment" in w for w in cluster.warnings)
    assert run_cli("-i", str(inv), "validate").code == EXIT_OK


def test_ansible_gets_the_absolute_paths(inv: Path) -> None:
    """A manual ansible-playbook (and sparkctl's runner, whose working directory is its content)
    reads the inventory's known_hosts and key file, not ones beside its working directory."""
    key = _key_file(inv)
    doc = _hosts(inv)
    doc["all"]["children"]["sparks"]["hosts"]["spark-1"]["ansible_ssh_private_key_file"] = "keys/id_ed25519"
    _write_hosts(inv, doc)
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
           "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run([str(bin_dir / "ansible-inventory"), "-i", str(inv), "--host", "spark-1"],
                          capture_output=True, text=True, cwd="/", env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    hostvars = json.loads(proc.stdout)
    assert hostvars["ansible_ssh_common_args"] == (f"-o UserKnownHostsFile={inv.absolute()}/known_hosts "
                                                   "-o StrictHostKeyChecking=yes")
    assert hostvars["ansible_ssh_private_key_file"] == str(key)


def test_a_node_without_a_pinned_key_is_a_note(inv: Path) -> None:
    import paramiko

    def unpinned() -> list[str]:
        return [w for w in validate_inventory(inv).warnings if "pins no host key" in w]

    (note,) = unpinned()
    assert note.startswith(f"{inv}/known_hosts pins no host key for spark-0 (192.168.7.10), spark-1 "
                           "(192.168.7.11), spark-2 (192.168.7.12), spark-3 (192.168.7.13), "
                           "crs812 (192.168.7.2)")
    key = paramiko.ECDSAKey.generate()
    lines = [f"{a} {key.get_name()} {key.get_base64()}"
             for a in ("192.168.7.10", "192.168.7.11", "192.168.7.2")]
    hashed = paramiko.HostKeys.hash_host("[192.168.7.12]:2222")  # hashed entries count too
    lines.append(f"{hashed} {key.get_name()} {key.get_base64()}")
    (inv / "known_hosts").write_text("\n".join(lines) + "\n")
    doc = _hosts(inv)
    doc["all"]["children"]["sparks"]["hosts"]["spark-2"]["ansible_port"] = 2222
    _write_hosts(inv, doc)
    (note,) = unpinned()
    assert "for spark-3 (192.168.7.13): the first command will refuse it" in note
