"""Live progress of staging on the controller: a bar per node at a terminal, a line now and then
elsewhere — the download, the fan-out, Engram packing, the image build and the kit fetch alike.

Every long step writes one progress document where it runs (``sparkctl.nodeside.progress``: on a
node ``<run_dir>/stage-progress.json``, on the controller ``<state_dir>/stage-progress.json`` for
the kit's git fetch). A poller thread reads them (the nodes' over SSH, ``sparkctl.ssh.fleet``,
host keys verified) once a second while the playbook runs, and the runner's events say which task
each node is in. Rate and ETA are this module's own, from the documents' bytes over the last
RATE_WINDOW_S seconds, so the bars and the lines say the same.

At a terminal: rich bars, one per node (the controller's row appears when it writes a document),
with a row per file in flight under a node's bar. Elsewhere (piped, CI): a line per node when a
step starts or ends, and at most every LINE_EVERY_S seconds between. Under ``--json`` all of it
goes to stderr: stdout carries the final document only.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskID, TextColumn

from sparkctl.ansible import content, runner
from sparkctl.nodeside.progress import PROGRESS_FILE, human_bytes
from sparkctl.ssh import fleet as remote

if TYPE_CHECKING:
    from sparkctl.model import Cluster

CONTROLLER = "controller"  # the row of the controller's own document (the kit's git fetch)
POLL_S = 1.0  # how often the documents are read
LINE_EVERY_S = 10.0  # without a terminal: at most one line per node this often within a step
RATE_WINDOW_S = 10.0  # the rate is the bytes (or rows, objects) of this last stretch
SUB_ROWS = 4  # files in flight shown under a node's bar

STEPS = {
    "fanout": "fan-out",
    "download": "hub download",
    "pack": "Engram packing",
    "build": "image build",
    "save": "image save",
    "fetch": "kit fetch",
}

# read_all() -> {node: raw JSON text or None}
Reader = Callable[[], dict[str, str | None]]


def parse(text: str | None, since: float) -> dict[str, Any] | None:
    """A progress document written during this run (older ones are from a previous run)."""
    if not text:
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    try:
        if float(doc.get("updated", 0)) < since:
            return None
    except (TypeError, ValueError):
        return None
    return doc


def controller_path() -> Path:
    """Where the controller's own long steps write their document (spark_kit_fetch_progress_path)."""
    return content.state_dir() / PROGRESS_FILE


def fleet_reader(
    cluster: Cluster,
    fleet: Callable[[Cluster], remote.Fleet] | None = None,
    local: Path | None = None,
) -> tuple[Reader, Callable[[], None]]:
    """A reader of every node's document over SSH (``fleet``: the connections, the real ones by
    default) and of the controller's at ``local``, and the function that closes it."""
    conns = fleet(cluster) if fleet is not None else remote.Fleet(remote.targets_for(cluster))
    path = f"{cluster.paths.run_dir}/{PROGRESS_FILE}"
    script = f"cat {shlex.quote(path)} 2>/dev/null || true"

    def read() -> dict[str, str | None]:
        out: dict[str, str | None] = {}
        for name, res in conns.run(script, timeout=5.0).items():
            out[name] = res.stdout if res.ok else None
        if local is not None:
            try:
                out[CONTROLLER] = local.read_text(encoding="utf-8")
            except OSError:
                out[CONTROLLER] = None
        return out

    return read, conns.close


# --- numbers -----------------------------------------------------------------------------------


def human_duration(s: float) -> str:
    s = max(0, round(s))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


class Meter:
    """Rate of one counter over the last ``window`` seconds (timestamps from the documents)."""

    def __init__(self, window: float = RATE_WINDOW_S):
        self.window = window
        self.unit = ""
        self.samples: deque[tuple[float, float]] = deque()

    def add(self, t: float, value: float, unit: str = "") -> None:
        if unit != self.unit or (self.samples and (value < self.samples[-1][1] or t < self.samples[-1][0])):
            self.samples.clear()  # another unit, a retry counted back, or another run: start over
            self.unit = unit
        if self.samples and t == self.samples[-1][0]:
            self.samples[-1] = (t, value)
        else:
            self.samples.append((t, value))
        while len(self.samples) > 2 and self.samples[1][0] <= t - self.window:
            self.samples.popleft()

    def rate(self) -> float | None:
        if len(self.samples) < 2:
            return None
        (t0, v0), (t1, v1) = self.samples[0], self.samples[-1]
        return (v1 - v0) / (t1 - t0) if t1 > t0 else None


@dataclass
class View:
    """What one node's document says, in the words of a bar and of a line."""

    node: str
    step: str
    state: str
    run: str = ""  # when the step started (two runs of one step are two steps)
    done: int = 0  # in ``unit``: bytes when the step counts bytes, else its count
    total: int | None = None
    unit: str = "bytes"
    rate: float | None = None  # ``unit`` per second
    eta: float | None = None  # seconds
    detail: str = ""
    error: str = ""
    items: list[dict[str, Any]] = field(default_factory=list)

    @property
    def label(self) -> str:
        return STEPS.get(self.step, self.step or "staging")

    @property
    def finished(self) -> bool:
        return self.state in ("done", "failed")

    def amount(self) -> str:
        if self.unit == "bytes":
            if self.total:
                pct = 100 * self.done / self.total
                return f"{human_bytes(self.done)} of {human_bytes(self.total)} ({pct:.0f}%)"
            return human_bytes(self.done) if self.done else ""
        if self.total:
            return f"{self.done:,} of {self.total:,} {self.unit}"
        return f"{self.done:,} {self.unit}" if self.done else ""

    def speed(self) -> str:
        if self.rate is None or self.finished:
            return ""
        return f"{human_bytes(self.rate)}/s" if self.unit == "bytes" else f"{self.rate:,.0f} {self.unit}/s"

    def remaining(self) -> str:
        return "" if self.eta is None or self.finished else f"ETA {human_duration(self.eta)}"

    def line(self) -> str:
        head = f"{self.node}: {self.label}"
        if self.state == "failed":
            return f"{head} failed{': ' + self.error if self.error else ''}"
        parts = [p for p in (self.amount(), self.speed(), self.remaining(), self.detail) if p]
        if self.state == "done":
            parts = [p for p in (self.amount(), self.detail) if p]
            return f"{head} done{' · ' + ' · '.join(parts) if parts else ''}"
        return f"{head} {' · '.join(parts)}".rstrip()


def _int(doc: dict[str, Any], key: str) -> int:
    try:
        return int(doc.get(key) or 0)
    except (TypeError, ValueError):
        return 0


def view_of(node: str, doc: dict[str, Any], meter: Meter, now: float) -> View:
    """The view of ``doc`` (``meter`` keeps this node's recent counts for the rate)."""
    step = str(doc.get("step") or ("pack" if doc.get("state") == "packing" else "fanout"))
    view = View(node, step, str(doc.get("state") or ""), run=str(doc.get("started") or ""),
                error=str(doc.get("error") or "")[:200])
    count_unit = str(doc.get("count_unit") or "")
    count_done, count_total = _int(doc, "count_done"), _int(doc, "count_total")
    bytes_done, bytes_total = _int(doc, "bytes_done"), _int(doc, "bytes_total")
    if bytes_done or bytes_total or not count_unit:
        view.done, view.total = bytes_done, bytes_total or None
    else:  # a step that counts something else only (the image build's steps)
        view.unit, view.done, view.total = count_unit, count_done, count_total or None
    try:
        t = float(doc.get("updated") or now)
    except (TypeError, ValueError):
        t = now
    meter.add(t, view.done, view.unit)
    rate = meter.rate()
    if rate is not None and rate > 0 and view.unit != "steps":
        view.rate = rate
        if view.total and view.total > view.done:
            view.eta = (view.total - view.done) / rate
    details = []
    if count_unit and view.unit == "bytes" and (count_done or count_total):
        details.append(f"{count_done:,} of {count_total:,} {count_unit}" if count_total
                       else f"{count_done:,} {count_unit}")
    files_done, files_total = _int(doc, "files_done"), _int(doc, "files_total")
    if files_total:
        details.append(f"{files_done} of {files_total} files")
    current = str(doc.get("current") or "")
    items = [i for i in doc.get("items") or [] if isinstance(i, dict) and i.get("name")]
    view.items = items
    if current and not view.finished:
        more = len(items) - 1 if len(items) > 1 and current == items[0].get("name") else 0
        details.append(current + (f" (+{more} more)" if more else ""))
    view.detail = " · ".join(details)
    return view


# --- the renderer --------------------------------------------------------------------------------


class _Rows(Progress):
    """rich's Progress with each file's row kept under its node's bar (rows sort by ``order``)."""

    def get_renderables(self) -> Iterator[Any]:
        yield self.make_tasks_table(sorted(self.tasks, key=lambda t: t.fields.get("order", (0, ""))))


class StageBars:
    """An ``on_event`` handler plus a poller; use as a context manager around ``runner.execute``.

    ``mode``: ``bars`` (rich, at a terminal) or ``lines`` (a line per node when a step starts or
    ends, and at most every ``line_every`` seconds within it). ``clock``: the time of the throttle
    and of documents without their own.
    """

    def __init__(
        self,
        nodes: list[str],
        reader: Reader | None,
        console: Console,
        enabled: bool = True,
        interval: float | None = None,
        mode: str = "bars",
        clock: Callable[[], float] = time.time,
        line_every: float | None = None,
    ):
        self.nodes = list(nodes)
        self.reader = reader
        self.console = console
        self.enabled = enabled
        self.interval = POLL_S if interval is None else interval
        self.mode = mode
        self.clock = clock
        self.line_every = LINE_EVERY_S if line_every is None else line_every
        self.started = clock() - 5.0
        self.progress = _Rows(
            TextColumn("[bold]{task.fields[node]:<10}"),
            TextColumn("{task.fields[phase]:<34}", style="dim"),
            BarColumn(bar_width=28),
            TextColumn("{task.fields[amount]}"),
            TextColumn("{task.fields[speed]}"),
            TextColumn("{task.fields[eta]}"),
            TextColumn("{task.fields[detail]}", style="dim"),
            console=console,
            disable=not (enabled and mode == "bars"),
            transient=False,
        )
        self.tasks: dict[str, TaskID] = {}
        for n in self.nodes:
            self._row(n)
        self.subrows: dict[tuple[str, str], TaskID] = {}
        self.latest: dict[str, dict[str, Any]] = {}
        self.views: dict[str, View] = {}
        self.meters: dict[tuple[str, str, str], Meter] = {}
        # node -> ((step, started, finished), when) of its last line
        self.said: dict[str, tuple[tuple[str, str, bool], float]] = {}
        self.polls = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _row(self, node: str) -> TaskID:
        if node not in self.tasks:
            self.tasks[node] = self.progress.add_task(
                "", total=None, node=node, phase="waiting", amount="", speed="", eta="", detail="",
                order=(len(self.tasks), ""),
            )
        return self.tasks[node]

    def __enter__(self) -> StageBars:
        if self.enabled and self.mode == "bars":
            self.progress.start()
        if self.reader is not None and self.enabled:
            self._thread = threading.Thread(target=self._poll, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self.polls and self._thread is not None and not self._thread.is_alive():
            assert self.reader is not None
            with contextlib.suppress(Exception):  # the last word of a step that ended since the last poll
                self.apply(self.reader())
        if self.enabled and self.mode == "bars":
            self.progress.stop()

    def __call__(self, ev: runner.RunnerEvent) -> None:
        if ev.host not in self.tasks:
            return
        task = self.tasks[ev.host]
        if ev.kind == runner.TASK and ev.task:
            self.progress.update(task, phase=ev.task[:34])
        elif ev.kind in (runner.FAILED, runner.UNREACHABLE) and not ev.ignored:
            self.progress.update(task, phase=f"[red]failed: {ev.task or ''}"[:40])

    def apply(self, docs: dict[str, str | None]) -> None:
        """Take one reading of every document: update the bars, or print the lines that are due."""
        with self._lock:
            now = self.clock()
            for node, text in docs.items():
                doc = parse(text, self.started)
                if doc is None or (node not in self.tasks and node != CONTROLLER):
                    continue
                self.latest[node] = doc
                step = str(doc.get("step") or "")
                run = str(doc.get("started") or "")  # the kit's and the image's fan-outs are two steps
                meter = self.meters.setdefault((node, step, run), Meter())
                view = view_of(node, doc, meter, now)
                self.views[node] = view
                if self.mode == "bars":
                    self._draw(node, view)
                else:
                    self._say(node, view, now)

    def _fields(self, task: TaskID) -> dict[str, Any]:
        return next(t.fields for t in self.progress.tasks if t.id == task)

    def _draw(self, node: str, view: View) -> None:
        task = self._row(node)
        self.progress.update(
            task, total=view.total, completed=view.done, amount=view.amount(), speed=view.speed(),
            eta=view.remaining(), detail=escape(view.detail[:60]),
        )
        if node == CONTROLLER or self._fields(task).get("phase") == "waiting":
            self.progress.update(task, phase=view.label)
        shown = {str(i["name"]) for i in view.items[:SUB_ROWS]} if not view.finished else set()
        for key in [k for k in self.subrows if k[0] == node and k[1] not in shown]:
            self.progress.remove_task(self.subrows.pop(key))
        for item in view.items[:SUB_ROWS]:
            name = str(item["name"])
            if name not in shown:
                continue
            key = (node, name)
            if key not in self.subrows:
                self.subrows[key] = self.progress.add_task(
                    "", total=None, node="", phase=f"  {escape(name[-32:])}", amount="", speed="", eta="",
                    detail="", order=(self._fields(task)["order"][0], name),
                )
            done, total = _int(item, "done"), _int(item, "total")
            self.progress.update(
                self.subrows[key], completed=done, total=total or None,
                amount=f"{human_bytes(done)} of {human_bytes(total)}" if total else human_bytes(done),
            )

    def _say(self, node: str, view: View, now: float) -> None:
        key = (view.step, view.run, view.finished)
        last = self.said.get(node)
        if last is not None and last[0] == key and (view.finished or now - last[1] < self.line_every):
            return
        self.said[node] = (key, now)
        self.console.print(view.line(), markup=False, highlight=False, soft_wrap=True)

    def _poll(self) -> None:
        assert self.reader is not None
        while not self._stop.wait(self.interval):
            self.polls += 1
            try:
                self.apply(self.reader())
            except Exception:  # a broken poll must never break the run; the next one may work
                continue


@contextlib.contextmanager
def watch(
    cluster: Cluster,
    console: Console,
    fleet: Callable[[Cluster], remote.Fleet] | None = None,
) -> Iterator[StageBars]:
    """Progress of a staging run on ``console``: bars at a terminal, lines elsewhere (the CLI hands
    in stderr's console under --json). Without a way to read the nodes, the bars still follow the
    tasks."""
    reader: Reader | None = None
    close: Callable[[], None] | None = None
    try:
        reader, close = fleet_reader(cluster, fleet, controller_path())
    except Exception:  # no SSH reader (e.g. no keys here): bars show tasks, not bytes
        reader, close = None, None
    mode = "bars" if console.is_terminal else "lines"
    try:
        with StageBars([n.name for n in cluster.nodes], reader, console, mode=mode) as bars:
            yield bars
    finally:
        if close is not None:
            close()
