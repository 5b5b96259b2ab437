"""The progress document of a long step, written where the step runs (standard library only).

Every long step of staging writes one small JSON document, replaced atomically as it goes: on a
node ``<run_dir>/stage-progress.json`` (the fabric chain, the Hugging Face download, Engram
packing, the image build and save), on the controller ``<state_dir>/stage-progress.json`` (the
kit's git fetch). The controller reads them once a second while the playbook runs
(``sparkctl.stage.progress``) and draws the bars, or prints a line now and then when its output is
not a terminal. One document per place: the step running there now overwrites the one before.

Fields (all optional to a reader but ``updated``):

* ``node``, ``step`` (fanout | download | pack | build | save | fetch), ``state`` (starting |
  checking | receiving | serving | downloading | packing | building | saving | fetching | done |
  failed), ``error``, ``current`` (the file or build step now), ``pid``, ``started``, ``updated``;
* ``bytes_done`` of ``bytes_total`` (0 = unknown), ``bytes_moved`` (over the network this run);
* ``files_done`` of ``files_total``;
* ``count_done`` of ``count_total`` in ``count_unit`` (rows, steps, objects): what the step counts
  besides bytes;
* ``items``: the files in flight, ``[{"name", "done", "total"}]`` in bytes (at most MAX_ITEMS).
"""

import contextlib
import json
import os
import re
import threading
import time

PROGRESS_FILE = "stage-progress.json"
MAX_ITEMS = 8

FIELDS = (
    "node",
    "step",
    "state",
    "bytes_total",
    "bytes_done",
    "bytes_moved",
    "files_total",
    "files_done",
    "count_unit",
    "count_total",
    "count_done",
    "items",
    "current",
    "error",
    "pid",
    "started",
)


class Progress:
    """One step's progress on this machine; ``write`` replaces ``path`` (nothing when it is empty)."""

    def __init__(self, node, step="", bytes_total=0, files_total=0, state="starting", path="",
                 count_unit="", count_total=0):
        self.node = node
        self.step = step
        self.state = state
        self.bytes_total = int(bytes_total)
        self.bytes_done = 0  # bytes present and confirmed, including kept/linked files
        self.bytes_moved = 0  # bytes received over the network in this run
        self.files_total = int(files_total)
        self.files_done = 0
        self.count_unit = count_unit
        self.count_total = int(count_total)
        self.count_done = 0
        self.items = []
        self.current = ""
        self.error = ""
        self.pid = os.getpid()
        self.started = time.time()
        self.path = path
        self._lock = threading.Lock()

    def add(self, done=0, moved=0, count=0):
        with self._lock:
            self.bytes_done += done
            self.bytes_moved += moved
            self.count_done += count

    def set(self, **kw):
        with self._lock:
            for k, v in kw.items():
                setattr(self, k, v)
        self.write()

    def snapshot(self):
        with self._lock:
            d = {k: getattr(self, k) for k in FIELDS}
            d["items"] = [dict(i) for i in self.items[:MAX_ITEMS]]
        d["updated"] = time.time()
        return d

    def write(self):
        if not self.path:
            return
        tmp = self.path + ".tmp"
        with contextlib.suppress(OSError):
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(self.snapshot(), f)
            os.replace(tmp, self.path)


class Ticker(threading.Thread):
    """Calls ``sample`` (when given) and rewrites the document every ``every`` seconds until
    ``stop`` is set; ``tick`` runs after each write (the fabric chain beats its lock there)."""

    def __init__(self, progress, every=0.5, sample=None):
        super().__init__(daemon=True)
        self.progress, self.every, self.sample = progress, every, sample
        self.stop = threading.Event()

    def tick(self):
        """Subclasses' extra work per interval."""

    def run(self):
        while not self.stop.wait(self.every):
            if self.sample is not None:
                with contextlib.suppress(Exception):  # a failed sample must not end the step
                    self.sample()
            self.progress.write()
            self.tick()

    def finish(self):
        """Stop, wait for the last write, and take one more sample and write."""
        self.stop.set()
        if self.is_alive():
            self.join(5)
        if self.sample is not None:
            with contextlib.suppress(Exception):
                self.sample()
        self.progress.write()


# --- producers: what a long step's own output or files say about its progress -----------------


def hub_sampler(progress, model_dir, sizes):
    """A ``Ticker`` sample for huggingface_hub's download into ``model_dir``: bytes and files done,
    and the files in flight.

    ``sizes``: {path in the repo: size the hub records}. A file counts as done once its final name
    has the hub's size; one in flight is huggingface_hub's
    ``<model_dir>/.cache/huggingface/download/<path>.<etag>.incomplete``, which grows as it comes in
    (and which a resumed download starts from).
    """
    download = os.path.join(model_dir, ".cache", "huggingface", "download")

    def sample():
        done = files = 0
        items = []
        listed: dict = {}  # directory -> its entries, read once per sample

        def entries(head):
            if head not in listed:
                listed[head] = []
                with contextlib.suppress(OSError):
                    listed[head] = [(e.name, e) for e in os.scandir(head)]
            return listed[head]

        for rel, size in sizes.items():
            size = int(size or 0)
            try:
                have = os.path.getsize(os.path.join(model_dir, rel))
            except OSError:
                have = -1
            if have == size:
                done += size
                files += 1
                continue
            head, name = os.path.split(os.path.join(download, rel))
            part = 0
            for entry_name, entry in entries(head):
                if entry_name.startswith(name + ".") and entry_name.endswith(".incomplete"):
                    with contextlib.suppress(OSError):
                        part = max(part, entry.stat().st_size)
            if part:
                done += min(part, size) if size else part
                items.append({"name": rel, "done": part, "total": size})
        items.sort(key=lambda i: i["total"] - i["done"])
        with progress._lock:
            progress.bytes_done, progress.files_done = done, files
            progress.items = items[:MAX_ITEMS]
            progress.current = items[0]["name"] if items else ""

    return sample


# BuildKit's plain output: "#7 [2/5] RUN …", "#9 [builder 3/7] COPY …"; the classic builder's
# "Step 2/5 : RUN …".
_BUILDKIT_STEP = re.compile(r"^#\d+ \[(?:[^\]]* )?(\d+)/(\d+)\] (.*)$")
_CLASSIC_STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)$")


def build_step(line):
    """``(step, steps, instruction)`` when ``line`` of ``docker build``'s output starts a build step."""
    line = line.strip()
    m = _BUILDKIT_STEP.match(line) or _CLASSIC_STEP.match(line)
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), m.group(3).strip()


# git's --progress lines on stderr: "Receiving objects:  45% (450/1000), 1.20 MiB | 2.00 MiB/s",
# "remote: Counting objects: 100% (88/88), done.", "Resolving deltas:  10% (5/50)".
_GIT_PHASE = re.compile(
    r"^(?:remote: )?([A-Z][a-z]+(?: [a-z]+)*):\s+\d+% \((\d+)/(\d+)\)(?:, ([\d.]+) ([KMGT]?i?B))?"
)
_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
          "KB": 1000, "MB": 10**6, "GB": 10**9, "TB": 10**12}


def human_bytes(n, short=False):
    """Bytes in binary units: ``1.50 GiB`` (two decimals), or with ``short`` in two or three figures
    (``0 B``, ``27 MiB``, ``1.2 GiB``) where a table has little room."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            break
        n /= 1024
    if unit == "B":
        return f"{n:.0f} B"
    if short:
        return f"{n:.0f} {unit}" if abs(n) >= 10 else f"{n:.1f} {unit}"
    return f"{n:.2f} {unit}"


def gib(n):
    """Bytes in GiB with two decimals, whatever their size: the unit of every free-space message."""
    return f"{n / (1 << 30):.2f} GiB"


def git_phase(line):
    """``(phase, done, total, bytes or None)`` from one line of ``git fetch --progress``."""
    m = _GIT_PHASE.match(line.strip())
    if not m:
        return None
    received = None
    if m.group(4):
        received = int(float(m.group(4)) * _UNITS.get(m.group(5), 1))
    return m.group(1), int(m.group(2)), int(m.group(3)), received


def progress_lines(stream, on_line, keep=None):
    """Read ``stream`` (binary) to its end, calling ``on_line`` with each line, where a carriage
    return ends a line too (git and docker redraw theirs with one); ``keep``, a list, gets every
    line for the caller's error message."""
    pending = b""
    while True:
        chunk = stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536)
        if not chunk:
            break
        pending += chunk
        parts = re.split(rb"[\r\n]", pending)
        pending = parts.pop()
        for raw in parts:
            text = raw.decode("utf-8", "replace")
            if keep is not None and text.strip():
                keep.append(text)
                del keep[:-200]
            on_line(text)
    if pending:
        text = pending.decode("utf-8", "replace")
        if keep is not None and text.strip():
            keep.append(text)
        on_line(text)


def follow_lines(proc, stream, on_line, timeout: float) -> tuple[bool, list[str]]:
    """Read ``stream`` (a pipe of ``proc``) with ``progress_lines`` until it ends, killing ``proc``
    if it runs past ``timeout`` seconds, then wait for it: (whether it was killed for the time,
    the output's last lines)."""
    kept: list[str] = []
    timed_out = threading.Event()

    def stop():
        timed_out.set()
        proc.kill()

    timer = threading.Timer(timeout, stop)
    timer.daemon = True
    timer.start()
    try:
        progress_lines(stream, on_line, kept)
    finally:
        timer.cancel()
        proc.wait()
    return timed_out.is_set(), kept
