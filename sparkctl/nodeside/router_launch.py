"""The router's launcher: SGLang's gateway, its API key read from the unit's credential.

Runs on the router node, in the router's venv (``sparkctl-router.service``)::

    python -m nodeside.router_launch --module smg [--key-credential api_key] -- <gateway arguments>

The gateway's own parser (``<module>.router_args.RouterArgs``, the one behind its ``launch``
command) reads the arguments after ``--`` and, with ``--key-credential``, ``--api-key`` with the key
read from ``$CREDENTIALS_DIRECTORY/<name>`` (systemd's ``LoadCredential=``): the process's command
line, which every account on the node can read in /proc, never holds the key. The gateway then
runs in this process (``<module>.router.Router``), as its launcher starts it, without the launcher's
own imports (a process title library), so the wheel installs without dependencies.

Standard library only: the gateway's modules are imported by name from the venv this runs in.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def read_key(name: str | None, env: Mapping[str, str]) -> str | None:
    """The API key from the unit's credential ``name`` (None without one)."""
    if not name:
        return None
    directory = env.get("CREDENTIALS_DIRECTORY")
    if not directory:
        raise SystemExit(f"router: credential {name} expected, but CREDENTIALS_DIRECTORY is not set "
                         "(start the router with its unit: systemctl start sparkctl-router)")
    path = Path(directory) / name
    try:
        key = path.read_text().strip()
    except OSError as exc:
        raise SystemExit(f"router: credential {path} cannot be read: {exc.strerror}") from None
    if not key:
        raise SystemExit(f"router: credential {path} is empty")
    return key


def gateway_argv(argv: Sequence[str], key: str | None) -> list[str]:
    """The gateway's arguments as its parser reads them (in this process only)."""
    return [*argv, "--api-key", key] if key else list(argv)


def parse(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """The launcher's own options, and the gateway's arguments after ``--``."""
    argv = list(argv)
    split = argv.index("--") if "--" in argv else len(argv)
    parser = argparse.ArgumentParser(prog="router_launch")
    parser.add_argument("--module", required=True, help="the gateway's Python package (smg, sglang_router)")
    parser.add_argument("--key-credential", default=None, help="the unit credential holding the API key")
    return parser.parse_args(argv[:split]), argv[split + 1:]


def router_args(module: str, argv: Sequence[str]) -> Any:
    """``argv`` read by the gateway's own parser into its ``RouterArgs`` (checked as it checks them)."""
    args_module = importlib.import_module(f"{module}.router_args")
    parser = argparse.ArgumentParser(prog=f"{module} launch")
    args_module.RouterArgs.add_cli_args(parser, use_router_prefix=False)
    parsed = args_module.RouterArgs.from_cli_args(parser.parse_args(list(argv)), use_router_prefix=False)
    parsed._validate_router_args()
    return parsed


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> None:
    ours, rest = parse(sys.argv[1:] if argv is None else argv)
    key = read_key(ours.key_credential, os.environ if env is None else env)
    args = router_args(ours.module, gateway_argv(rest, key))
    router = importlib.import_module(f"{ours.module}.router").Router.from_args(args)
    router.start()  # serves until the unit stops it


if __name__ == "__main__":
    main()
