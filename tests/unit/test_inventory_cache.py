"""The parsed-inventory cache (sparkctl.model.cache): a second load of an unchanged inventory skips
ansible-core, one byte changed in any of its files reads it again, and nothing kept with
ansible-vault ever reaches the cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible.parsing.vault import VaultLib, VaultSecret

from sparkctl.ansible import content
from sparkctl.errors import InputError
from sparkctl.model import ansible_read, cache, load_inventory

SITE = "group_vars/all/sparkctl.yml"
PASSWORD = "correct horse"
KEY = "sk-vaulted-cache-0123456789"


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every inventory ansible-core reads in this test."""
    seen: list[Path] = []
    real = ansible_read.read

    def counted(inv: Path, *args: object, **kwargs: object) -> ansible_read.Read:
        seen.append(inv)
        return real(inv, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ansible_read, "read", counted)
    return seen


def _cache_files() -> list[Path]:
    return sorted((cache.state_dir() / cache.CACHE_DIR).glob("*.json"))


def test_an_unchanged_inventory_is_read_once(example_copy: Path, reads: list[Path]) -> None:
    first = load_inventory(example_copy)
    assert reads == [example_copy] and len(_cache_files()) == 1
    second = load_inventory(example_copy)
    assert reads == [example_copy]  # the second load: from the cache
    assert second.model_dump_json() == first.model_dump_json()


def test_one_byte_changed_in_group_vars_reads_it_again(example_copy: Path, reads: list[Path]) -> None:
    assert load_inventory(example_copy).checkpoint.size_gib == 476
    site = example_copy / SITE
    before = site.read_bytes()
    site.write_bytes(before.replace(b"size_gib: 476", b"size_gib: 477", 1))  # one byte
    assert len(site.read_bytes()) == len(before)
    assert load_inventory(example_copy).checkpoint.size_gib == 477
    assert reads == [example_copy, example_copy]
    assert load_inventory(example_copy).checkpoint.size_gib == 477  # the new read is what is kept
    assert reads == [example_copy, example_copy]


def test_a_file_added_under_host_vars_reads_it_again(example_copy: Path, reads: list[Path]) -> None:
    load_inventory(example_copy)
    extra = example_copy / "host_vars" / "spark-1.yml"
    extra.parent.mkdir()
    extra.write_text("sparkctl_nvme_gib: 1800\n")
    assert load_inventory(example_copy).node("spark-1").nvme_gib == 1800
    assert len(reads) == 2


def test_a_vaulted_secret_is_never_cached(example_copy: Path, tmp_path: Path, reads: list[Path]) -> None:
    site = example_copy / SITE
    doc = yaml.safe_load(site.read_text())
    doc["sparkctl_secrets"] = {"api_key": {"var": "vault_api_key"}}
    site.write_text(yaml.safe_dump(doc))
    vault = VaultLib([("default", VaultSecret(PASSWORD.encode()))])
    text = vault.encrypt(KEY.encode()).decode()
    with site.open("a") as fh:
        fh.write("vault_api_key: !vault |\n" + "".join(f"  {line}\n" for line in text.splitlines()))
    pw = tmp_path / "pw"
    pw.write_text(PASSWORD)
    for _ in range(2):
        cluster = load_inventory(example_copy, vault_password_file=pw)
        assert cluster.secrets["api_key"].resolve() == KEY
    assert len(reads) == 2  # read by ansible-core every time
    assert _cache_files() == []
    held = [p for p in cache.state_dir().rglob("*") if p.is_file()]
    assert not any(KEY.encode() in p.read_bytes() for p in held)
    ticket = cache.lookup(example_copy, pw)
    assert ticket.key is None and "ansible-vault" in ticket.why


def test_a_lookup_is_never_cached(example_copy: Path, reads: list[Path]) -> None:
    with (example_copy / SITE).open("a") as fh:
        fh.write("sparkctl_note: \"{{ lookup('env', 'HOME') }}\"\n")
    ticket = cache.lookup(example_copy)
    assert ticket.key is None and "lookup" in ticket.why
    # a word in a comment is not a lookup
    text = (example_copy / SITE).read_text().replace("{{ lookup('env', 'HOME') }}", "a random note")
    (example_copy / SITE).write_text(text)
    assert cache.lookup(example_copy).key is not None


def test_an_inventory_with_problems_is_not_cached(example_copy: Path, reads: list[Path]) -> None:
    hosts = example_copy / "hosts.yml"
    doc = yaml.safe_load(hosts.read_text())
    doc["all"]["children"]["sparks"]["hosts"]["spark-2"]["sparkctl_rank"] = 1  # duplicate rank
    hosts.write_text(yaml.safe_dump(doc))
    for _ in range(2):
        with pytest.raises(InputError, match="problems"):
            load_inventory(example_copy)
    assert len(reads) == 2 and _cache_files() == []


def test_a_missing_vault_password_file_is_still_reported(example_copy: Path, tmp_path: Path) -> None:
    load_inventory(example_copy)  # cached
    with pytest.raises(InputError, match=r"vault password file .* does not exist"):
        load_inventory(example_copy, vault_password_file=tmp_path / "nope")


def test_the_cache_file_is_private(example_copy: Path) -> None:
    load_inventory(example_copy)
    (path,) = _cache_files()
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700
    kept = json.loads(path.read_text())
    assert [name for name, _ in kept["summary"]["nodes"]] == ["spark-0", "spark-1", "spark-2", "spark-3"]


def test_the_state_directory_is_the_ansible_sides(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """cache.state_dir repeats content.state_dir without importing the Ansible side: held together."""
    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(tmp_path / "x"))
    assert cache.state_dir() == content.state_dir()
    monkeypatch.setenv("SPARKCTL_STATE_DIR", "~/y")
    assert cache.state_dir() == content.state_dir()
    monkeypatch.delenv("SPARKCTL_STATE_DIR")
    for xdg in (str(tmp_path / "xdg"), ""):
        monkeypatch.setenv("XDG_STATE_HOME", xdg)
        assert cache.state_dir() == content.state_dir()
    monkeypatch.delenv("XDG_STATE_HOME")
    assert cache.state_dir() == content.state_dir()


def test_a_cached_load_imports_no_ansible_core(example_copy: Path, tmp_path: Path) -> None:
    probe = (
        "import sys\n"
        "from sparkctl.model import load_inventory\n"
        f"load_inventory({str(example_copy)!r})\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'ansible', 'ansible_runner'}))\n"
    )
    env = {**os.environ, "SPARKCTL_STATE_DIR": str(tmp_path / "state")}
    runs = [subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                           timeout=120, check=True).stdout.split("\n")[-2] for _ in range(2)]
    assert runs == ["['ansible']", "[]"]


def test_status_bench_times_a_cold_then_a_warm_run_each_round(monkeypatch: pytest.MonkeyPatch) -> None:
    """bench/status_bench.py (run on the lab): each round forgets the cache, then times the run
    that reads the inventory and the run that finds it, so both medians come from the same rounds."""
    import importlib.util

    bench = Path(__file__).resolve().parents[2] / "bench"
    monkeypatch.syspath_prepend(str(bench))  # the script's own `from _stats import spread`
    spec = importlib.util.spec_from_file_location("status_bench", bench / "status_bench.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    log: list[str] = []
    state = {"cached": False}

    def run() -> float:
        took = 0.2 if state["cached"] else 1.0
        log.append("warm" if state["cached"] else "cold")
        state["cached"] = True
        return took

    def forget() -> None:
        log.append("forget")
        state["cached"] = False

    cold, warm = mod.cold_and_warm(run, forget, 3)
    assert log == ["forget", "cold", "warm"] * 3
    assert cold == [1.0] * 3 and warm == [0.2] * 3


def _as_a_run(monkeypatch: pytest.MonkeyPatch, run_dir: Path) -> None:
    """The environment of one playbook sparkctl runs (``runner.run_environment``): its own Ansible
    home, temporary and SSH control directories under the run's directory."""
    from sparkctl.ansible import runner

    run_dir.mkdir(parents=True)
    for name, value in runner.run_environment(run_dir, runner.control_path_dir(run_dir)).items():
        monkeypatch.setenv(name, value)


def test_playbooks_run_one_after_another_read_the_inventory_once(
    example_copy: Path, reads: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each run's Ansible home, temporary and control directories are new paths, and ansible-runner
    adds callback and fact-cache paths of its own: none of them changes what is read."""
    _as_a_run(monkeypatch, tmp_path / "runs" / "1")
    monkeypatch.setenv("ANSIBLE_CACHE_PLUGIN_CONNECTION", str(tmp_path / "runs" / "1" / "fact_cache"))
    first = load_inventory(example_copy)
    _as_a_run(monkeypatch, tmp_path / "runs" / "2")
    monkeypatch.setenv("ANSIBLE_CACHE_PLUGIN_CONNECTION", str(tmp_path / "runs" / "2" / "fact_cache"))
    assert load_inventory(example_copy).model_dump_json() == first.model_dump_json()
    assert reads == [example_copy]


def test_what_can_change_the_read_still_reads_it_again(
    example_copy: Path, reads: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An inventory plugin under $ANSIBLE_HOME, or another list of enabled inventory plugins, may
    read the same files differently: the inventory is read again."""
    _as_a_run(monkeypatch, tmp_path / "run")
    load_inventory(example_copy)
    plugin = Path(os.environ["ANSIBLE_HOME"]) / "plugins" / "inventory" / "site.py"
    plugin.parent.mkdir(parents=True)
    plugin.write_text("# an inventory plugin of the admin's\n")
    load_inventory(example_copy)
    assert len(reads) == 2
    monkeypatch.setenv("ANSIBLE_INVENTORY_ENABLED", "yaml")
    load_inventory(example_copy)
    assert len(reads) == 3


def test_a_plugin_in_the_default_ansible_home_reads_it_again(
    example_copy: Path, reads: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no $ANSIBLE_HOME, ansible-core looks in ~/.ansible: a plugin dropped there is seen."""
    monkeypatch.delenv("ANSIBLE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "admin"))
    load_inventory(example_copy)
    load_inventory(example_copy)
    assert len(reads) == 1
    plugin = tmp_path / "admin" / ".ansible" / "plugins" / "inventory" / "site.py"
    plugin.parent.mkdir(parents=True)
    plugin.write_text("# an inventory plugin of the admin's\n")
    load_inventory(example_copy)
    assert len(reads) == 2

