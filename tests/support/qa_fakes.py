"""qualify's and bench's collaborators from serve (``sparkctl.qa.verbs.QaTools``) for a cluster with no
nodes to read: a memory guard with a canned summary, a GPU sampler that counts its reads, an empty
identity, a ``/server_info`` that always matches, and a down-and-up that records the clusters."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from sparkctl.qa.verbs import Identity, QaTools

QUIET_MEMORY = {"samples": 3, "lowest_gib": 20.5, "r4_published_lowest_gib": 19.52, "breach": None}


class QuietGuard:
    """The memory guard's seam: ``summary()`` is ``memory`` (with ``breach`` when one is given)."""

    def __init__(self, breach: str | None = None, memory: Mapping[str, Any] = QUIET_MEMORY) -> None:
        self.record_dir = None
        self.memory = {**memory, "breach": breach}

    def summary(self) -> dict[str, Any]:
        return dict(self.memory)


class Heat:
    """The GPU sampler: canned maxima, and the times it was asked to read."""

    def __init__(self, summary: Mapping[str, Any] | None = None) -> None:
        self.reads = 0
        self._summary = dict(summary or {})

    def summary(self) -> dict[str, Any]:
        return self._summary

    def sample_once(self) -> None:
        self.reads += 1


def no_identity(cluster: Any, **kwargs: Any) -> Identity:
    return {}, {}


def qa_tools(
    *,
    breach: str | None = None,
    memory: Mapping[str, Any] = QUIET_MEMORY,
    heat: Mapping[str, Any] | None = None,
    heats: list[Heat] | None = None,
    identity: Callable[..., Identity] = no_identity,
    server_problems: Callable[[Mapping[str, Any]], list[str]] = lambda info: [],
    cycled: list[Any] | None = None,
) -> QaTools:
    """Fakes for every collaborator; ``heats`` collects each run's sampler, ``cycled`` each cluster
    brought down and up."""

    @contextlib.contextmanager
    def guard(cluster: Any) -> Iterator[QuietGuard]:
        yield QuietGuard(breach, memory)

    @contextlib.contextmanager
    def thermals(cluster: Any) -> Iterator[Heat]:
        sampler = Heat(heat)
        if heats is not None:
            heats.append(sampler)
        yield sampler

    def cycle(cluster: Any) -> dict[str, Any]:
        if cycled is not None:
            cycled.append(cluster)
        return {"down": "ssh", "up_changed": True, "seconds": 0.0}

    return QaTools(guard=guard, thermals=thermals, server_check=lambda cluster: server_problems,
                   identity=identity, cycle=cycle)


def use(monkeypatch: pytest.MonkeyPatch, tools: QaTools) -> QaTools:
    """``tools`` in place of the CLI's factory (``sparkctl.cli.qa.tools``)."""
    from sparkctl.cli import qa as cli_qa

    monkeypatch.setattr(cli_qa, "tools", lambda: tools)
    return tools
