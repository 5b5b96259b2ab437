"""The router in front of the serving groups (``sparkctl_router``): SGLang's own gateway.

SGLang's model gateway (PyPI ``smg``; ``sglang-router`` is its earlier name, whose last release is
0.3.2) takes the groups' rank-0 APIs as its workers and gives clients one OpenAI-compatible
endpoint, routing each request by ``policy``: ``cache_aware`` (a request goes where its prompt's
prefix is cached, the gateway's default), ``round_robin`` (the groups in turn; Mia AI Lab's 2×TP4
runs measured both), ``power_of_two`` or ``random``. docs/router.md has the sources.

It runs as a supervised systemd unit on the node ``node`` names, from the pinned wheel that sparkctl
copies there from the controller (the nodes need no route out): ``package`` is ``name==version``,
``sha256`` the wheel's digest per CPU architecture (DGX Sparks are aarch64, the lab's nodes x86_64),
``wheel_dir`` the controller directory the wheels were downloaded to
(``pip download --no-deps --only-binary=:all: --platform … smg==1.13.0``).

The site's ``api_key`` secret (``sparkctl_secrets``) is the router's ``--api-key``: the gateway
requires it from every client on its data-plane routes and sends the same key to the groups,
whose rank 0 requires it. It reaches the unit as a systemd credential, never a command line.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr, field_validator, model_validator

from sparkctl.model.sshconfig import controller_path
from sparkctl.model.types import Port, Sha256, ShortName

Arch = Literal["aarch64", "x86_64"]
Policy = Literal["cache_aware", "round_robin", "power_of_two", "random"]

# Wheels of the gateway whose digests sparkctl knows (read from the wheels on the public index):
# a site pinning one of these needs no `sha256` of its own. Both are compiled (a Rust extension,
# abi3 for CPython >= 3.8), one wheel per architecture.
KNOWN_WHEELS: dict[str, dict[str, str]] = {
    "smg==1.13.0": {
        # smg-1.13.0-cp38-abi3-manylinux_2_28_aarch64.whl
        "aarch64": "5276328560354dca26ea9f454694c3d56994fb5a41c323c8edf97508181d2d7e",
        # smg-1.13.0-cp38-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl
        "x86_64": "cfae8171dac68a74b4822263b1864fa79952992ee472a25ba7266ccd200399b4",
    },
    "sglang-router==0.3.2": {
        # sglang_router-0.3.2-cp38-abi3-manylinux_2_17_aarch64.manylinux2014_aarch64.whl
        "aarch64": "40a10f3817b80377c2ceb326b625f24bd06eb97426e5044de722295ec7fa79c0",
        # sglang_router-0.3.2-cp38-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl
        "x86_64": "ba5a24951e5e0357fe390782fcd1abd861448a87216832dbf2e501a1dd1548eb",
    },
}
DEFAULT_PACKAGE = "smg==1.13.0"
# The Python package each distribution installs (its router_args and router modules are what the
# unit's launcher imports).
MODULES = {"smg": "smg", "sglang-router": "sglang_router"}
_PIN = re.compile(r"^(?P<name>[A-Za-z0-9._-]+)==(?P<version>[0-9][A-Za-z0-9.+!-]*)$")


class Router(BaseModel):
    """``sparkctl_router``: SGLang's gateway in front of every serving group, on one node."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)

    node: ShortName  # the Spark that runs it (a host of the sparks group)
    port: Port = 8889  # where clients reach it (Mia AI Lab's router port)
    metrics_port: Port = 29000  # its Prometheus /metrics, open to the admin sources only
    policy: Policy = "cache_aware"
    package: StrictStr = DEFAULT_PACKAGE  # name==version, exactly one release
    # The wheel's sha256 per architecture; the known digests of `package` when left out.
    sha256: dict[Arch, Sha256] = Field(default_factory=dict)
    # On the controller: the directory holding the downloaded wheels (relative: to the inventory).
    wheel_dir: StrictStr = "wheels"
    request_timeout_s: int = Field(1800, ge=1, le=86400)  # a long generation is one request

    @field_validator("package")
    @classmethod
    def _one_release(cls, value: str) -> str:
        m = _PIN.match(value)
        if m is None or m["name"] not in MODULES:
            names = " or ".join(MODULES)
            raise ValueError(f"{value!r} is not {names} pinned to one release (e.g. {DEFAULT_PACKAGE})")
        return value

    @field_validator("wheel_dir")
    @classmethod
    def _plain_dir(cls, value: str) -> str:
        if not value.strip() or "~" in value or ".." in value.split("/"):
            raise ValueError(f"{value!r}: name the directory plainly (absolute, or relative to the "
                             "inventory, without ~ or ..)")
        return value

    @model_validator(mode="after")
    def _digests(self) -> Router:
        if not self.sha256 and self.package not in KNOWN_WHEELS:
            raise ValueError(f"sha256: no digest given, and sparkctl knows none for {self.package} "
                             "(give the wheel's sha256 for aarch64 and/or x86_64)")
        return self

    @property
    def distribution(self) -> str:
        return self.package.partition("==")[0]

    @property
    def version(self) -> str:
        return self.package.partition("==")[2]

    @property
    def module(self) -> str:
        """The Python package the wheel installs (``smg``, ``sglang_router``)."""
        return MODULES[self.distribution]

    def wheel_path(self, inventory_dir: Path) -> Path:
        """``wheel_dir`` on the controller (a relative one read from the inventory directory)."""
        return controller_path(self.wheel_dir, inventory_dir)

    @property
    def digests(self) -> dict[str, str]:
        """The wheel's sha256 per architecture: the site's own, else the known ones."""
        if self.sha256:
            return {str(k): v for k, v in self.sha256.items()}
        return dict(KNOWN_WHEELS[self.package])


__all__ = ["DEFAULT_PACKAGE", "KNOWN_WHEELS", "MODULES", "Router"]
