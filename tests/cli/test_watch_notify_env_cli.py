"""The supervisor's notify_command runs without the site's secrets in its environment: the API key's
variable (the inventory's {env: VAR}) and the Hugging Face token are not inherited; the rest is."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import gates_fakes as fakes
from support.serve_site import Site

from sparkctl.cli import watch
from sparkctl.errors import EXIT_UNHEALTHY

API_KEY = fakes.API_KEY
HF = "hf_notify_must_not_see_5e6f"


def test_notify_command_gets_an_environment_without_the_declared_secrets(
    run_cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = Site(tmp_path, monkeypatch)
    dumps = tmp_path / "hook-env"
    dumps.mkdir()
    hook = tmp_path / "hook.py"
    hook.write_text("import json, os, sys, uuid\n"
                    f"open(os.path.join({str(dumps)!r}, uuid.uuid4().hex), 'w').write("
                    "json.dumps({'event': json.load(sys.stdin), 'env': dict(os.environ)}))\n")
    gv = site.inventory / "group_vars" / "all" / "sparkctl.yml"
    doc = yaml.safe_load(gv.read_text())
    doc["sparkctl_supervisor"] = {"interval_s": 1, "settle_s": 0, "max_restarts": 1, "window_s": 3600,
                                  "notify_command": [sys.executable, str(hook)]}
    doc["sparkctl_secrets"] = {"api_key": {"env": "SITE_RANK_KEY"}}
    gv.write_text(yaml.safe_dump(doc))
    monkeypatch.setenv("SITE_RANK_KEY", API_KEY)
    monkeypatch.setenv("HF_TOKEN", HF)
    monkeypatch.setenv("UNRELATED_SETTING", "kept")
    for st in site.nodes.state.values():
        st.unit = "active"
    site.nodes.state["spark-2"].unit = "failed"

    def kill_again(seconds: float) -> None:
        if all(st.unit == "active" for st in site.nodes.state.values()):
            site.nodes.state["spark-2"].unit = "failed"

    monkeypatch.setattr(watch, "_sleep", kill_again)
    res = run_cli("-i", str(site.inventory), "watch")
    assert res.code == EXIT_UNHEALTHY, res.err
    got = [json.loads(p.read_text()) for p in dumps.iterdir()]
    assert {g["event"]["kind"] for g in got} >= {"restart", "breaker-open"}
    for g in got:
        env = g["env"]
        assert "SITE_RANK_KEY" not in env and "HF_TOKEN" not in env and "SPARKCTL_SECRETS_FD" not in env
        assert API_KEY not in json.dumps(env) and HF not in json.dumps(env)
        assert env["UNRELATED_SETTING"] == "kept" and "PATH" in env
