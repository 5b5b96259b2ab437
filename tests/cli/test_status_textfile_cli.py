"""`status --format prometheus -o FILE` writes the textfile 0644 whatever the umask (node_exporter's
textfile collector runs as another user), atomically, leaving no temporary file."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from support.serve_site import Site

from sparkctl.errors import EXIT_OK


def test_the_textfile_is_world_readable_under_umask_077(
    run_cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = Site(tmp_path, monkeypatch)
    for st in site.nodes.state.values():
        st.unit = "active"
    target = tmp_path / "textfile" / "sparkctl.prom"
    target.parent.mkdir()
    old = os.umask(0o077)
    try:
        res = run_cli("-i", str(site.inventory), "status", "--format", "prometheus", "-o", str(target))
        assert res.code == EXIT_OK, res.err
        assert target.stat().st_mode & 0o777 == 0o644
        assert "sparkctl_status_ready" in target.read_text()
        target.chmod(0o600)  # a later write replaces the file, with the mode again
        res = run_cli("-i", str(site.inventory), "status", "--format", "prometheus", "-o", str(target))
        assert res.code == EXIT_OK, res.err
        assert target.stat().st_mode & 0o777 == 0o644
    finally:
        os.umask(old)
    assert [p.name for p in target.parent.iterdir()] == ["sparkctl.prom"]
