"""Authorization credentials are redacted however the header was printed: a header line, JSON, a
Python dict repr (str or bytes values), a header tuple, a curl line."""

from __future__ import annotations

import pytest

from sparkctl.model.redaction import REDACTED, redact_text

TOKEN = "sk-0lderKey-9f8e7d6c"


@pytest.mark.parametrize(
    "line",
    [
        f"{{'authorization': 'Bearer {TOKEN}', 'content-type': 'application/json'}}",
        f"{{'Authorization': 'bearer {TOKEN}'}}",
        f"headers={{'authorization': b'Bearer {TOKEN}'}}",
        f"{{'authorization': '{TOKEN}'}}",
        f'{{"Authorization": "Bearer {TOKEN}"}}',
        f'{{\\"authorization\\": \\"Bearer {TOKEN}\\"}}',
        f"[('host', 'spark-0'), ('authorization', 'Bearer {TOKEN}')]",
        f"curl -H 'Authorization: Bearer {TOKEN}' http://spark-0:8004/v1/models",
        f"Authorization: Basic {TOKEN}",
    ],
)
def test_authorization_credentials_are_redacted_in_any_printed_form(line: str) -> None:
    out = redact_text(line)
    assert TOKEN not in out and REDACTED in out, out


def test_the_rest_of_the_line_is_kept() -> None:
    out = redact_text(f"{{'authorization': 'Bearer {TOKEN}', 'content-type': 'application/json'}}")
    assert out == f"{{'authorization': 'Bearer {REDACTED}', 'content-type': 'application/json'}}"
    assert redact_text("401: missing Authorization header") == "401: missing Authorization header"
    assert redact_text("{'authorization': None}") == "{'authorization': None}"
