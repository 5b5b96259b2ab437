"""Rootfs cache key and mirror discovery from the machine's own apt sources (no network)."""

from __future__ import annotations

import fnmatch
from pathlib import Path

import pytest
import yaml

from sparkctl.errors import SparkctlError
from sparkctl_lab import rootfs

REPO = Path(__file__).resolve().parents[2]

DEB822 = """\
Types: deb
# a comment inside the stanza
URIs: http://mirror.example.test/debian
Suites: bookworm bookworm-updates
Components: main contrib
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://security.example.test/debian-security
Suites: bookworm-security
Components: main
"""


def test_deb822_picks_the_stanza_serving_bookworm_main() -> None:
    mirrors = rootfs.mirrors_from_deb822(DEB822)
    assert mirrors == [
        rootfs.Mirror("http://mirror.example.test/debian", "/usr/share/keyrings/debian-archive-keyring.gpg")
    ]


def test_disabled_or_source_only_stanzas_are_ignored() -> None:
    text = DEB822.replace("Types: deb\n# a comment", "Types: deb-src\n# a comment")
    assert rootfs.mirrors_from_deb822(text) == []
    assert (
        rootfs.mirrors_from_deb822(
            DEB822.replace("Components: main contrib", "Components: main\nEnabled: no")
        )
        == []
    )


def test_one_line_sources_with_options() -> None:
    text = (
        "# deb http://old.example.test/debian bookworm main\n"
        "deb-src http://src.example.test/debian bookworm main\n"
        "deb [arch=amd64 signed-by=/k.gpg] http://m.example.test/debian/ bookworm main non-free\n"
    )
    assert rootfs.mirrors_from_list(text) == [rootfs.Mirror("http://m.example.test/debian", "/k.gpg")]


def test_find_mirror_reads_sources_dir_then_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARKCTL_LAB_MIRROR", raising=False)
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(DEB822)
    (tmp_path / "sources.list").write_text("deb http://second.example.test/debian bookworm main\n")
    assert rootfs.find_mirror(tmp_path).uri == "http://mirror.example.test/debian"
    monkeypatch.setenv("SPARKCTL_LAB_MIRROR", "http://override.example.test/debian/")
    assert rootfs.find_mirror(tmp_path).uri == "http://override.example.test/debian"


def test_no_mirror_is_a_usage_error_with_a_hint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARKCTL_LAB_MIRROR", raising=False)
    (tmp_path / "sources.list").write_text("deb http://archive.example.test/ubuntu noble main\n")
    with pytest.raises(SparkctlError) as err:
        rootfs.find_mirror(tmp_path)
    assert err.value.exit_code == 2 and "SPARKCTL_LAB_MIRROR" in (err.value.hint or "")


def test_cache_key_depends_on_the_package_set_only(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    base = rootfs.cache_key()
    assert rootfs.cache_key(tuple(reversed(rootfs.ROOTFS_PACKAGES))) == base
    assert rootfs.cache_key((*rootfs.ROOTFS_PACKAGES, "htop")) != base
    monkeypatch.setenv("SPARKCTL_ROOTFS_CACHE", str(tmp_path))
    assert rootfs.rootfs_path() == tmp_path / f"rootfs-bookworm-{base}"
    assert not rootfs.is_built(rootfs.rootfs_path())


def test_package_list_has_what_the_lab_and_the_roles_need() -> None:
    needed = {
        "systemd",
        "systemd-sysv",
        "dbus",
        "openssh-server",
        "netplan.io",
        "udev",
        "iproute2",
        "python3",
        "python3-apt",
        "rsync",
        "nftables",
        "chrony",
        "iputils-ping",
        "sudo",
    }
    assert needed <= set(rootfs.ROOTFS_PACKAGES)
    assert len(set(rootfs.ROOTFS_PACKAGES)) == len(rootfs.ROOTFS_PACKAGES)


def test_prune_keeps_only_the_current_tree(tmp_path: Path) -> None:
    keep = tmp_path / "rootfs-bookworm-aaa"
    old = tmp_path / "rootfs-bookworm-bbb"
    other = tmp_path / "something-else"
    for d in (keep, old, other):
        d.mkdir()
    assert rootfs.prune(keep) == [old]
    assert keep.exists() and other.exists() and not old.exists()


def test_the_lab_units_on_a_node_are_not_in_the_names_reset_removes() -> None:
    """`sparkctl reset` removes every unit in its namespace; the lab's plumbing (the writable cgroup
    controllers the Docker engine requires) must survive it, or no container starts afterwards."""
    defaults = yaml.safe_load((REPO / "roles/spark_reset/defaults/main.yml").read_text())
    patterns = defaults["spark_reset_unit_patterns"]
    assert patterns and all(p.startswith("sparkctl-") for p in patterns)
    assert rootfs.NODE_UNITS
    for unit in rootfs.NODE_UNITS:
        assert not any(fnmatch.fnmatch(unit, p) for p in patterns), unit
