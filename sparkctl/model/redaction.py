"""Secrets out of every document sparkctl records (run records, results, bundles, status).

SGLang's ``/server_info`` is built from its server arguments and so carries ``api_key`` (and
``admin_api_key``) in clear; any such field, at any depth, and any known secret value wherever it
appears, is replaced before a document is written or printed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

REDACTED = "<redacted>"
# Field names that hold secrets in SGLang's arguments, Ansible variables or HTTP headers.
# A key that *ends* in one of these words (api_key, admin_api_key, hf_token, ssl_keyfile_password),
# never a longer word that merely contains one (max_total_tokens, tokenizer_path).
SECRET_FIELD = re.compile(
    r"(?i)(^|[_-])(api[_-]?key|token|secret|passw(or)?d|passphrase|authorization|credentials?)$"
)


# Secrets recognised by their shape, for text whose secrets this shell cannot resolve (a log
# written while another key was in use): an API key set as an argument or a config line, a bearer
# token, a Hugging Face token.
_SHAPES = (
    # an Authorization header's credentials, as a header line, JSON or a Python dict repr
    # ('authorization': 'Bearer ...', b'...' included), with or without its scheme word
    (re.compile(r"(?i)(authorization(?:\\?[\"'])?\s*[:=]\s*(?:b?\\?[\"'])?(?:(?:bearer|basic|token)\s+)?)"
                r"(?!(?:null|true|false|none)\b)[^\"'\\\s,{}\[\]<]+"), r"\1" + REDACTED),
    # a bearer token anywhere else (a header tuple ('authorization', 'Bearer ...'), a curl line)
    (re.compile(r"(?i)(\bbearer\s+)[A-Za-z0-9._~+/=-]{8,}"), r"\1" + REDACTED),
    # a value in clear: quoted, or a bare word that is not JSON/YAML syntax (null, an object, ...)
    # (quotes may come escaped, as in a file held inside a JSON document).
    (re.compile(r"(?i)((?:admin[_-])?api[_-]?key(?:\\?[\"'])?\s*[:=]\s*(?:\\?[\"'])?)"
                r"(?!(?:null|true|false|none)\b)[^\"'\\\s,{}\[\]<]+"), r"\1" + REDACTED),
    (re.compile(r"(?i)(--(?:admin-)?api-key[ =])\S+"), r"\1" + REDACTED),
    (re.compile(r"\bhf_[A-Za-z0-9]{20,}\b"), REDACTED),
)


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """Every known secret value, and anything shaped like a secret, replaced in ``text``."""
    for s in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = text.replace(s, REDACTED)
    for pattern, replacement in _SHAPES:
        text = pattern.sub(replacement, text)
    return text


def _secret_field(key: Any, value: Any) -> bool:
    return isinstance(key, str) and bool(SECRET_FIELD.search(key)) and value not in (None, "", False)


def strip_secrets(doc: Any, secrets: Iterable[str] = ()) -> Any:
    """A copy of ``doc`` (JSON-like) with secret fields and known secret values redacted."""
    values = [s for s in secrets if s]

    def walk(item: Any) -> Any:  # a JSON value (not a cluster node)
        if isinstance(item, dict):
            return {k: REDACTED if _secret_field(k, v) else walk(v) for k, v in item.items()}
        if isinstance(item, list | tuple):
            return [walk(v) for v in item]
        if isinstance(item, str):
            return redact_text(item, values)
        return item

    return walk(doc)
