"""sparkctl.ansible.lookups: what the roles' secret lookups (spark_rank's rank secrets config,
spark_router's API key) answer, from an inventory, without Ansible."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sparkctl.ansible import lookups
from sparkctl.model import load_inventory
from sparkctl.render import rank


def test_the_rank_secrets_config_holds_the_resolved_values(
    example_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPARKCTL_API_KEY", 'sk-"quoted" \\ value')
    got = lookups.answer("sparkctl_rank_secrets", [str(example_copy)], False, lookups.rank_secrets)
    cluster = load_inventory(example_copy)
    assert got == [rank.rank_secrets_text(cluster, {"api_key": 'sk-"quoted" \\ value'})]
    assert yaml.safe_load(got[0]) == {"api-key": 'sk-"quoted" \\ value'}


def test_check_names_the_secret_that_does_not_resolve_and_never_a_value(
    example_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SPARKCTL_API_KEY", raising=False)
    for resolver in (lookups.rank_secrets, lookups.router_key):
        (line,) = lookups.answer("x", [str(example_copy)], True, resolver)
        assert line.startswith("secret api_key (env:SPARKCTL_API_KEY): ") and "is not set" in line
        with pytest.raises(lookups.Refused, match="secret api_key"):
            lookups.answer("x", [str(example_copy)], False, resolver)


def test_the_router_key_is_the_sites_api_key(example_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKCTL_API_KEY", "sk-router")
    terms = [str(example_copy)]
    assert lookups.answer("sparkctl_router_key", terms, False, lookups.router_key) == ["sk-router"]
    assert lookups.answer("sparkctl_router_key", terms, True, lookups.router_key) == []


def test_a_site_without_an_api_key_gives_the_router_nothing_to_require(example_copy: Path) -> None:
    site = example_copy / "group_vars" / "all" / "sparkctl.yml"
    text = site.read_text()
    assert "  api_key: {env: SPARKCTL_API_KEY}\n" in text
    site.write_text(text.replace("  api_key: {env: SPARKCTL_API_KEY}\n", "  {}\n"))
    assert lookups.router_key(str(example_copy)) == (
        None, ["sparkctl_secrets.api_key is not set (the router has no key to require)"])


def test_an_inventory_that_does_not_load_and_extra_terms_are_refused(
    tmp_path: Path, example_copy: Path
) -> None:
    with pytest.raises(lookups.Refused, match=re.escape(f"sparkctl inventory {tmp_path / 'none'}: ")):
        lookups.rank_secrets(str(tmp_path / "none"))
    with pytest.raises(lookups.Refused, match="give the inventory directory, and nothing else"):
        lookups.answer("sparkctl_router_key", [str(example_copy), "more"], False, lookups.router_key)


ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "plugins" / "lookup" / "sparkctl_inventory_lookup.py"


def test_each_roles_inventory_lookup_is_the_one_plugin_under_a_name_it_answers() -> None:
    found = [p for p in ROOT.glob("roles/*/lookup_plugins/sparkctl_*.py") if p.stem in lookups.RESOLVERS]
    assert sorted(p.stem for p in found) == sorted(lookups.RESOLVERS)
    for path in found:
        assert path.is_symlink() and path.resolve() == PLUGIN, f"{path} is not a link to {PLUGIN}"


@pytest.mark.parametrize(("role", "name"), [("spark_router", "sparkctl_router_key"),
                                            ("spark_rank", "sparkctl_rank_secrets")])
def test_ansible_calls_the_plugin_by_the_roles_name_and_gets_that_answer(
    example_copy: Path, role: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPARKCTL_API_KEY", "sk-through-ansible")
    bin_dir = Path(sys.executable).parent
    env = dict(os.environ)
    env.update(ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
               ANSIBLE_LOOKUP_PLUGINS=str(ROOT / "roles" / role / "lookup_plugins"),
               PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    proc = subprocess.run(
        [str(bin_dir / "ansible"), "localhost", "-i", "localhost,", "-c", "local", "-o", "-m",
         "ansible.builtin.debug", "-a", f"msg={{{{ lookup('{name}', '{example_copy}') | to_json }}}}"],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = json.loads(json.loads(proc.stdout.split('"msg": ', 1)[1].rsplit("}", 1)[0]))
    assert got == lookups.RESOLVERS[name](str(example_copy))[0]
    assert "sk-through-ansible" in got
