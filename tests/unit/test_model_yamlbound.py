"""A YAML alias bomb in an inventory file is refused, naming the file, before anything walks it
(sparkctl.model.yamlbound, called by ansible_read before Ansible reads the directory)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.parsing.vault import VaultLib, VaultSecret

from sparkctl.errors import EXIT_USAGE, InputError
from sparkctl.model import load_inventory
from sparkctl.model.yamlbound import MAX_ALIAS_VALUES, alias_problem

EXAMPLE = Path(__file__).resolve().parents[2] / "inventory" / "example"
SITE = "group_vars/all/sparkctl.yml"
# The billion laughs: nine lists of nine aliases to the list before (9^9 values from 10 lines).
BOMB = 'lol1: &l1 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"lol{i}: &l{i} [{','.join([f'*l{i - 1}'] * 9)}]\n" for i in range(2, 10)
)

# `sparkctl validate` in a child process (a hang must not hang the test run): the command's own
# time is measured there, after the imports (every command module registered first, as sparkctl
# imports a command's module only when it runs), so a busy machine's start-up does not count.
_VALIDATE = """
import io, json, sys, time
from contextlib import redirect_stderr, redirect_stdout
from sparkctl.cli import _register, main
import sparkctl.model.ansible_read
_register()
out = io.StringIO()
t0 = time.monotonic()
try:
    with redirect_stdout(out), redirect_stderr(out):
        main(["validate", "-i", sys.argv[1]])
    code = 0
except SystemExit as exc:
    code = int(exc.code or 0)
print(json.dumps({"code": code, "seconds": time.monotonic() - t0, "output": out.getvalue()}))
"""


def _validate(inv: Path) -> dict[str, object]:
    proc = subprocess.run([sys.executable, "-c", _VALIDATE, str(inv)], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "COLUMNS": "300"}, check=False)
    doc: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return doc


# Held to the wall clock: `make test` runs it with the other `timing` tests, alone on the machine
# (beside the lab tests, niced, the same 0.14 s of work took 9.5 s).
@pytest.mark.timing
def test_validate_refuses_a_billion_laughs_in_group_vars_within_two_seconds(example_copy: Path) -> None:
    with (example_copy / SITE).open("a") as f:
        f.write(BOMB)
    try:
        got = _validate(example_copy)
    except subprocess.TimeoutExpired:
        pytest.fail("sparkctl validate still ran after 60 s on a billion-laughs group_vars file")
    assert got["code"] == EXIT_USAGE == 2, got["output"]
    assert SITE in str(got["output"]) and "alias" in str(got["output"])
    assert float(str(got["seconds"])) < 2.0, got


@pytest.mark.parametrize("where", ["hosts.yml", "host_vars/spark-1/extra.yml", "group_vars/sparks"])
def test_every_file_ansible_reads_as_yaml_is_bounded(example_copy: Path, where: str) -> None:
    path = example_copy / where
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(BOMB)
    with pytest.raises(InputError) as exc:
        load_inventory(example_copy)
    assert any(d.startswith(f"{where}: its aliases") for d in exc.value.details), exc.value.details


def test_a_vault_encrypted_file_is_bounded_decrypted(example_copy: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    password = tmp_path / "vault-pass"
    password.write_text("correct horse\n")
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(password))
    vault = VaultLib([("default", VaultSecret(b"correct horse"))])
    (example_copy / "group_vars/all/vault.yml").write_bytes(vault.encrypt(BOMB.encode()))
    with pytest.raises(InputError) as exc:
        load_inventory(example_copy)
    assert any(d.startswith("group_vars/all/vault.yml: its aliases") for d in exc.value.details)


def test_the_bound() -> None:
    block = "a: &a [" + ",".join(["1"] * 1000) + "]\n"
    assert alias_problem(block + "b: [" + ",".join(["*a"] * 99) + "]\n") is None  # 99,000 more values
    why = alias_problem(block + "b: [" + ",".join(["*a"] * 101) + "]\n")
    assert why is not None and f"{MAX_ALIAS_VALUES:,}" in why
    assert alias_problem(BOMB.encode()) is not None


def test_ordinary_anchors_pass_and_the_example_inventory_has_no_problem() -> None:
    assert alias_problem("base: &b {mtu: 9000, pcie: [0, 1]}\nx: *b\ny: {<<: *b, mtu: 1500}\n") is None
    for path in sorted(EXAMPLE.rglob("*.yml")):
        assert alias_problem(path.read_text()) is None, path


def test_an_alias_inside_its_own_node_is_refused() -> None:
    why = alias_problem("a: 1\nloop: &l [1, *l]\n")
    assert why == "line 2: an alias (*name) inside the node its anchor names"


def test_text_that_does_not_compose_is_left_to_ansible() -> None:
    assert alias_problem("a: [\n") is None
    assert alias_problem("b: *undefined\n") is None
    assert alias_problem("") is None
