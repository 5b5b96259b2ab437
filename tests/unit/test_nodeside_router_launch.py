"""nodeside.router_launch: the gateway's own parser reads the key from the unit's credential."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkctl.nodeside import router_launch

# A stand-in for the gateway's package with the two modules the launcher uses, shaped as smg's and
# sglang_router's are: RouterArgs.add_cli_args / from_cli_args / _validate_router_args, and
# Router.from_args(...).start().
ARGS = """
import argparse, dataclasses

@dataclasses.dataclass
class RouterArgs:
    worker_urls: list
    policy: str
    port: int
    api_key: str | None

    @staticmethod
    def add_cli_args(parser, use_router_prefix=False):
        assert use_router_prefix is False
        parser.add_argument("--worker-urls", nargs="*", default=[])
        parser.add_argument("--policy", default="cache_aware")
        parser.add_argument("--port", type=int, default=30000)
        parser.add_argument("--api-key", default=None)

    @classmethod
    def from_cli_args(cls, ns, use_router_prefix=False):
        return cls(ns.worker_urls, ns.policy, ns.port, ns.api_key)

    def _validate_router_args(self):
        if self.policy not in ("cache_aware", "round_robin"):
            raise ValueError(self.policy)
"""
ROUTER = """
STARTED = []

class Router:
    def __init__(self, args):
        self.args = args

    @staticmethod
    def from_args(args):
        return Router(args)

    def start(self):
        STARTED.append(self.args)
"""


@pytest.fixture
def gateway(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    pkg = tmp_path / "fakegw"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "router_args.py").write_text(textwrap.dedent(ARGS))
    (pkg / "router.py").write_text(textwrap.dedent(ROUTER))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "fakegw"
    for name in [m for m in sys.modules if m == "fakegw" or m.startswith("fakegw.")]:
        del sys.modules[name]


def test_the_key_comes_from_the_credential_and_the_rest_from_the_argv(gateway: str, tmp_path: Path) -> None:
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / "api_key").write_text("sk-from-credential\n")
    argv = ["--module", gateway, "--key-credential", "api_key", "--",
            "--worker-urls", "http://10.0.0.1:8004", "http://10.0.0.5:8004", "--policy", "round_robin",
            "--port", "8889"]
    router_launch.main(argv, env={"CREDENTIALS_DIRECTORY": str(creds)})
    (args,) = sys.modules[f"{gateway}.router"].STARTED
    assert args.worker_urls == ["http://10.0.0.1:8004", "http://10.0.0.5:8004"]
    assert (args.policy, args.port, args.api_key) == ("round_robin", 8889, "sk-from-credential")


def test_without_a_credential_the_gateway_runs_without_a_key(gateway: str) -> None:
    router_launch.main(["--module", gateway, "--", "--worker-urls", "http://h:1"], env={})
    (args,) = sys.modules[f"{gateway}.router"].STARTED
    assert args.api_key is None


def test_the_gateways_own_checks_run(gateway: str) -> None:
    with pytest.raises(ValueError, match="least_busy"):
        router_launch.main(["--module", gateway, "--", "--policy", "least_busy"], env={})


@pytest.mark.parametrize(("env", "content", "message"), [
    ({}, None, "CREDENTIALS_DIRECTORY is not set"),
    ({"CREDENTIALS_DIRECTORY": "."}, "", "is empty"),
    ({"CREDENTIALS_DIRECTORY": "/nonexistent-dir"}, None, "cannot be read"),
])
def test_a_missing_or_empty_credential_stops_with_one_line(
        tmp_path: Path, env: dict[str, str], content: str | None, message: str) -> None:
    if content is not None:
        (tmp_path / "api_key").write_text(content)
        env = {"CREDENTIALS_DIRECTORY": str(tmp_path)}
    with pytest.raises(SystemExit, match=message):
        router_launch.read_key("api_key", env)
