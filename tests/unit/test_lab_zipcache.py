"""The lab nodes' bytecode cache for zip imports (sparkctl_lab/zipcache.py): a source compiles once,
later runs load its code (with the importing zip's file name), a changed source compiles afresh, a
broken entry falls back to a plain compile — and a node's Python picks the cache up from the
``.pth`` line the lab writes into every machine."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from sparkctl_lab import machines, state, zipcache

SOURCE = b"def where():\n    return __file__\n\ndef answer():\n    return (lambda: 6 * 7)()\n"


def _run(code: object) -> dict[str, object]:
    namespace: dict[str, object] = {"__file__": "set-by-test"}
    exec(code, namespace)  # the code under test is this file's own SOURCE
    return namespace


def test_a_source_compiles_once_and_later_loads_keep_their_own_file_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    real = zipcache._compile
    assert real is not None

    def counting(pathname: str, source: bytes) -> object:
        calls.append(pathname)
        return real(pathname, source)

    monkeypatch.setattr(zipcache, "_compile", counting)
    first = zipcache.compile_source("/tmp/a.zip/mod.py", SOURCE, str(tmp_path))
    second = zipcache.compile_source("/tmp/b.zip/mod.py", SOURCE, str(tmp_path))
    assert calls == ["/tmp/a.zip/mod.py"]
    assert len(list(tmp_path.iterdir())) == 1
    assert second.co_filename == "/tmp/b.zip/mod.py"
    # Nested code (functions, lambdas) carries the new name too, and behaves as compiled.
    assert {c.co_filename for c in second.co_consts if isinstance(c, type(second))} == {"/tmp/b.zip/mod.py"}
    assert _run(second)["answer"]() == _run(first)["answer"]() == 42  # type: ignore[operator]


def test_a_changed_source_compiles_afresh(tmp_path: Path) -> None:
    zipcache.compile_source("/z/mod.py", SOURCE, str(tmp_path))
    changed = zipcache.compile_source("/z/mod.py", SOURCE.replace(b"6 * 7", b"6 * 8"), str(tmp_path))
    assert _run(changed)["answer"]() == 48  # type: ignore[operator]
    assert len(list(tmp_path.iterdir())) == 2


def test_a_broken_entry_or_an_unwritable_cache_still_compiles(tmp_path: Path) -> None:
    zipcache.compile_source("/z/mod.py", SOURCE, str(tmp_path))
    (entry,) = tmp_path.iterdir()
    entry.write_bytes(b"not marshal data")
    assert _run(zipcache.compile_source("/z/mod.py", SOURCE, str(tmp_path)))["answer"]() == 42  # type: ignore[operator]
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    assert _run(zipcache.compile_source("/z/mod.py", SOURCE, str(blocked / "cache")))["answer"]() == 42  # type: ignore[operator]


def test_a_node_python_uses_the_cache_through_the_pth_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPARKCTL_LAB_DIR", str(tmp_path / "lab"))
    machines.prepare_machine("spark-1", "ssh-ed25519 AAAAtest controller")
    upper = state.paths("spark-1").upper
    module = upper / machines.ZIPCACHE_MODULE
    assert module.read_bytes() == Path(zipcache.__file__).read_bytes()
    site_dir = module.parent
    assert (site_dir / Path(machines.ZIPCACHE_PTH).name).exists()

    archive = tmp_path / "payload.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("payload_mod.py", SOURCE.decode())
    cache = tmp_path / "cache"
    script = (
        "import site, sys, zipimport\n"
        f"site.addsitedir({str(site_dir)!r})\n"
        f"sys.path.insert(0, {str(archive)!r})\n"
        "import payload_mod\n"
        "print(zipimport._compile_source.__module__, payload_mod.answer(), payload_mod.where())\n"
    )
    env = {**os.environ, "SPARKCTL_LAB_ZIPCACHE_DIR": str(cache)}
    for _ in range(2):
        out = subprocess.run(
            [sys.executable, "-S", "-c", script], env=env, capture_output=True, text=True, check=True
        ).stdout.split()
        assert out == ["sparkctl_lab_zipcache", "42", f"{archive}/payload_mod.py"]
    assert len(list(cache.iterdir())) == 1
