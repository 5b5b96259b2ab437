"""Ansible callback (enabled by name: ``record_results``): every runner callback of a run, one JSON
line each (event, host, task, the result without its timings, the task's fields), appended to
``$RECORD_RESULTS_FILE``. test_strategy_skip.py compares two runs of one play with it."""

from __future__ import annotations

import json
import os
from typing import Any

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = r"""
name: record_results
type: notification
short_description: every runner callback as one JSON line
description: Appends each runner callback (result and task fields) to $RECORD_RESULTS_FILE.
"""

TIMINGS = ("start", "end", "delta")


class CallbackModule(CallbackBase):  # type: ignore[misc]
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "notification"
    CALLBACK_NAME = "record_results"
    CALLBACK_NEEDS_ENABLED = True

    def _write(self, event: str, result: Any = None, host: Any = None, task: Any = None) -> None:
        row: dict[str, Any] = {"event": event}
        if result is not None:
            row.update(host=result._host.get_name(), task=result._task.get_name(),
                       result={k: v for k, v in result._result.items() if k not in TIMINGS},
                       task_fields=getattr(result, "_task_fields", None))
        else:
            row.update(host=host.get_name(), task=task.get_name())
        with open(os.environ["RECORD_RESULTS_FILE"], "a", encoding="utf-8") as f:
            f.write(json.dumps(row, sort_keys=True, default=str) + "\n")

    def v2_runner_on_start(self, host: Any, task: Any) -> None:
        self._write("start", host=host, task=task)

    def v2_runner_on_ok(self, result: Any) -> None:
        self._write("ok", result)

    def v2_runner_on_skipped(self, result: Any) -> None:
        self._write("skipped", result)

    def v2_runner_on_failed(self, result: Any, ignore_errors: bool = False) -> None:
        self._write("failed", result)

    def v2_runner_on_unreachable(self, result: Any) -> None:
        self._write("unreachable", result)

    def v2_runner_item_on_ok(self, result: Any) -> None:
        self._write("item_ok", result)

    def v2_runner_item_on_skipped(self, result: Any) -> None:
        self._write("item_skipped", result)
