"""The node's half of `up`'s fast path (``sparkctl.serve.fastup``): what is installed, read only.

``fastup.check_script`` ships this module, after the modules it reads with (``fastup.NODE_MODULES``,
``sparkctl.nodeside.ship``), to every node in one SSH round; :func:`main` prints one JSON line,
``{"mode": "upcheck", …}``, that ``fastup.judge`` weighs:

* ``files``: each installed file's mode, owner and keyed digest (HMAC-SHA256 under the key sent with
  the parameters: the controller compares without any digest being usable to test guesses);
* ``dirs``: each required directory's mode and owner;
* ``unit``: systemd's ``NeedDaemonReload`` and ``LoadState`` of the rank unit;
* ``kit``: the staged kit against its manifest, and its build products against their record
  (``nodeside.kitbuild.staged_check``);
* ``image``: the engine image under its reference (``stage.image.staged_answer``).

Standard library only. The image reader lives in ``sparkctl.stage`` (layered above this package),
so :func:`main` gets it from the loader by name (``shipped``) instead of importing it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import subprocess
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from . import kitbuild

MODE = "upcheck"


class ImageReader(Protocol):
    """What the check needs of ``sparkctl.stage.image``."""

    def staged_answer(
        self, ref: str, want_id: str | None, build: dict[str, str] | None = None
    ) -> dict[str, Any]: ...


def keyed(path: str, key: str) -> str:
    """HMAC-SHA256 of the file's bytes under ``key`` (hex)."""
    h = hmac.new(bytes.fromhex(key), digestmod=hashlib.sha256)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def stat(path: str) -> dict[str, Any] | None:
    """Mode (``"0644"``), owner and kind of ``path`` itself (a link is not followed); None if absent."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return {"mode": "%04o" % (st.st_mode & 0o7777), "uid": st.st_uid, "gid": st.st_gid,
            "file": os.path.isfile(path) and not os.path.islink(path), "dir": os.path.isdir(path)}


def unit_state(unit: str) -> dict[str, str]:
    """systemd's NeedDaemonReload and LoadState of ``unit`` (``{"error"}`` when it does not answer)."""
    try:
        argv = ["systemctl", "show", "-p", "NeedDaemonReload", "-p", "LoadState", unit]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
        return dict(line.partition("=")[::2] for line in proc.stdout.splitlines() if "=" in line)
    except (OSError, subprocess.SubprocessError) as exc:
        return {"error": str(exc)[:200]}


def check(p: Mapping[str, Any], image: ImageReader) -> dict[str, Any]:
    """The answer to ``p`` (``fastup.check_params``): files, dirs, unit, and kit and image if asked."""
    out: dict[str, Any] = {"mode": MODE, "files": {}, "dirs": {}}
    for path in p["files"]:
        st = stat(path)
        if st is not None and st["file"]:
            try:
                st["digest"] = keyed(path, p["hash_key"])
            except OSError as exc:
                st["error"] = str(exc)
        out["files"][path] = st
    for path in p["dirs"]:
        out["dirs"][path] = stat(path)
    out["unit"] = unit_state(p["unit"])
    if p.get("kit"):
        out["kit"] = kitbuild.staged_check(**p["kit"])
    if p.get("image"):
        out["image"] = image.staged_answer(**p["image"])
    return out


def main(p: Mapping[str, Any], shipped: Callable[[str], Any]) -> None:
    """Print the answer as one JSON line; ``shipped`` names the loaded modules (``"stage.image"``)."""
    print(json.dumps(check(p, image=shipped("stage.image"))))


__all__ = ["MODE", "ImageReader", "check", "keyed", "main", "stat", "unit_state"]
