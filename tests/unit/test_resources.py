"""What sparkctl ships beside its code (``sparkctl.resources``): the repository's top-level tree in a
clone, ``sparkctl/_content/`` in an installed wheel, one clear error when a piece is missing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sparkctl import resources
from sparkctl.ansible import content
from sparkctl.errors import SparkctlError

REPO = Path(__file__).resolve().parents[2]


def test_a_clone_uses_its_top_level_tree() -> None:
    assert resources.example_dir() == REPO / "inventory" / "example"
    assert resources.playbooks_dir() == REPO / "playbooks"
    assert resources.roles_dir() == REPO / "roles"
    assert resources.collections_dir() == REPO / "collections"
    assert resources.ansible_cfg() == REPO / "ansible.cfg"
    assert resources.playbook("provision.yml") == REPO / "playbooks" / "provision.yml"
    assert (resources.example_dir() / "hosts.yml").is_file()


def _installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, example: bool) -> Path:
    """A package directory laid out as the wheel installs it (sparkctl/_content/...)."""
    shipped = tmp_path / "site-packages" / "sparkctl" / "_content"
    for rel in ("playbooks", "roles", "collections/ansible_collections"):
        (shipped / rel).mkdir(parents=True)
    (shipped / "ansible.cfg").write_text("[defaults]\n")
    (shipped / "playbooks" / "up.yml").write_text("---\n")
    if example:
        (shipped / "inventory" / "example").mkdir(parents=True)
        (shipped / "inventory" / "example" / "hosts.yml").write_text("all: {}\n")
    monkeypatch.setattr(content.resources, "files", lambda name: shipped.parent)
    return shipped


def test_an_installed_copy_uses_its_package_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shipped = _installed(tmp_path, monkeypatch, example=True)
    assert resources.root() == shipped
    assert resources.example_dir() == shipped / "inventory" / "example"
    assert resources.playbook("up.yml") == shipped / "playbooks" / "up.yml"
    assert resources.collections_dir() == shipped / "collections"
    assert resources.ansible_cfg() == shipped / "ansible.cfg"


def test_a_missing_piece_is_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shipped = _installed(tmp_path, monkeypatch, example=False)
    with pytest.raises(SparkctlError, match=r"example inventory .* missing") as info:
        resources.example_dir()
    assert info.value.exit_code == 2 and str(shipped / "inventory" / "example") in info.value.message
    with pytest.raises(SparkctlError, match="playbook not found") as info:
        resources.playbook("nope.yml")
    assert info.value.exit_code == 2


def test_an_inventory_without_hosts_yml_points_at_the_example_a_wheel_has(tmp_path: Path) -> None:
    """The hint once said "copy inventory/example/", which an installed wheel has nowhere to copy
    from; it names `sparkctl init --example DIR` instead."""
    from sparkctl.errors import InputError
    from sparkctl.model import load_inventory

    with pytest.raises(InputError) as info:
        load_inventory(tmp_path)
    assert "sparkctl init --example DIR" in (info.value.hint or "")
    assert "copy inventory/example" not in (info.value.hint or "")


def test_no_hint_sends_an_admin_to_a_path_only_a_clone_has() -> None:
    phrases = re.compile(r"(copy|see) inventory/example|inventory/example/? (shows|documents)")
    offenders = [f"{p.relative_to(REPO)}:{n}" for p in sorted((REPO / "sparkctl").rglob("*.py"))
                 for n, line in enumerate(p.read_text().splitlines(), 1) if phrases.search(line)]
    assert not offenders, f"hints naming inventory/example, which a wheel does not have: {offenders}"
