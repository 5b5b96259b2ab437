"""The one place Ansible runs: ``execute(plan, on_event) -> RunResult``.

This is the only module that imports ``ansible_runner``. Every run gets its own directory
``<state>/runs/<timestamp>-<verb>/`` (``sparkctl.ansible.content.runs_dir``: the per-user state
directory, never the source tree) holding the artifacts (job events, stdout, rc), Ansible's home
and local temp, and the SSH control sockets, so runs never share state with ``~/.ansible`` or with
each other. The SSH settings themselves (pipelining, ControlPersist, no compression) come from the
shipped ``ansible.cfg`` (``content.ansible_cfg``), the same file a manual ``ansible-playbook`` run
in a clone uses.

Secrets never reach the run directory: they are not put in ``envvars`` or ``extravars`` (both are
written to files by ansible-runner), and every secret variable leaves the environment that
ansible-runner records for the length of the run; the playbook reads them from an in-memory file
instead (``sparkctl.model.secretenv``), so a run killed mid-way leaves no secret on disk.

Size: one module on purpose — the run directory, the event collector and ``execute`` share the
run's lifecycle (and the scrubbing in its ``finally``), and read best side by side.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from sparkctl.ansible import command as playbook_command
from sparkctl.ansible import content, failures, reach
from sparkctl.ansible.failures import Failure
from sparkctl.ansible.plan import Plan
from sparkctl.errors import SparkctlError
from sparkctl.model import secretenv

# Event kinds handed to ``on_event`` (a small, stable vocabulary over ansible-runner's events).
PLAY = "play"            # a play starts: .task holds the play name, .hosts the hosts it targets
TASK = "task"            # a task starts on a host: .host, .task
OK = "ok"                # a task finished without change on .host
CHANGED = "changed"      # a task changed something on .host
FAILED = "failed"        # a task failed on .host (.msg says why; .ignored when ignore_errors)
UNREACHABLE = "unreachable"
SKIPPED = "skipped"
DIFF = "diff"            # a --diff payload for .host (.res["diff"])
DONE = "done"            # the playbook finished: .res holds the raw stats

_IDENT = "ansible"  # artifacts land in <run dir>/artifacts/ansible/
# Variables ansible-runner adds itself (kept readable in the scrubbed ``command`` file).
_RUNNER_SET_ENV = {
    "ANSIBLE_STDOUT_CALLBACK", "ANSIBLE_CALLBACK_PLUGINS", "ANSIBLE_RETRY_FILES_ENABLED",
    "ANSIBLE_CACHE_PLUGIN", "ANSIBLE_CACHE_PLUGIN_CONNECTION", "AWX_ISOLATED_DATA_DIR",
    "RUNNER_OMIT_EVENTS", "RUNNER_ONLY_FAILED_EVENTS", "PYTHONPATH", "HOME", "USER", "LANG", "SHELL",
}
# Ansible's SSH control sockets must fit in sun_path (108 bytes); ``%C`` is 40 hex digits.
_MAX_CONTROL_DIR_LEN = 60


@dataclass(frozen=True)
class RunnerEvent:
    """One thing that happened during a run, already reduced to what the UI needs."""

    kind: str
    host: str | None = None
    task: str | None = None
    msg: str | None = None
    ignored: bool = False
    res: dict[str, Any] = field(default_factory=dict)
    hosts: tuple[str, ...] = ()


@dataclass
class HostStats:
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    rescued: int = 0
    ignored: int = 0

    @property
    def healthy(self) -> bool:
        return self.failed == 0 and self.unreachable == 0

    def as_dict(self) -> dict[str, int]:
        return {
            "ok": self.ok,
            "changed": self.changed,
            "failed": self.failed,
            "unreachable": self.unreachable,
            "skipped": self.skipped,
            "rescued": self.rescued,
            "ignored": self.ignored,
        }


@dataclass
class RunResult:
    """What a run did, per host, plus where its artifacts are."""

    plan: Plan
    rc: int
    status: str                                    # successful | failed | timeout | canceled
    stats: dict[str, HostStats]
    failures: list[Failure]
    artifact_dir: Path
    run_dir: Path
    duration_s: float
    # Per task name: {host: module result} of the tasks that finished ok/changed (for verbs that read
    # facts through a playbook). Results of tasks marked ``no_log`` are censored by Ansible itself.
    results: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    # What the playbook reported with ``set_stats`` (aggregated, not per host): read it through
    # ``sparkctl.ansible.results``, by key.
    reported: dict[str, Any] = field(default_factory=dict)
    # The runnable ansible-playbook line of this run (``ansible.command``, as one argv through
    # ``env``); kept in the run directory's ``command`` file too. Empty: the plan's short form.
    command: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.rc == 0 and self.status == "successful" and not self.failures

    @property
    def changed_total(self) -> int:
        return sum(s.changed for s in self.stats.values())

    @property
    def unreachable_hosts(self) -> list[str]:
        return sorted({f.host for f in self.failures if f.unreachable})

    @property
    def failed_hosts(self) -> list[str]:
        return sorted({f.host for f in self.failures})

    def task_results(self, task: str) -> dict[str, dict[str, Any]]:
        """{host: result} of the task named ``task`` (exact name, as shown by Ansible)."""
        return self.results.get(task, {})

    def as_dict(self) -> dict[str, Any]:
        return {
            "playbook": self.plan.playbook,
            "command": self.command or self.plan.argv(),
            "rc": self.rc,
            "status": self.status,
            "ok": self.ok,
            "duration_s": round(self.duration_s, 2),
            "hosts": {h: s.as_dict() for h, s in sorted(self.stats.items())},
            "failures": [
                {"host": f.host, "task": f.task, "msg": f.msg, "unreachable": f.unreachable,
                 "cause": failures.kind(f)}
                for f in self.failures
            ],
            "artifact_dir": str(self.artifact_dir),
        }


EventHandler = Callable[[RunnerEvent], None]


def _verb(plan: Plan) -> str:
    return Path(plan.playbook).stem.replace("_", "-")


def new_run_dir(verb: str, runs_dir: Path | None = None) -> Path:
    """A fresh ``<runs>/<timestamp>-<verb>/`` directory (0700); never reuses an existing one."""
    base = runs_dir or content.runs_dir()
    base.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now().strftime("%Y%m%dT%H%M%S")
    for n in range(1000):
        path = base / (f"{stamp}-{verb}" if n == 0 else f"{stamp}-{verb}.{n}")
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            continue
        return path
    raise SparkctlError(f"cannot create a run directory under {base}")


def control_path_dir(run_dir: Path) -> Path:
    """Where this run's SSH masters live: in the run dir, or a short temp dir if that path is too long."""
    cp = run_dir / "cp"
    if len(str(cp)) > _MAX_CONTROL_DIR_LEN:
        cp = Path(tempfile.mkdtemp(prefix="sparkctl-cp-"))
    cp.mkdir(mode=0o700, exist_ok=True)
    return cp


def run_environment(run_dir: Path, cp_dir: Path) -> dict[str, str]:
    """Environment variables for one run (no secrets: ansible-runner writes these to env/envvars)."""
    bin_dir = str(Path(sys.executable).parent)
    path = os.environ.get("PATH", "")
    home = run_dir / "ansible-home"
    tmp = run_dir / "tmp"
    home.mkdir(mode=0o700, exist_ok=True)
    tmp.mkdir(mode=0o700, exist_ok=True)
    return {
        "ANSIBLE_CONFIG": str(content.ansible_cfg()),
        "ANSIBLE_COLLECTIONS_PATH": os.pathsep.join(str(p) for p in content.collections_paths()),
        # Roles keep controller-side caches (built wheels, switch backups) under the state directory.
        content.STATE_ENV: str(content.state_dir()),
        "ANSIBLE_HOME": str(home),
        "ANSIBLE_LOCAL_TEMP": str(tmp),
        "ANSIBLE_SSH_CONTROL_PATH_DIR": str(cp_dir),
        # ansible-runner turns host key checking off unless told otherwise; sparkctl never does.
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "ANSIBLE_FORCE_COLOR": "False",
        "ANSIBLE_NOCOLOR": "True",
        "PATH": bin_dir + (os.pathsep + path if path else ""),
    }


def vault_environment() -> dict[str, str]:
    """The vault password *file* the inventory was read with, for ansible-playbook and the vars
    plugin (``--vault-password-file``, ``$ANSIBLE_VAULT_PASSWORD_FILE`` or the controller's
    ansible.cfg, which the run's own ansible.cfg replaces). A path, never the password."""
    from sparkctl.model.vault import vault_password_files  # ansible-core's config: only for a run

    files = vault_password_files()
    return {"ANSIBLE_VAULT_PASSWORD_FILE": str(files[0])} if files else {}


def close_masters(cp_dir: Path) -> int:
    """Ask every SSH master of this run to exit; returns how many sockets were closed."""
    closed = 0
    if not cp_dir.is_dir():
        return 0
    for sock in sorted(cp_dir.iterdir()):
        if not sock.is_socket():
            continue
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(
                ["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "sparkctl-master"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=5,
                check=False,
            )
            closed += 1
    return closed


def _useful_line(text: Any) -> str | None:
    """The line of a command's stderr that says what went wrong (an error line, not a caret marker)."""
    if not isinstance(text, str):
        return None
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and ln.strip().strip("^~ ")]
    if not lines:
        return None
    for ln in lines:
        if "error" in ln.lower():
            return ln
    return lines[-1]


def _message(res: dict[str, Any]) -> str:
    """The most useful one-line reason from a failed/unreachable result."""
    for key in ("msg", "stderr", "reason", "stdout", "module_stderr", "module_stdout"):
        val = res.get(key)
        if isinstance(val, str) and val.strip():
            lines = [ln.strip() for ln in val.strip().splitlines() if ln.strip()]
            text = " | ".join(lines[-3:]) if key != "msg" else " ".join(lines)
            if key == "msg" and len(text) < 40:
                extra = _useful_line(res.get("stderr") or res.get("module_stderr"))
                if extra:
                    text += ": " + extra
            return text[:600]
    if res.get("results"):  # loop results: first failed item
        for item in res["results"]:
            if isinstance(item, dict) and item.get("failed"):
                return _message(item)
    return "failed (no message)"


def _raw_text(res: dict[str, Any], limit: int = 20000) -> str:
    """Every message a failed or unreachable result holds, uncut (the cause may be its last line)."""
    parts = [res[k] for k in ("msg", "stderr", "module_stderr", "stdout", "module_stdout", "reason")
             if isinstance(res.get(k), str) and res[k].strip()]
    for item in res.get("results") or []:
        if isinstance(item, dict) and item.get("failed"):
            parts.append(_raw_text(item, limit))
            break
    return "\n".join(parts)[-limit:]


class _Collector:
    """Turns ansible-runner's raw events into RunnerEvents, failures and per-task results."""

    def __init__(self, on_event: EventHandler | None):
        self.on_event = on_event
        self.failures: list[Failure] = []
        self.results: dict[str, dict[str, dict[str, Any]]] = {}
        self.stats_raw: dict[str, Any] | None = None
        self.handler_error: BaseException | None = None

    def emit(self, ev: RunnerEvent) -> None:
        if self.on_event is None or self.handler_error is not None:
            return
        try:
            self.on_event(ev)
        except Exception as exc:  # a broken display must not kill the run; surfaced after it
            self.handler_error = exc

    def __call__(self, raw: dict[str, Any]) -> bool:
        kind = raw.get("event", "")
        data = raw.get("event_data") or {}
        host = data.get("host") or data.get("remote_addr")
        task = (data.get("task") or "").strip()
        res = data.get("res") or {}
        if kind == "playbook_on_play_start":
            pattern = data.get("play_pattern") or data.get("name") or ""
            self.emit(RunnerEvent(PLAY, task=data.get("play") or data.get("name"), msg=pattern))
        elif kind == "runner_on_start":
            self.emit(RunnerEvent(TASK, host=host, task=task))
        elif kind == "runner_on_ok":
            changed = bool(res.get("changed"))
            if task and host:
                self.results.setdefault(task, {})[host] = res
            self.emit(RunnerEvent(CHANGED if changed else OK, host=host, task=task, res=res))
        elif kind == "runner_on_failed":
            ignored = bool(data.get("ignore_errors"))
            msg = _message(res)
            if not ignored:
                self.failures.append(Failure(host or "?", task, msg, raw=_raw_text(res)))
            self.emit(RunnerEvent(FAILED, host=host, task=task, msg=msg, ignored=ignored, res=res))
        elif kind == "runner_on_unreachable":
            # What the connection said, without Mitogen's "EOF on stream" wrapper and ssh's noise.
            msg = failures.summary(_raw_text(res)) if _raw_text(res) else _message(res)
            self.failures.append(Failure(host or "?", task, msg, unreachable=True, raw=_raw_text(res)))
            self.emit(RunnerEvent(UNREACHABLE, host=host, task=task, msg=msg, res=res))
        elif kind == "runner_on_skipped":
            self.emit(RunnerEvent(SKIPPED, host=host, task=task, res=res))
        elif kind == "runner_on_no_hosts":
            pass
        elif kind == "playbook_on_stats":
            self.stats_raw = data
            self.emit(RunnerEvent(DONE, res=data))
        if kind == "runner_on_ok" and data.get("res", {}).get("diff") and self.on_event:
            self.emit(RunnerEvent(DIFF, host=host, task=task, res=res))
        # Returning True keeps the event in the artifacts; without it ansible-runner drops the
        # event and ``runner.stats`` comes back empty.
        return True


def _host_stats(raw: dict[str, Any] | None, hosts_seen: set[str]) -> dict[str, HostStats]:
    stats: dict[str, HostStats] = {h: HostStats() for h in hosts_seen}
    if not raw:
        return stats
    mapping = {
        "ok": "ok",
        "changed": "changed",
        "failures": "failed",
        "dark": "unreachable",
        "skipped": "skipped",
        "rescued": "rescued",
        "ignored": "ignored",
    }
    for src, attr in mapping.items():
        for host, n in (raw.get(src) or {}).items():
            setattr(stats.setdefault(host, HostStats()), attr, int(n))
    for host in raw.get("processed") or {}:
        stats.setdefault(host, HostStats())
    return stats


def scrub_command_file(artifact_dir: Path, keep: set[str]) -> None:
    """ansible-runner records the whole process environment in ``artifacts/<ident>/command``.

    Secrets reach Ansible through that environment, so after the run every value not set by
    sparkctl itself is replaced by ``<redacted>`` (the names stay, for debugging).
    """
    path = artifact_dir / "command"
    if not path.is_file():
        return
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        path.unlink(missing_ok=True)
        return
    env = data.get("env") or {}
    data["env"] = {k: (v if k in keep else "<redacted>") for k, v in sorted(env.items())}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.chmod(0o600)
    tmp.replace(path)


def _cmdline(plan: Plan) -> str | None:
    parts: list[str] = []
    if plan.check:
        parts.append("--check")
    if plan.diff:
        parts.append("--diff")
    return " ".join(parts) or None


def _startup_error(artifact_dir: Path) -> str | None:
    """When ansible-playbook never ran (rc 127, bad inventory...), the reason sits in stdout."""
    out = artifact_dir / "stdout"
    if not out.is_file():
        return None
    lines = [ln.strip() for ln in out.read_text(errors="replace").splitlines() if ln.strip()]
    for ln in lines:
        if "ERROR!" in ln or "was not found or was not executable" in ln or ln.startswith("[ERROR]"):
            return ln[:600]
    return lines[-1][:600] if lines else None


def playbook_dir_in(verb_dir: Path, plan: Plan) -> Path:
    """A fresh ``<verb run dir>/playbook-<name>[.n]/`` (0700) for one playbook of a verb that keeps
    its own run directory (`up`: a stop, the start, a stop after a failure, its boot records)."""
    verb_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    name = f"playbook-{_verb(plan)}"
    for n in range(1000):
        path = verb_dir / (name if n == 0 else f"{name}.{n}")
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            continue
        return path
    raise SparkctlError(f"cannot create a playbook directory under {verb_dir}")


def record_command(
    plan: Plan, run_dir: Path, playbooks: Path | None = None
) -> playbook_command.PlaybookCommand:
    """Keep the run's runnable ``ansible-playbook`` line in ``<run dir>/command`` (its extra
    variables beside it in ``vars.json``, 0600): the same line `sparkctl ansible-command` prints."""
    vars_file = playbook_command.write_vars(plan, run_dir / playbook_command.VARS_FILE)
    record = playbook_command.for_plan(plan, vars_file, playbooks)
    (run_dir / "command").write_text(record.line() + "\n")
    return record


@contextlib.contextmanager
def _run_dir_for(
    plan: Plan, runs_dir: Path | None, verb_dir: Path | None = None
) -> Iterator[tuple[Path, Path]]:
    run_dir = playbook_dir_in(verb_dir, plan) if verb_dir is not None else new_run_dir(_verb(plan), runs_dir)
    cp_dir = control_path_dir(run_dir)
    try:
        yield run_dir, cp_dir
    finally:
        close_masters(cp_dir)
        if cp_dir.parent != run_dir:
            with contextlib.suppress(OSError):
                for p in cp_dir.iterdir():
                    p.unlink()
                cp_dir.rmdir()


SILENT_FILE = "silent-nodes.yml"


def _inventory_sources(plan: Plan, private_dir: Path) -> str | list[str]:
    """The inventory, and for the nodes whose SSH port answered no TCP connect a second source
    giving each a short SSH timeout (``sparkctl.ansible.reach``): Ansible still tries and reports them,
    without waiting out the minute a loaded node's handshake may need. Kept in the run directory
    (``silent/silent-nodes.yml``) as what this run decided."""
    inventory = str(Path(plan.inventory).resolve())
    quiet = reach.silent(plan.ssh_endpoints)
    if not quiet:
        return inventory
    extra = private_dir / "silent" / SILENT_FILE
    extra.parent.mkdir(parents=True, exist_ok=True)
    hosts = {n: {"ansible_ssh_timeout": reach.SILENT_SSH_TIMEOUT_S} for n in quiet}
    extra.write_text("# nodes whose SSH port answered no TCP connect within "
                     f"{reach.CONNECT_TIMEOUT_S:g} s before this run (sparkctl.ansible.reach)\n"
                     + json.dumps({"all": {"hosts": hosts}}, indent=2) + "\n")
    return [inventory, str(extra)]


def execute(
    plan: Plan,
    on_event: EventHandler | None = None,
    *,
    runs_dir: Path | None = None,
    run_dir: Path | None = None,
    extra_env: dict[str, str] | None = None,
    project_dir: Path | None = None,
) -> RunResult:
    """Run ``plan`` through ansible-runner and report per host.

    ``on_event`` receives :class:`RunnerEvent` objects in order, from the runner's thread of
    control. ``extra_env`` is for non-secret settings (tests and the benchmark use it to change
    SSH options); it is recorded in the run directory like every other envvar. ``project_dir``
    (default: the shipped Ansible content, ``content.root()``) is where ``playbooks/`` is looked up.
    ``run_dir``: the run directory of the verb this playbook is part of (one verb, one run directory):
    the run's records go into a fresh ``playbook-<name>`` directory inside it instead of a run
    directory of their own under ``runs_dir``.
    """
    project = Path(project_dir or content.root())
    missing = content.ensure_collections()
    if missing:
        print(f"warning: {missing}", file=sys.stderr)
    playbook = project / "playbooks" / plan.playbook
    if not playbook.is_file():
        raise SparkctlError(f"playbook not found: playbooks/{plan.playbook}", exit_code=2)
    if not Path(plan.inventory).exists():
        raise SparkctlError(f"inventory not found: {plan.inventory}", exit_code=2)

    collector = _Collector(on_event)
    hosts_seen: set[str] = set()

    def track(raw: dict[str, Any]) -> bool:
        host = (raw.get("event_data") or {}).get("host")
        if host:
            hosts_seen.add(host)
        return collector(raw)

    started = time.monotonic()
    verb_dir = run_dir
    with _run_dir_for(plan, runs_dir, verb_dir) as (private_dir, cp_dir):
        envvars = run_environment(private_dir, cp_dir)
        envvars.update(vault_environment())
        record = record_command(plan, private_dir, project / "playbooks")
        if extra_env:
            envvars.update(extra_env)
        # Secret variables leave os.environ for the run (ansible-runner records the whole
        # environment) and reach ansible-playbook through memory only (model.secretenv).
        with secretenv.withheld(plan.secret_env) as secret_vars:
            envvars.update(secret_vars)
            try:
                import ansible_runner  # here, not at the top: `status` and `--help` never run a playbook

                runner = ansible_runner.run(
                    private_data_dir=str(private_dir),
                    project_dir=str(project),
                    playbook=f"playbooks/{plan.playbook}",
                    inventory=_inventory_sources(plan, private_dir),
                    ident=_IDENT,
                    envvars=envvars,
                    extravars=dict(plan.extravars) or None,
                    cmdline=_cmdline(plan),
                    limit=plan.limit,
                    tags=",".join(plan.tags) or None,
                    skip_tags=",".join(plan.skip_tags) or None,
                    verbosity=plan.verbosity or None,
                    event_handler=track,
                    quiet=True,
                    fact_cache_type="jsonfile",
                )
            finally:
                scrub_command_file(private_dir / "artifacts" / _IDENT, set(envvars) | _RUNNER_SET_ENV)
    duration = time.monotonic() - started
    artifact_dir = Path(runner.config.artifact_dir)
    rc = runner.rc if isinstance(runner.rc, int) else 1
    failures = list(collector.failures)
    if rc != 0 and not failures:
        reason = _startup_error(artifact_dir) or f"ansible-playbook exited {rc}"
        failures.append(Failure("controller", "ansible-playbook", reason))
    result = RunResult(
        plan=plan,
        rc=rc,
        status=str(runner.status),
        stats=_host_stats(collector.stats_raw, hosts_seen),
        failures=failures,
        artifact_dir=artifact_dir,
        run_dir=private_dir,
        duration_s=duration,
        results=collector.results,
        reported=dict((collector.stats_raw or {}).get("artifact_data") or {}),
        command=record.as_argv(),
    )
    if collector.handler_error is not None:
        # The run itself is complete and recorded; report the display problem without hiding it.
        print(f"sparkctl: event display failed: {collector.handler_error!r}", file=sys.stderr)
    return result
