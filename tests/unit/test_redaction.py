"""What sparkctl writes or prints never carries a secret: by value, by field name, or by shape."""

from __future__ import annotations

import pytest

from sparkctl.model.redaction import REDACTED, redact_text, strip_secrets


def test_documents_lose_secret_fields_at_any_depth_and_keep_the_rest() -> None:
    info = {"api_key": "sk-live", "admin_api_key": None, "max_total_tokens": 4000000,
            "tokenizer_path": "/models/x", "nested": [{"hf_token": "hf_x"}, {"note": "uses sk-live"}]}
    out = strip_secrets(info, ["sk-live"])
    assert out["api_key"] == REDACTED and out["admin_api_key"] is None
    assert out["max_total_tokens"] == 4000000 and out["tokenizer_path"] == "/models/x"
    assert out["nested"] == [{"hf_token": REDACTED}, {"note": f"uses {REDACTED}"}]
    assert info["api_key"] == "sk-live"  # a copy: the caller's document is untouched


@pytest.mark.parametrize(
    "line",
    [
        'api-key: "sk-from-an-older-key"',
        "sglang serve --api-key sk-from-an-older-key --port 8004",
        '{"api_key": "sk-from-an-older-key"}',
        "ADMIN_API_KEY=sk-from-an-older-key",
        "Authorization: Bearer sk-from-an-older-key",
        "downloading with hf_AbCdEfGhIjKlMnOpQrStUvWx12",
    ],
)
def test_log_lines_lose_secrets_this_shell_cannot_resolve(line: str) -> None:
    out = redact_text(line)
    assert "sk-from-an-older-key" not in out and "hf_AbCd" not in out and REDACTED in out
