"""The probe's file digests are keyed (HMAC) with a key that never leaves the sparkctl process, so a
digest published in `status --json` or a bundle is no oracle for guessing the API key."""

from __future__ import annotations

import hashlib
from pathlib import Path

from sparkctl.nodeside import probe as nodeprobe
from sparkctl.serve import probe

TEMPLATE = '# header\napi-key: "{}"\n'


def test_a_published_digest_does_not_confirm_a_guessed_key(tmp_path: Path) -> None:
    secret_file = tmp_path / "rank-secrets.yaml"
    secret_file.write_text(TEMPLATE.format("sk-the-real-key"))
    published = nodeprobe._keyed(str(secret_file), probe.HASH_KEY)
    # What an attacker can compute from a guess: plain digests of the known template.
    for guess in ("sk-the-real-key", "sk-wrong"):
        assert published != hashlib.sha256(TEMPLATE.format(guess).encode()).hexdigest()
    # A digest made with another run's key does not match either: nothing carries over.
    assert published != nodeprobe._keyed(str(secret_file), "ab" * 32)
    assert published == nodeprobe._keyed(str(secret_file), probe.HASH_KEY)
    assert nodeprobe._keyed(str(tmp_path / "missing"), probe.HASH_KEY) is None
