"""The probe that runs ON a node (standard library only, Python 3.8+): one JSON document of facts.

sparkctl ships this file's source over SSH (``python3 -``) with a parameter block appended, so a
status read costs one connection and one interpreter per node. The GPU is read through NVML
(``pynvml``, or the module the parameters name: the lab's simulated GPU) where it loads, else
through ``nvidia-smi``; the node exporter reads it through the same ``nvml_devices``. It only
reads, except in the ``preflight`` mode, which drops the page cache first so MemAvailable means
what the rank will get (with ``keep_caches_if_running``, not where the rank unit runs: `up` reads
its preflight beside its status snapshot, before it has stopped a serving rank).

The readers it shares with the role modules live beside it (``system``, ``links``, ``rdma``,
``manifests``); ``sparkctl.serve.probe.probe_script`` sends their sources along in the same script.

Every mode reads the rank unit (with systemd's restart count) and memory, and where the parameters
name the rank's container, docker's view of it (running, OOM-killed, restart count, start time).
Modes: ``watch`` (unit + memory, sampled every ~2 s while `up` boots), ``thermals`` (unit, memory
and GPU, sampled during `bench` and `qualify`), ``status`` (adds links, GPU, shards, installed unit
hash), ``preflight`` (adds ports, processes, model files, runtime identity, RoCE GID indexes, GPU
compute apps).
"""

import contextlib
import glob
import hashlib
import hmac
import importlib
import json
import os
import re
import shutil
import socket
import sys
import time

from . import links, manifests, rdma, system

# The rank unit's states in which a rank may be running.
RUNNING_STATES = ("active", "activating", "deactivating", "reloading")
UNIT_PROPS = ("ActiveState", "SubState", "MainPID", "Result", "ExecMainStatus",
              "ActiveEnterTimestampMonotonic", "InvocationID", "NRestarts")


def _digest(path, h):
    """Feed the file at ``path`` into hash object ``h``; its hex digest, or None when unreadable."""
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except OSError:
        return None
    return h.hexdigest()


def _keyed(path, key):
    """HMAC-SHA256 of a file under a key the controller made up for this probe: the digest says
    whether the file is what the controller expects, and nothing to anyone who reads it later (a
    plain digest of a known template plus an API key is a key-guessing oracle)."""
    return _digest(path, hmac.new(bytes.fromhex(key), digestmod=hashlib.sha256))


def _sha256(path):
    return _digest(path, hashlib.sha256())


def unit_state(name):
    rc, out, err = system.run(["systemctl", "show", name] + ["-p" + p for p in UNIT_PROPS])
    if rc != 0:
        return {"error": (err or out).strip()[:200] or "systemctl failed"}
    facts = {}
    for line in out.splitlines():
        key, _, value = line.partition("=")
        facts[key] = value
    up_mono = int(facts.get("ActiveEnterTimestampMonotonic") or 0)
    restarts = facts.get("NRestarts") or "0"
    now_mono = time.clock_gettime(time.CLOCK_MONOTONIC)
    return {
        "active": facts.get("ActiveState", "unknown"),
        "sub": facts.get("SubState", ""),
        "pid": int(facts.get("MainPID") or 0),
        "result": facts.get("Result", ""),
        "exit_status": facts.get("ExecMainStatus", ""),
        "up_s": round(now_mono - up_mono / 1e6, 1) if up_mono else None,
        "invocation": facts.get("InvocationID", ""),
        # Restarts systemd made itself (Restart=); a restart by hand shows as a new invocation.
        "restarts": int(restarts) if restarts.isdigit() else 0,
    }


def container_state(name):
    """The rank's container as docker sees it: running, OOM-killed, restarts, when it (re)started.

    ``restart_count`` is docker's own (its restart policy); a ``docker restart`` or ``docker start``
    shows as ``started_at`` moving, which the controller compares with what it saw at readiness.
    None where docker is not installed."""
    if shutil.which("docker") is None:
        return None
    answer = engine_get("/containers/" + _path_part(name) + "/json")
    if answer is not None:
        code, doc = answer
        if code == 404:
            return {"exists": False}
        if code != 200 or not isinstance(doc, dict):
            return {"error": _engine_error(code, doc)}
        return _container_fields(name, doc.get("State") or {}, str(doc.get("RestartCount", "")),
                                 str(doc.get("Created", "")))
    fmt = "{{json .State}}\t{{.RestartCount}}\t{{.Created}}"
    rc, out, err = system.run(["docker", "container", "inspect", "--format", fmt, name], 10)
    if rc != 0:
        text = (err or out).strip()
        if "No such" in text or "no such" in text:
            return {"exists": False}
        return {"error": text[:200] or f"docker inspect exited {rc}"}
    try:
        state_text, count, created = out.strip().split("\t")
        state = json.loads(state_text)
    except ValueError:
        return {"error": "docker inspect: unreadable answer " + out.strip()[:120]}
    return _container_fields(name, state, count, created)


def _container_fields(name, state, count, created):
    return {
        "exists": True,
        "name": name,
        "status": state.get("Status", ""),
        "running": bool(state.get("Running")),
        "oom_killed": bool(state.get("OOMKilled")),
        "exit_code": state.get("ExitCode"),
        "started_at": state.get("StartedAt", ""),
        "restart_count": int(count) if count.strip().isdigit() else 0,
        "created": created.strip(),
    }


# Docker's engine API on its local socket: what the probe asks docker it asks the engine directly
# (the answers `docker inspect` prints, without starting the CLI: ~35 ms of CPU per call, on every
# node in every sampling round of `up`). Where the engine is not on a local socket (DOCKER_HOST
# names tcp:// or ssh://) or the socket cannot be opened, the probe asks the CLI instead.
ENGINE_SOCKET = "/var/run/docker.sock"


def engine_socket():
    """The engine's unix socket path, or None when docker is reached another way (or not at all)."""
    host = os.environ.get("DOCKER_HOST", "")
    if host.startswith("unix://"):
        return host[len("unix://"):]
    if host:
        return None
    return ENGINE_SOCKET if os.path.exists(ENGINE_SOCKET) else None


def engine_get(path, timeout=10.0):
    """(HTTP status, decoded JSON body or None) of the engine's answer to GET ``path``; None when
    the engine's socket cannot be used (the caller asks the CLI). An engine that took the
    connection and did not answer in time answers status 0: the CLI would wait on it the same."""
    where = engine_socket()
    if where is None:
        return None
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(where)
        except OSError:  # not there, refused, not allowed: the CLI's own message says which
            return None
        try:
            code, body = http_get(sock, path, "docker")
        except socket.timeout:  # noqa: UP041 (TimeoutError is this only from Python 3.10)
            return 0, {"message": f"the docker engine did not answer within {timeout:g} s"}
        except (OSError, ValueError):
            return None
    try:
        return code, json.loads(body.decode("utf-8", "replace")) if body.strip() else None
    except ValueError:
        return code, None


def _engine_error(code, doc):
    message = doc.get("message") if isinstance(doc, dict) else None
    return str(message or f"docker engine answered HTTP {code}")[:200]


def _path_part(text):
    """``text`` percent-encoded for a URL path (image references keep their ``/``, ``:`` and ``@``)."""
    safe = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~/:@"
    return "".join(chr(b) if b in safe else f"%{b:02X}" for b in str(text).encode("utf-8"))


def http_get(sock, path, host):
    """(status, body) of an HTTP/1.0 GET of ``path`` over the connected ``sock``: the server closes
    the connection after its answer, so the body is what follows the headers. ValueError when the
    answer is not HTTP."""
    sock.sendall(f"GET {path} HTTP/1.0\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
    chunks = []
    while True:
        data = sock.recv(65536)
        if not data:
            break
        chunks.append(data)
    raw = b"".join(chunks)
    head, sep, body = raw.partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].split()
    if not sep or len(status) < 2 or not status[0].startswith(b"HTTP/") or not status[1].isdigit():
        raise ValueError("not an HTTP answer")
    return int(status[1]), body


def meminfo():
    out = {}
    for line in (system.read_text("/proc/meminfo", "") or "").splitlines():
        key, _, rest = line.partition(":")
        if key in ("MemTotal", "MemAvailable", "SwapTotal", "SwapFree", "Cached"):
            out[key] = int(rest.split()[0]) * 1024
    return out


# pynvml calls of one GPU's reading: key, function, the constant its second argument names, scale.
NVML_READS = (
    ("temp_c", "nvmlDeviceGetTemperature", "NVML_TEMPERATURE_GPU", 1.0),
    ("sm_mhz", "nvmlDeviceGetClockInfo", "NVML_CLOCK_SM", 1.0),
    ("max_sm_mhz", "nvmlDeviceGetMaxClockInfo", "NVML_CLOCK_SM", 1.0),
    ("power_w", "nvmlDeviceGetPowerUsage", None, 0.001),  # milliwatts
)
SMI_FIELDS = "index,name,temperature.gpu,clocks.sm,clocks.max.sm,power.draw,utilization.gpu"


def load_nvml(module="pynvml", path=None):
    """Import ``module`` (pynvml's interface; ``path`` put first on sys.path) and initialise NVML.

    Returns (module, None), or (None, why) without the module, the driver or a GPU."""
    if path and path not in sys.path:
        sys.path.insert(0, path)
    try:
        lib = importlib.import_module(module)
        lib.nvmlInit()
    except Exception as exc:
        return None, f"{module}: {type(exc).__name__}: {exc}"
    return lib, None


def nvml_devices(lib):
    """Per GPU: index, name, temperature (°C), SM clock and its maximum (MHz), power (W), utilization
    (%). A reading the board does not support is None; the others still come."""
    out = []
    for i in range(lib.nvmlDeviceGetCount()):
        h = lib.nvmlDeviceGetHandleByIndex(i)
        name = lib.nvmlDeviceGetName(h)
        dev: dict = {"index": str(i), "name": name.decode() if isinstance(name, bytes) else str(name)}
        for key, call, arg, scale in NVML_READS:
            try:
                args = (h,) if arg is None else (h, getattr(lib, arg))
                dev[key] = float(getattr(lib, call)(*args)) * scale
            except Exception:  # NVML_ERROR_NOT_SUPPORTED and friends
                dev[key] = None
        try:
            dev["util_pct"] = float(lib.nvmlDeviceGetUtilizationRates(h).gpu)
        except Exception:
            dev["util_pct"] = None
        out.append(dev)
    return out


def gpu_smi():
    """The same readings through ``nvidia-smi`` (where pynvml is not installed for python3)."""
    argv = ["nvidia-smi", "--query-gpu=" + SMI_FIELDS, "--format=csv,noheader,nounits"]
    rc, out, err = system.run(argv, 10)
    if rc != 0:
        return None, (err or out).strip()[:200] or f"nvidia-smi exited {rc}"

    def num(text):
        try:
            return float(text)
        except ValueError:  # [N/A], [Not Supported]
            return None

    devices = []
    for line in out.splitlines():
        v = [x.strip() for x in line.split(",")]
        if len(v) < 7:
            continue
        devices.append({"index": v[0], "name": ", ".join(v[1:len(v) - 5]), "temp_c": num(v[-5]),
                        "sm_mhz": num(v[-4]), "max_sm_mhz": num(v[-3]), "power_w": num(v[-2]),
                        "util_pct": num(v[-1])})
    return devices, None


def gpu(module="pynvml", path=None):
    """The node's GPUs: {"source", "devices": [...]}, through NVML where ``module`` loads, else
    ``nvidia-smi``; {"source", "error"} when the reader failed; None on a node without either."""
    lib, _why = load_nvml(module, path)
    if lib is not None:
        try:
            return {"source": module, "devices": nvml_devices(lib)}
        except Exception as exc:
            return {"source": module, "error": f"{type(exc).__name__}: {exc}"}
        finally:
            with contextlib.suppress(Exception):
                lib.nvmlShutdown()
    if shutil.which("nvidia-smi") is None:
        return None
    devices, err = gpu_smi()
    return {"source": "nvidia-smi", "error": err} if err else {"source": "nvidia-smi", "devices": devices}


def gpu_apps():
    if shutil.which("nvidia-smi") is None:
        return []
    argv = ["nvidia-smi", "--query-compute-apps=pid,process_name", "--format=csv,noheader"]
    rc, out, _ = system.run(argv, 10)
    if rc != 0:
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def gpu_containers():
    if shutil.which("docker") is None:
        return []
    listed = engine_get("/containers/json")
    if listed is not None:
        code, doc = listed
        if code != 200 or not isinstance(doc, list):
            return []
        found = []
        for entry in doc:
            cid = str(entry.get("Id", ""))
            one = engine_get("/containers/" + _path_part(cid) + "/json") if cid else None
            requests = ((one[1] or {}).get("HostConfig") or {}).get("DeviceRequests") if one else None
            if one is not None and one[0] == 200 and requests:
                names = entry.get("Names") or [""]
                found.append(f"{cid[:12]} {str(names[0]).lstrip('/')}")
        return found
    rc, out, _ = system.run(["docker", "ps", "--format", "{{.ID}} {{.Names}}"], 10)
    if rc != 0:
        return []
    found = []
    for line in out.splitlines():
        cid = line.split()[0] if line.split() else ""
        if not cid:
            continue
        argv = ["docker", "inspect", "--format", "{{json .HostConfig.DeviceRequests}}", cid]
        rc2, req, _ = system.run(argv, 10)
        if rc2 == 0 and req.strip() not in ("", "null", "[]"):
            found.append(line.strip())
    return found


def listening_ports():
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in (system.read_text(table, "") or "").splitlines()[1:]:
            parts = line.split()
            if len(parts) > 3 and parts[3] == "0A":  # LISTEN
                ports.add(int(parts[1].rsplit(":", 1)[1], 16))
    return sorted(ports)


def rank_processes(words):
    """PIDs whose command line contains one of ``words`` (an earlier run's rank, still alive)."""
    found = []
    me = os.getpid()
    for d in glob.glob("/proc/[0-9]*"):
        pid = int(d.rsplit("/", 1)[1])
        if pid == me:
            continue
        raw = None
        try:
            with open(d + "/cmdline", "rb") as f:
                raw = f.read()
        except OSError:
            continue
        cmd = raw.replace(b"\0", b" ").decode(errors="replace").strip()
        if cmd and any(w in cmd for w in words) and "node_probe" not in cmd:
            found.append({"pid": pid, "cmd": cmd[:160]})
    return found


def model_files(model_dir):
    cfg = os.path.join(model_dir, "config.json")
    weights = glob.glob(os.path.join(model_dir, "*.safetensors"))
    index = os.path.isfile(os.path.join(model_dir, "model.safetensors.index.json"))
    return {"config": os.path.isfile(cfg), "config_sha256": _sha256(cfg), "safetensors": len(weights),
            "index": index}


def identity(runtime, image, program, venv_path):
    if runtime == "container":
        answer = engine_get("/images/" + _path_part(image or "") + "/json", 15)
        if answer is not None:
            code, doc = answer
            if code == 200 and isinstance(doc, dict) and doc.get("Id"):
                return str(doc["Id"])
            return "missing: " + _engine_error(code, doc)[:160]
        rc, out, err = system.run(["docker", "image", "inspect", "--format", "{{.Id}}", image or ""], 15)
        return out.strip() if rc == 0 else "missing: " + (err.strip().splitlines() or ["no image"])[-1][:160]
    if runtime == "venv":
        pip = os.path.join(venv_path or "", "bin", "pip")
        rc, out, err = system.run([pip, "freeze", "--all"], 30)
        if rc != 0:
            return "missing: " + (err.strip() or "no pip in " + str(venv_path))[:160]
        return "sha256:" + hashlib.sha256(out.encode()).hexdigest()
    exe = shutil.which(program) if program else None
    if exe is None:
        return f"missing: {program} not on PATH"
    real = os.path.realpath(exe)
    h = hashlib.sha256((_sha256(real) or "").encode())
    # A launcher script names the installed version through paths (a `current` symlink, a prefix):
    # their resolved targets are part of the identity.
    text = system.read_text(real, "") or ""
    for token in sorted(set(re.findall(r"/[A-Za-z0-9_./+-]+", text))):
        if os.path.exists(token):
            h.update(os.path.realpath(token).encode())
    digest = h.hexdigest()
    return "sha256:" + str(digest)


def image_env(image):
    """The image's Config.Env as a mapping; None when docker cannot inspect it."""
    answer = engine_get("/images/" + _path_part(image or "") + "/json", 15)
    if answer is not None:
        code, doc = answer
        if code != 200 or not isinstance(doc, dict):
            return None
        items = (doc.get("Config") or {}).get("Env") or []
    else:
        argv = ["docker", "image", "inspect", "--format", "{{json .Config.Env}}", image or ""]
        rc, out, _err = system.run(argv, 15)
        if rc != 0:
            return None
        try:
            items = json.loads(out) or []
        except ValueError:
            return None
    return dict(str(item).split("=", 1) for item in items if "=" in str(item))


def gid_indexes(ports):
    """RoCE v2 GID index of each (hca, netdev, ipv4) port; None when the node has no RDMA device."""
    if not rdma.present():
        return None
    return {hca: rdma.roce_v2_gid_index(hca, netdev, ip)[0] for hca, netdev, ip in ports}


def drop_caches():
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def local_http(port, path="/health"):
    """The HTTP status of GET ``path`` on 127.0.0.1:``port``; None when nothing answers in time."""
    try:
        with socket.create_connection(("127.0.0.1", int(port)), timeout=1.5) as sock:
            return http_get(sock, path, f"127.0.0.1:{port}")[0]
    except (OSError, ValueError):
        return None


MARKER_LINES_KEPT = 8            # the last lines kept per pattern whose records are read
MARKER_LINE_CHARS = 256 * 1024   # a marker record longer than this is cut (the MoE layout is ~12 kB)


def journal_matches(unit, patterns, invocation, records=()):
    """Count the log lines of the unit's current run (its invocation) matching each regular
    expression; for the patterns in ``records`` also the text after the match of the last lines
    (the JSON record a marker carries), in log order."""
    args = ["journalctl", "-o", "cat", "--no-pager", "-q"]
    args += ["_SYSTEMD_INVOCATION_ID=" + invocation] if invocation else ["-u", unit]
    _rc, out, _ = system.run(args, 20)
    return match_lines(out, patterns, records)


def match_lines(text, patterns, records=()):
    """``journal_matches`` on a log's text: (counts, texts) per pattern."""
    counts = {}
    texts = {}
    for pat in patterns:
        rx = re.compile(pat)
        found = []
        for line in text.splitlines():
            m = rx.search(line)
            if m:
                found.append(line[m.end():][:MARKER_LINE_CHARS])
        counts[pat] = len(found)
        if pat in records:
            texts[pat] = found[-MARKER_LINES_KEPT:]
    return counts, texts


def main(p):
    mode = p.get("mode", "status")
    out = {"mode": mode, "host": os.uname()[1], "time": time.time()}
    out["unit"] = unit_state(p["unit"])
    if mode == "preflight":
        # `up` reads its preflight in the same round as its status snapshot: a rank that serves
        # keeps its page cache (its facts are not used: `up` stops it and runs the preflight again).
        serving = p.get("keep_caches_if_running") and out["unit"].get("active") in RUNNING_STATES
        out["caches_dropped"] = False if serving else drop_caches()
    out["mem"] = meminfo()
    if p.get("container"):
        out["container"] = container_state(p["container"])
    if mode == "watch":
        if p.get("health_port"):
            out["health"] = local_http(p["health_port"])
    elif mode == "thermals":
        out["gpu"] = gpu(p.get("nvml_module", "pynvml"), p.get("nvml_path"))
    elif mode == "markers":
        out["markers"], out["marker_lines"] = journal_matches(
            p["unit"], p.get("patterns", []), out["unit"].get("invocation"), p.get("records", []))
    else:
        out["links"] = links.read_links(p.get("netdevs", []))
        out["gpu"] = gpu(p.get("nvml_module", "pynvml"), p.get("nvml_path"))
        out["unit_sha256"] = _sha256(p["unit_file"]) if p.get("unit_file") else None
        out["file_digest"] = {path: _keyed(path, p["hash_key"]) for path in p.get("hash_files", [])}
        if p.get("engram_dir"):
            out["shards"] = manifests.shards_on_disk(p["engram_dir"], p["rank"], p["tp"])
    if mode == "preflight":
        out["ports_listening"] = listening_ports()
        out["rank_processes"] = rank_processes(p.get("process_words", []))
        out["model"] = model_files(p["model_dir"])
        out["identity"] = identity(p.get("runtime"), p.get("image"), p.get("program"), p.get("venv_path"))
        if p.get("image_env"):
            out["image_env"] = image_env(p.get("image"))
        out["gids"] = gid_indexes(p.get("gid_ports", []))
        out["gpu_apps"] = gpu_apps()
        out["gpu_containers"] = gpu_containers()
    print(json.dumps(out))
