"""Ansible strategy plugin: ``linear``, run through Mitogen when Mitogen is installed.

Every playbook of sparkctl runs task by task on all hosts (``linear``). With Mitogen (a dependency
of sparkctl, pinned in constraints.txt) each node keeps one Python interpreter for the whole run
and modules are sent to it over the SSH connection, instead of one SSH round trip, one upload and
one fresh interpreter per task and host: a full `provision` of the lab takes ~1.6x less wall time
and ~2.1x less CPU (bench/provision_strategy.py). Connections Mitogen does not handle (a switch's
network_cli or httpapi) run as they would under ``linear``.

Where Mitogen is missing (an ``ansible-playbook`` whose Python lacks it) this is plain ``linear``;
``ANSIBLE_STRATEGY=linear`` in the environment runs one command (sparkctl's or ansible-playbook's)
without Mitogen.

A loaded node's sshd may drop a new connection or send its banner late ("Connection timed out
during banner exchange", "kex_exchange_identification: ... Connection reset by peer"). Ansible's
ssh connection tries such a connection again (ansible.cfg ``[ssh_connection] retries``); Mitogen's
does not, so its connection step is wrapped here: the same failures are tried again, twice, after
2 s and then 4 s. A refused connection, a changed host key or a refused login fail at once. A
``meta: reset_connection`` to a node that cannot answer (its path just cut) drops the connection
with a warning instead of stopping the run (``reset_tolerant``).

A task whose ``when`` is false for a host is skipped here, on the controller, without forking a
worker for it: Ansible forks one worker process per task and host, skipped or not, and a worker of
this controller copies ~16 MiB of the parent's pages on write (~4,000 page faults), about 25 ms of
CPU for a task that then runs nothing. The condition is evaluated exactly as the worker's
TaskExecutor would (the same variables, play context overrides and search path), and the result,
callbacks and run record are the ones the worker would have sent. Only plain tasks are skipped
here, includes among them (a worker evaluates an include's ``when`` before anything else and
returns the same skip, which the strategy never expands): a task with a loop, ``delegate_to``,
``run_once``, a meta task or a handler, a condition that warns or fails to evaluate, or a true one
goes to a worker as before.

A task whose action never leaves the controller (``set_fact``, ``assert``, ``debug``, ``set_stats``,
``validate_argument_spec``, an include) runs here too, through the same TaskExecutor a worker would
run, on a copy of the task (the worker's own is a forked copy), and its result goes through the
same results queue: the plugins of these actions never open the connection. They were ~60 % of the
task runs of a lab test run, each with a worker forked for it. The same exceptions go to a worker
(a loop, ``delegate_to``, ``run_once``, ``until``, ``async``, a handler); an exception that
TaskExecutor does not answer itself fails the task.

``SPARKCTL_SKIP_IN_WORKER=1`` in the environment sends every task to a worker.

Before Mitogen sends a module, it finds the module_utils files the module needs by compiling the
module and each file it imports, again for every module of every run (its cache lives as long as
one ``ansible-playbook``): ~40 files and ~70 ms of CPU per module, about a fifth of a short run's
controller CPU. The compiled code is kept here across runs, by the digest of the source, its name
and this Python's bytecode magic, in ``$XDG_CACHE_HOME/sparkctl/mitogen-code`` (else
``~/.cache/sparkctl/mitogen-code``; ``SPARKCTL_MITOGEN_CODE_CACHE`` names another directory, or
``off``). The scan itself is Mitogen's, unchanged: only what ``compile`` would return is read back
(and only its imports are looked at; nothing in it runs). A source that changes has another digest.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import logging
import marshal
import os
import tempfile
import time
import types
from collections.abc import Callable
from typing import Any

DOCUMENTATION = r"""
name: sparkctl_linear
short_description: linear, through Mitogen when it is installed
description:
  - The linear strategy; with the mitogen package installed, Mitogen's connection and module
    execution are used for the connections it supports.
"""

try:
    from ansible_mitogen.plugins.strategy.mitogen_linear import StrategyModule as BASE
except ImportError:  # no Mitogen in this Python: plain linear
    from ansible.plugins.strategy.linear import StrategyModule as BASE

MITOGEN = BASE.__module__.startswith("ansible_mitogen")

# What ssh prints when sshd accepted the TCP connection but, being busy, did not answer in time or
# dropped it before the login: worth another attempt (never a refusal, a host key or a login).
TRANSIENT = (
    "during banner exchange",
    "kex_exchange_identification",
    "Connection reset by peer",
    "Connection closed by remote host",
    "ssh_exchange_identification",
)
ATTEMPTS = 3
BACKOFF_S = 2.0


def transient(message: str) -> bool:
    return any(marker in message for marker in TRANSIENT)


def retrying(connect: Callable[..., Any], sleep: Callable[[float], Any] = time.sleep) -> Callable[..., Any]:
    """``connect`` (Mitogen's ``Connection._connect_stack``) tried again after a transient failure
    (AnsibleConnectionFailure naming one of TRANSIENT), with a doubling pause."""
    from ansible.errors import AnsibleConnectionFailure

    @functools.wraps(connect)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        pause = BACKOFF_S
        for attempt in range(1, ATTEMPTS + 1):
            try:
                return connect(*args, **kwargs)
            except AnsibleConnectionFailure as exc:
                if attempt == ATTEMPTS or not transient(str(exc)):
                    raise
            sleep(pause)
            pause *= 2
        raise AssertionError("unreachable")

    wrapper.sparkctl_retrying = True  # type: ignore[attr-defined]
    return wrapper


def reset_tolerant(reset: Callable[..., Any]) -> Callable[..., Any]:
    """``reset`` (Mitogen's ``Connection.reset``, behind ``meta: reset_connection``) that outlives a
    node that cannot answer. Mitogen forgets the connection, asks the node to shut it down and waits
    30 s for the SSH process to end; a node whose path a change just cut (the armed netplan or
    firewall apply) answers nothing, and the SSH client notices only after its keepalive (15 s x 3),
    so Mitogen's wait ran out and the whole run stopped with "Unexpected Exception" instead of the
    role's own outcome. The connection is already forgotten then: the next task connects anew."""

    @functools.wraps(reset)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        import mitogen.core

        try:
            return reset(self, *args, **kwargs)
        except mitogen.core.CallError as exc:
            if not str(exc).startswith("mitogen.core.TimeoutError"):
                raise
            from ansible.utils.display import Display

            host = getattr(getattr(self, "_play_context", None), "remote_addr", None) or "the node"
            Display().warning(f"{host} did not answer the shutdown of its connection (its path may be "
                              "cut); the connection is dropped and the next task connects anew")
            return None

    wrapper.sparkctl_reset_tolerant = True  # type: ignore[attr-defined]
    return wrapper


class QuietResetTimeout(logging.Filter):
    """Drops the traceback Mitogen's service pool logs (as an error) for a reset whose shutdown
    wait ran out: ``reset_tolerant`` says it in one warning instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not (type(exc).__name__ == "TimeoutError" and type(exc).__module__ == "mitogen.core"
                    and record.args is not None and "reset" in record.args)


if MITOGEN:
    from ansible_mitogen.connection import Connection as _MitogenConnection

    if not getattr(_MitogenConnection._connect_stack, "sparkctl_retrying", False):
        _MitogenConnection._connect_stack = retrying(_MitogenConnection._connect_stack)
    if not getattr(_MitogenConnection.reset, "sparkctl_reset_tolerant", False):
        _MitogenConnection.reset = reset_tolerant(_MitogenConnection.reset)
    _service_log = logging.getLogger("mitogen.service")
    if not any(isinstance(f, QuietResetTimeout) for f in _service_log.filters):
        _service_log.addFilter(QuietResetTimeout())


CODE_CACHE_ENV = "SPARKCTL_MITOGEN_CODE_CACHE"


def code_cache_dir() -> str | None:
    """Where compiled module code is kept across runs (None: ``$SPARKCTL_MITOGEN_CODE_CACHE=off``)."""
    chosen = os.environ.get(CODE_CACHE_ENV, "").strip()
    if chosen:
        return None if chosen == "off" else os.path.expanduser(chosen)
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "sparkctl", "mitogen-code")


def cached_compile(directory: str, compile_: Callable[..., Any] = compile) -> Callable[..., Any]:
    """``compile`` for Mitogen's module scan, answered from ``directory`` when the same source (with
    the same name and mode, for this Python's bytecode) was compiled before; a directory that cannot
    be read or written only costs the compile."""
    memo: dict[str, Any] = {}

    def cached(source: Any, filename: Any, mode: str, *args: Any, **kwargs: Any) -> Any:
        if args or kwargs or not isinstance(source, (bytes, str)) or not isinstance(filename, str):
            return compile_(source, filename, mode, *args, **kwargs)
        data = source if isinstance(source, bytes) else source.encode("utf-8", "surrogatepass")
        digest = hashlib.sha256(importlib.util.MAGIC_NUMBER)
        for part in (filename.encode("utf-8", "surrogatepass"), mode.encode(), data):
            digest.update(len(part).to_bytes(8, "little"))
            digest.update(part)
        key = digest.hexdigest()
        if key in memo:
            return memo[key]
        path = os.path.join(directory, key + ".code")
        try:
            with open(path, "rb") as f:
                code = marshal.load(f)
        except (OSError, EOFError, ValueError, TypeError):
            code = None
        if not isinstance(code, types.CodeType):
            code = compile_(source, filename, mode)
            _keep(directory, path, marshal.dumps(code))
        memo[key] = code
        return code

    cached.sparkctl_cached = True  # type: ignore[attr-defined]
    cached.sparkctl_compile = compile_  # type: ignore[attr-defined]
    return cached


def _keep(directory: str, path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all (a temporary name, then a rename)."""
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass


if MITOGEN:
    import ansible_mitogen.module_finder as _module_finder

    _cache_dir = code_cache_dir()
    if _cache_dir and not getattr(getattr(_module_finder, "compile", None), "sparkctl_cached", False):
        # Module-level: the name ``compile`` in Mitogen's module_finder, before the builtin.
        _module_finder.compile = cached_compile(_cache_dir)  # type: ignore[attr-defined]

def skipped_here(host: Any, task: Any, task_vars: dict[str, Any], play_context: Any,
                 loader: Any) -> dict[str, Any] | None:
    """The result a worker would return for ``task`` on ``host`` when its ``when`` is false there
    (``TaskExecutor._execute_internal``'s skip), or None: the task goes to a worker."""
    from ansible import constants as C
    from ansible._internal._display_utils import DeferredWarningContext
    from ansible._internal._templating._engine import TemplateEngine
    from ansible.playbook.handler import Handler

    if (not task.when or task.loop or task.loop_with or task.delegate_to or task.run_once
            or isinstance(task, Handler)
            or task.action in C._ACTION_META):
        return None
    try:
        with DeferredWarningContext(variables=task_vars) as warnings:
            job_vars = dict(task_vars)
            search = task.get_search_path()
            if loader.get_basedir() not in search:
                search.append(loader.get_basedir())
            job_vars["ansible_search_path"] = search
            templar = TemplateEngine(loader=loader, variables=job_vars)
            tempvars = dict(job_vars)
            context = play_context.set_task_and_variable_override(task=task, variables=job_vars,
                                                                   templar=templar)
            context.post_validate(templar=templar)
            if not context.remote_addr:
                context.remote_addr = host.address
            context.update_vars(tempvars)
            why: dict[str, Any] = {}
            if task._resolve_conditional(task.when, tempvars, result_context=why):
                return None
            result = {"changed": False, "skipped": True, "skip_reason": "Conditional result was False", **why}
            task.update_result_no_log(templar, result)
        if warnings.get_warnings() or warnings.get_deprecation_warnings():
            return None
    except Exception:  # the worker evaluates it again and reports whatever it raises
        return None
    return result


# Actions whose plugins never touch the connection (and never block): run on the controller.
# By the name the action resolved to: a project's own plugin of the same short name stays in a worker.
CONTROLLER_ACTIONS = frozenset(
    "ansible.builtin." + name
    for name in ("set_fact", "assert", "debug", "set_stats", "validate_argument_spec", "include_tasks",
                 "include_role")
)


def runs_here(task: Any) -> bool:
    """Whether ``task`` runs on the controller, without a worker (see the module's docstring)."""
    from ansible.playbook.handler import Handler

    return (task.resolved_action in CONTROLLER_ACTIONS and not isinstance(task, Handler)
            and not (task.loop or task.loop_with or task.delegate_to or task.run_once or task.until
                     or task.async_val))


class StrategyModule(BASE):  # type: ignore[misc,valid-type]
    """``linear`` (through Mitogen where installed) that skips a false ``when``, and runs an action that
    never leaves the controller, without a worker."""

    def _queue_task(self, host: Any, task: Any, task_vars: dict[str, Any], play_context: Any) -> None:
        if os.environ.get("SPARKCTL_SKIP_IN_WORKER") == "1":
            super()._queue_task(host, task, task_vars, play_context)
            return
        result = skipped_here(host, task, task_vars, play_context, self._loader)
        if result is not None:
            squashed = task.copy()
            squashed.squash()
            self._started(host, task, task_vars, play_context)
            self._answer(host, task, result, squashed.dump_attrs(), "skipped")
        elif runs_here(task):
            self._run_here(host, task, task_vars, play_context)
        else:
            super()._queue_task(host, task, task_vars, play_context)

    def _run_here(self, host: Any, task: Any, task_vars: dict[str, Any], play_context: Any) -> None:
        """Run ``task`` for ``host`` in this process as a worker would, and answer with its result."""
        from ansible._internal import _task
        from ansible.executor.task_executor import TaskExecutor
        from ansible.plugins import loader as plugin_loader

        self._started(host, task, task_vars, play_context)
        mine = task.copy()  # the worker's task is a forked copy: its post-validation stays its own
        try:
            with _task.TaskContext(mine):
                result = TaskExecutor(host, mine, dict(task_vars), play_context, self._loader, plugin_loader,
                                      self._final_q, self._variable_manager).run()
        except Exception as exc:  # TaskExecutor answers its own failures; anything else fails the task
            from ansible._internal._errors import _error_utils as errors

            result = errors.result_dict_from_exception(exc)
        self._answer(host, task, result, mine.dump_attrs(), "ran")

    def _started(self, host: Any, task: Any, task_vars: dict[str, Any], play_context: Any) -> None:
        """What _queue_task does before a worker starts: the task remembered for the result's
        conversion, then runner_on_start."""
        self._queued_task_cache[(host.name, task._uuid)] = {
            "host": host, "task": task, "task_vars": task_vars, "play_context": play_context}
        self._tqm.send_callback("v2_runner_on_start", host, task)

    def _answer(self, host: Any, task: Any, result: dict[str, Any], fields: dict[str, Any], how: str) -> None:
        """What the worker sends at its end: the result, through the results queue."""
        from ansible.executor.task_result import _RawTaskResult
        from ansible.utils.display import Display

        self._final_q.send_task_result(_RawTaskResult(host=host, task=task, return_data=result,
                                                      task_fields=fields))
        self._pending_results += 1
        Display().vvvv(f"sparkctl_linear: {host.name}: {how} without a worker: {task.get_name()}")


__all__ = ["BASE", "CODE_CACHE_ENV", "CONTROLLER_ACTIONS", "MITOGEN", "QuietResetTimeout", "StrategyModule",
           "cached_compile", "code_cache_dir", "reset_tolerant", "retrying", "runs_here", "skipped_here",
           "transient"]
