"""Field types of the inventory, each with a message that says what to write instead."""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, Field, StrictBool, StrictFloat, StrictInt, StrictStr

from sparkctl.model.problems import FieldError

PORT_MIN, PORT_MAX = 1024, 65535
MIN_FABRIC_MTU = 9000

_NETDEV = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,14}$")
_HCA = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_HOSTNAME = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$"
)
_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_HF_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")


def _check_port(value: int) -> int:
    if not PORT_MIN <= value <= PORT_MAX:
        raise FieldError(
            f"{value} is outside {PORT_MIN}–{PORT_MAX}",
            f"pick an unprivileged port in {PORT_MIN}–{PORT_MAX}",
        )
    return value


def _check_abs_path(value: object) -> PurePosixPath:
    if not isinstance(value, str):
        raise FieldError(f"expected a path, got {value!r}", "write an absolute path such as /mnt/nvme/models")
    if not value:
        raise FieldError("empty path", "write an absolute path such as /mnt/nvme/models")
    if "\n" in value or "\x00" in value or "," in value:
        raise FieldError(f"{value!r} contains a newline, NUL or comma", "use a plain absolute path")
    path = PurePosixPath(value)
    if not path.is_absolute():
        raise FieldError(f"{value!r} is relative", f"write an absolute path (e.g. /{value.lstrip('./')})")
    if ".." in path.parts:
        raise FieldError(f"{value!r} contains '..'", "write the absolute path without '..' components")
    if path == PurePosixPath("/"):
        raise FieldError("'/' is the root directory", "point it at a dedicated directory")
    return path


def _check_netdev(value: str) -> str:
    if not _NETDEV.match(value):
        raise FieldError(
            f"{value!r} is not a Linux interface name (1–15 of letters, digits, '_.:-')",
            "copy the name from `ip -br link` on the node (e.g. enp1s0f0np0)",
        )
    return value


def _check_hca(value: str) -> str:
    if not _HCA.match(value):
        raise FieldError(
            f"{value!r} is not an RDMA device name",
            "copy it from `ibdev2netdev` or `rdma link` (e.g. rocep1s0f0)",
        )
    return value


def _check_hostname(value: str) -> str:
    if not _HOSTNAME.match(value):
        raise FieldError(f"{value!r} is neither an IP address nor a host name", "write the switch's address")
    return value


def _check_name(value: str) -> str:
    if not _NAME.match(value):
        raise FieldError(
            f"{value!r} is not a short lowercase name",
            "use 1–40 of a-z, 0-9 and '-' (it appears in unit and directory names)",
        )
    return value


def _check_env_name(value: str) -> str:
    if not _ENV_NAME.match(value):
        raise FieldError(f"{value!r} is not an environment variable name", "use letters, digits and '_'")
    return value


def _check_commit(value: str) -> str:
    if not _COMMIT.match(value):
        raise FieldError(
            f"{value!r} is not a full 40-hex commit",
            "pin the exact revision (`git ls-remote` or the Hub's commit page), never a branch or tag",
        )
    return value


_GIT_URL = re.compile(r"^(https://|ssh://|git://|file:///|/)[^\s]+$|^[A-Za-z0-9_.-]+@[A-Za-z0-9_.-]+:[^\s]+$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def _check_git_url(value: str) -> str:
    if not _GIT_URL.match(value) or "#" in value:
        raise FieldError(
            f"{value!r} is not a repository URL",
            "write https://host/owner/name.git, ssh://…, user@host:path or an absolute path; "
            "the revision goes in commit, never in the URL",
        )
    return value


def _check_sha256(value: str) -> str:
    if not _SHA256.match(value):
        raise FieldError(
            f"{value!r} is not a SHA-256 (64 lowercase hex)", "copy it as `sparkctl stage kit` prints it"
        )
    return value


def _check_image_id(value: str) -> str:
    if not (value.startswith("sha256:") and _SHA256.match(value[len("sha256:"):])):
        raise FieldError(
            f"{value!r} is not an image ID (sha256:<64 hex>)",
            "copy it from `docker image inspect --format '{{.Id}}' <image>` on the head",
        )
    return value


def _check_hf_repo(value: str) -> str:
    if not _HF_REPO.match(value):
        raise FieldError(
            f"{value!r} is not an owner/name repository", "write it like deepseek-ai/DeepSeek-V4.1-Flash"
        )
    return value


def image_is_pinned(image: str) -> bool:
    return bool(_DIGEST.search(image))


Port = Annotated[StrictInt, AfterValidator(_check_port)]
AbsPath = Annotated[PurePosixPath, BeforeValidator(_check_abs_path)]
Netdev = Annotated[StrictStr, AfterValidator(_check_netdev)]
Hca = Annotated[StrictStr, AfterValidator(_check_hca)]
HostName = Annotated[StrictStr, AfterValidator(_check_hostname)]
ShortName = Annotated[StrictStr, AfterValidator(_check_name)]
EnvName = Annotated[StrictStr, AfterValidator(_check_env_name)]
Commit = Annotated[StrictStr, AfterValidator(_check_commit)]
GitUrl = Annotated[StrictStr, AfterValidator(_check_git_url)]
Sha256 = Annotated[StrictStr, AfterValidator(_check_sha256)]
ImageId = Annotated[StrictStr, AfterValidator(_check_image_id)]
HfRepo = Annotated[StrictStr, AfterValidator(_check_hf_repo)]
Gib = Annotated[StrictFloat, Field(gt=0, allow_inf_nan=False)]
Mtu = Annotated[StrictInt, Field(ge=1280, le=16384)]
Rank = Annotated[StrictInt, Field(ge=0)]
Flag = StrictBool
