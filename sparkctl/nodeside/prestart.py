"""The serving kit's pre-start checks, run inside the rank's container before the engine.

The publisher's R4 launcher (``runtime/launch.py``) refuses to start unless the staged bytes are the
pinned ones: the runtime configuration, the compiled row store, the checkpoint's config.json, the
image's SGLang commit, every overlay over the image's SGLang tree, every adapter and every frozen b12x
source file. sparkctl's own entry point (``engine``: SGLang with sparkctl's argv and the API key from
a 0600 file) would skip all of that; so the rank's container runs this script first, whichever entry
point the profile chose, with the same inputs the launcher reads:

* ``--manifest`` (under ``--kit``): rel -> {after_sha256}; each ``<overlay-target>/<rel>`` must match;
* ``--lock`` (the kit's ``versions.lock.json``): ``runtime_configuration_sha256`` for
  ``runtime/configuration.py``, ``model_config_sha256`` for ``--model-config``, ``sglang_commit`` for
  the image's ``SGLANG_BUILD_COMMIT``, and ``adapter_sha256`` (name -> digest) for ``adapter/<name>``;
* ``--build-record RECORD KEY PRODUCT`` (each compile step of the kit's build): the product's digest
  must be the record's ``KEY``;
* ``--source-manifest MANIFEST DIR`` (each extracted archive of the kit's build): name -> digest for
  every ``DIR/<name>``.

Paths other than ``--model-config`` and ``--overlay-target`` are relative to ``--kit``. Every
mismatch is reported, not only the first, one line each on stderr beginning with :data:`PREFIX`
(which `up`'s boot watch looks for in the rank's journal, and `sparkctl logs` shows)::

    SPARKCTL_PRESTART FAIL <check> <file> expected <digest> actual <digest|missing|unset|…>

then a closing ``SPARKCTL_PRESTART STOPPED`` line, and exits 3. When every check passes it says
so in one line and ``os.execvp``s the command after ``--`` unchanged, so the container's main
process, its signals and its name stay the engine's. Standard library only: it runs under the
image's own python3, copied there as one file.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

PREFIX = "SPARKCTL_PRESTART"
BEGIN = f"{PREFIX} BEGIN"
FAIL = f"{PREFIX} FAIL"
PASS = f"{PREFIX} OK"
STOPPED = f"{PREFIX} STOPPED"  # the closing line when a check failed
EXIT_FAILED = 3  # a check failed: the engine was not started
EXIT_USAGE = 2   # argparse's own code for bad arguments

# The lock file's schema (the publisher's versions.lock.json): which key pins which kit file.
LOCK_RUNTIME_CONFIGURATION = ("runtime_configuration_sha256", "runtime/configuration.py")
LOCK_MODEL_CONFIG = "model_config_sha256"
LOCK_SGLANG_COMMIT = "sglang_commit"
LOCK_ADAPTERS = ("adapter_sha256", "adapter")
COMMIT_ENV = "SGLANG_BUILD_COMMIT"


@dataclass(frozen=True)
class Failure:
    """One failed check: what was checked, the file (or variable), what was expected and found."""

    check: str
    path: str
    expected: str
    actual: str

    def line(self) -> str:
        return f"{FAIL} {self.check} {self.path} expected {self.expected} actual {self.actual}"


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _actual(path: str) -> str:
    """The file's digest, or why there is none (``missing``, ``unreadable:<errno name>``)."""
    try:
        return sha256(path)
    except FileNotFoundError:
        return "missing"
    except OSError as exc:
        return f"unreadable:{type(exc).__name__}"


def _join(root: str, rel: str) -> str:
    return os.path.join(root, rel)


class Checker:
    """Runs the checks and keeps every failure; ``checked`` counts the files and values compared."""

    def __init__(self) -> None:
        self.failures: list[Failure] = []
        self.checked = 0

    def file(self, check: str, path: str, expected: object) -> None:
        self.checked += 1
        want = str(expected).lower() if isinstance(expected, str) else f"invalid:{expected!r}"
        got = _actual(path)
        if got != want:
            self.failures.append(Failure(check, path, want, got))

    def value(self, check: str, name: str, expected: object, actual: str | None) -> None:
        self.checked += 1
        want = str(expected)
        got = "unset" if actual is None else (actual or "empty")
        if actual != want:
            self.failures.append(Failure(check, name, want, got))

    def load(self, check: str, path: str) -> dict[str, object] | None:
        """A JSON object the checks read (a manifest, the lock, a build record); a failure if not."""
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        except FileNotFoundError:
            self.failures.append(Failure(check, path, "present", "missing"))
            return None
        except (OSError, ValueError) as exc:
            self.failures.append(Failure(check, path, "json-object", f"unreadable:{type(exc).__name__}"))
            return None
        if not isinstance(doc, dict):
            self.failures.append(Failure(check, path, "json-object", type(doc).__name__))
            return None
        return doc

    def key(self, check: str, path: str, doc: dict[str, object], key: str) -> object | None:
        if key not in doc:
            self.failures.append(Failure(check, path, f"key:{key}", "absent"))
            return None
        return doc[key]


def _entries(check: Checker, name: str, path: str, table: object) -> Iterator[tuple[str, object]]:
    if not isinstance(table, dict):
        check.failures.append(Failure(name, path, "json-object", type(table).__name__))
        return
    yield from sorted(table.items())


def run_checks(a: argparse.Namespace, environ: Mapping[str, str]) -> Checker:
    """Every check the arguments ask for, in the publisher's order; nothing stops at a failure."""
    ck = Checker()
    kit = a.kit
    lock = None
    if a.lock:
        lock_path = _join(kit, a.lock)
        lock = ck.load("lock", lock_path)
        if lock is not None:
            key, rel = LOCK_RUNTIME_CONFIGURATION
            want = ck.key("lock", lock_path, lock, key)
            if want is not None:
                ck.file("runtime-configuration", _join(kit, rel), want)
    for record, key, product in a.build_record:
        record_path = _join(kit, record)
        doc = ck.load("build-record", record_path)
        if doc is not None:
            want = ck.key("build-record", record_path, doc, key)
            if want is not None:
                ck.file("build-product", _join(kit, product), want)
    if lock is not None:
        lock_path = _join(kit, a.lock)
        want = ck.key("lock", lock_path, lock, LOCK_MODEL_CONFIG)
        if want is not None:
            if a.model_config:
                ck.file("model-config", a.model_config, want)
            else:
                ck.failures.append(Failure("model-config", "(no --model-config)", str(want), "not-given"))
        want = ck.key("lock", lock_path, lock, LOCK_SGLANG_COMMIT)
        if want is not None:
            ck.value("sglang-commit", f"env:{COMMIT_ENV}", want, environ.get(COMMIT_ENV))
    manifest_path = _join(kit, a.manifest)
    manifest = ck.load("overlay", manifest_path)
    if manifest is not None:
        for rel, hashes in sorted(manifest.items()):
            if not isinstance(hashes, dict) or "after_sha256" not in hashes:
                ck.failures.append(Failure("overlay", f"{manifest_path}:{rel}", "after_sha256", "absent"))
                continue
            ck.file("overlay", _join(a.overlay_target, rel), hashes["after_sha256"])
    if lock is not None:
        key, folder = LOCK_ADAPTERS
        lock_path = _join(kit, a.lock)
        table = ck.key("lock", lock_path, lock, key)
        if table is not None:
            for name, want in _entries(ck, "adapter", f"{lock_path}:{key}", table):
                ck.file("adapter", _join(kit, f"{folder}/{name}"), want)
    for source_manifest, folder in a.source_manifest:
        path = _join(kit, source_manifest)
        doc = ck.load("source-manifest", path)
        if doc is not None:
            for name, want in sorted(doc.items()):
                ck.file("source", _join(kit, f"{folder}/{name}"), want)
    return ck


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="sparkctl-prestart",
        description="Check the mounted serving kit as its own launcher does, then exec the command after --.",
    )
    p.add_argument("--kit", required=True, help="where the kit is mounted")
    p.add_argument("--manifest", required=True, help="the overlay manifest, relative to --kit")
    p.add_argument("--overlay-target", required=True, help="the image's SGLang tree the overlays replace")
    p.add_argument("--lock", help="the kit's lock file, relative to --kit")
    p.add_argument("--model-config", help="the checkpoint's config.json as the container sees it")
    p.add_argument("--build-record", nargs=3, action="append", default=[],
                   metavar=("RECORD", "KEY", "PRODUCT"),
                   help="a compile step: its record (relative to --kit), the digest's key, the product")
    p.add_argument("--source-manifest", nargs=2, action="append", default=[], metavar=("MANIFEST", "DIR"),
                   help="an extracted archive: its name -> sha256 manifest and the directory it fills")
    return p


def split(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the script's own arguments, the command after ``--``)."""
    args = list(argv)
    if "--" not in args:
        return args, []
    i = args.index("--")
    return args[:i], args[i + 1:]


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    own, command = split(sys.argv[1:] if argv is None else argv)
    a = parser().parse_args(own)
    if not command:
        say(f"{PREFIX} USAGE no command after --: nothing to start")
        return EXIT_USAGE
    say(f"{BEGIN} kit {a.kit}")
    ck = run_checks(a, os.environ)
    if ck.failures:
        for failure in ck.failures:
            say(failure.line())
        say(f"{STOPPED} {len(ck.failures)} of {ck.checked} checks failed; {command[0]} not started")
        return EXIT_FAILED
    say(f"{PASS} {ck.checked} checks passed; exec {command[0]}")
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        say(f"{PREFIX} EXEC {command[0]}: {exc.strerror or exc}")
        return 127
    return 0  # not reached: execvp replaced the process


__all__ = ["BEGIN", "EXIT_FAILED", "FAIL", "PASS", "PREFIX", "STOPPED", "Checker", "Failure", "main",
           "parser", "run_checks", "split"]


if __name__ == "__main__":
    sys.exit(main())
