"""Image references (standard library only): the controller renders them, the nodes resolve them.

A pulled image is named by digest (``name@sha256:…``), but ``docker save``/``docker load`` keeps
no repository digest, so on a node that loaded it that reference never resolves. `sparkctl stage
image` therefore gives the image one more local tag on every node, derived from the digest alone
(:func:`run_reference`), and the rank's ``docker run`` names that tag: the same on all four nodes,
known before anything is pulled, and pointing at exactly the bytes of the digest.
"""

from __future__ import annotations

import re

DIGEST_REF = re.compile(r"@sha256:([0-9a-f]{64})$")


def is_digest_ref(ref: str) -> bool:
    return bool(DIGEST_REF.search(ref))


def repository(ref: str) -> str:
    """``name`` of ``name:tag`` / ``name@sha256:…`` (a registry port stays part of the name)."""
    name = ref.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        name = name[: len(name) - len(last)] + last.split(":", 1)[0]
    return name


def run_reference(ref: str) -> str:
    """What ``docker run`` names on every node: ``<name>:sparkctl-<first 12 hex of the digest>``
    for a digest reference, the reference itself (a local name:tag) otherwise."""
    m = DIGEST_REF.search(ref)
    return f"{repository(ref)}:sparkctl-{m.group(1)[:12]}" if m else ref


def judge_answer(node: str, answer: object, ref: str) -> tuple[str | None, str | None]:
    """A fast path's check of one node's image answer (``{"found": {"id", …} | None}`` or
    ``{"error": …}``): ``(reason, None)`` when it is unreadable or absent, else ``(None, image ID)``."""
    if not isinstance(answer, dict) or answer.get("error"):
        why = answer.get("error") if isinstance(answer, dict) else "no answer"
        return f"{node}: the image could not be read ({why})", None
    found = answer.get("found")
    if not found:
        return f"{node}: has no image under {ref}", None
    return None, str(found.get("id"))


def mismatches(ids: dict[str, str], want: str | None, pinned: bool, ref: str) -> list[str]:
    """One reason per node whose image ID is not ``want`` (the pin, else the head's)."""
    if not want:
        return []
    whose = "the pinned image" if pinned else "the head's"
    return [f"{node}: the image under {ref} is {ident}, not {whose} {want}"
            for node, ident in sorted(ids.items()) if ident != want]

