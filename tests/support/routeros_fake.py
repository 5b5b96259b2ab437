"""A stand-in RouterOS switch for the spark_switch role's revert and bridge-port logic.

It executes only the commands the role and the rendered fabric script send that matter to the
revert: `/system backup save|load`, `/system scheduler add|remove`, the revert probe (`:put` of the
entry count), `/import` of the fabric script (its `/interface bridge port` lines: the move out of
another bridge and the add), and a clock that fires scheduler entries one interval after they were
added (as RouterOS does: not at creation). Management is cut when the port that carries it leaves
the management bridge; a login then fails, like network_cli's.

Semantics taken from RouterOS 7 documentation (Scheduler, Backup) and third-party measurements
noted in roles/spark_switch/defaults/main.yml; this is no emulator of the RouterOS language.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any


class LoginRefused(Exception):
    """The controller cannot log in (management cut)."""


def _unquote(text: str) -> str:
    """A RouterOS string literal's value (the inverse of render.switch._ros)."""
    if len(text) >= 2 and text[0] == text[-1] == '"':
        text = text[1:-1]
    return re.sub(r"\\(.)", r"\1", text)


_STR = r'"(?:[^"\\]|\\.)*"'


@dataclass
class FakeRouterOS:
    mgmt_port: str = "ether1"
    mgmt_bridge: str = "bridge"
    # bridge ports as RouterOS lists them: interface -> bridge (one entry per interface)
    bridge_ports: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    scheduler: dict[str, dict[str, Any]] = field(default_factory=dict)
    backups: dict[str, dict[str, Any]] = field(default_factory=dict)
    now: float = 0.0
    reboots: int = 0
    log: list[str] = field(default_factory=list)
    sessions: int = 0
    _session_open: bool = False

    # --- state -------------------------------------------------------------------------------
    def _config(self) -> dict[str, Any]:
        return {"bridge_ports": dict(self.bridge_ports), "scheduler": copy.deepcopy(self.scheduler)}

    def _restore(self, config: dict[str, Any]) -> None:
        self.bridge_ports = dict(config["bridge_ports"])
        self.scheduler = copy.deepcopy(config["scheduler"])
        self.reboots += 1
        self._session_open = False  # a reboot drops every session

    def management_works(self) -> bool:
        return self.bridge_ports.get(self.mgmt_port) == self.mgmt_bridge

    # --- sessions ------------------------------------------------------------------------------
    def reset_connection(self) -> None:
        self._session_open = False

    def _session(self) -> None:
        if self._session_open:
            return  # an open session survives a change that cuts new logins (until it is dropped)
        if not self.management_works():
            raise LoginRefused(f"no route to the switch (its management port {self.mgmt_port} left "
                               f"{self.mgmt_bridge})")
        self._session_open = True
        self.sessions += 1

    # --- time ------------------------------------------------------------------------------------
    def advance(self, seconds: float) -> None:
        """Let time pass: scheduler entries fire one interval after they were added, then every interval."""
        end = self.now + seconds
        while True:
            due = [(e["next"], name) for name, e in self.scheduler.items() if e["next"] <= end]
            if not due:
                break
            at, name = min(due)
            self.now = at
            entry = self.scheduler[name]
            entry["next"] = at + entry["interval"]
            self._script(entry["on_event"])
        self.now = end

    # --- commands ------------------------------------------------------------------------------
    def run(self, command: str) -> str:
        """Run one CLI command over the current session (logging in first if none is open)."""
        self._session()
        return self._script(command)

    def _script(self, command: str) -> str:
        out = []
        for part in _split(command):
            out.append(self._one(part.strip()))
        return "\n".join(o for o in out if o)

    def _one(self, cmd: str) -> str:
        if not cmd:
            return ""
        if m := re.fullmatch(r"/system backup save name=(\S+) dont-encrypt=yes", cmd):
            self.backups[m.group(1) + ".backup"] = self._config()
            return "Configuration backup saved"
        if cmd == "/interface bridge port print terse without-paging":
            return "\n".join(f" {i}   interface={port} bridge={bridge} hw=yes"
                             for i, (port, bridge) in enumerate(self.bridge_ports.items()))
        if cmd == "/export terse show-sensitive=no":
            return "\n".join(f"/interface bridge port add bridge={b} interface={p}"
                             for p, b in self.bridge_ports.items())
        if m := re.fullmatch(r':put \[/file get \[find name="([^"]+)"\] contents\]', cmd):
            if m.group(1) not in self.files:
                return "no such item"
            return self.files[m.group(1)]
        if m := re.fullmatch(r'/file remove \[find name~"\^([^"]+)"\]', cmd):
            for name in [n for n in self.backups if n.startswith(m.group(1))]:
                del self.backups[name]
            return ""
        if cmd == "/system resource print":
            return "uptime: 1m\nversion: 7.23.1 (stable)"
        if re.fullmatch(r"/export terse file=\S+", cmd):
            return ""
        if m := re.fullmatch(rf"/system backup load name=({_STR}|\S+) password=(?:\"\"|\S*)", cmd):
            name = _unquote(m.group(1))
            if name not in self.backups:
                return f"failure: no such file {name}"
            self._restore(self.backups[name])
            return "System configuration restored, rebooting now"
        if m := re.fullmatch(rf":log \w+ ({_STR})", cmd):
            self.log.append(_unquote(m.group(1)))
            return ""
        if m := re.fullmatch(rf"/system scheduler add name=({_STR}) interval=(\d+)s "
                             rf"comment=({_STR}) on-event=({_STR})", cmd):
            name = _unquote(m.group(1))
            if name in self.scheduler:
                return "failure: item with such name already exists"
            interval = int(m.group(2))
            self.scheduler[name] = {"interval": interval, "next": self.now + interval,
                                    "on_event": _unquote(m.group(4))}
            return ""
        if m := re.fullmatch(rf"/system scheduler remove \[find where name=({_STR})\]", cmd):
            self.scheduler.pop(_unquote(m.group(1)), None)
            return ""
        if m := re.fullmatch(
                rf":put \(({_STR}) \. \[:len \[/system scheduler find where name=({_STR})\]\]\)", cmd):
            return f"{_unquote(m.group(1))}{1 if _unquote(m.group(2)) in self.scheduler else 0}"
        if m := re.fullmatch(r"/import file-name=(\S+) verbose=yes", cmd):
            return self._import(self.files[m.group(1)])
        raise AssertionError(f"the fake RouterOS does not know: {cmd}")

    def _import(self, script: str) -> str:
        out, menu = [], ""
        for line in script.splitlines():
            stripped = line.strip()
            if not stripped or stripped.startswith("#"):
                continue
            if stripped.startswith("/"):
                menu = stripped
                continue
            if menu != "/interface bridge port":
                continue  # ethernet, QoS ...: nothing the revert or the bridge move depends on
            if m := re.fullmatch(
                    rf':foreach p in=\[find where interface=({_STR}) and bridge!=(\S+)\] do=\{{ '
                    rf':put \(({_STR}) \. \[get \$p bridge\]\); remove \$p \}}', stripped):
                port, keep = _unquote(m.group(1)), m.group(2)
                if port in self.bridge_ports and self.bridge_ports[port] != keep:
                    out.append(_unquote(m.group(3)) + self.bridge_ports.pop(port))
                continue
            if m := re.fullmatch(
                    rf':if \(\[:len \[find interface=({_STR}) bridge=(\S+)\]\] = 0\) do=\{{ '
                    rf'add bridge=(\S+) interface=({_STR}) hw=yes \}}', stripped):
                port, bridge = _unquote(m.group(1)), m.group(2)
                if self.bridge_ports.get(port) != bridge:
                    if port in self.bridge_ports:  # RouterOS: one bridge per interface
                        out.append(f"failure: device already added as bridge port ({port})")
                        continue
                    self.bridge_ports[port] = m.group(3)
                continue
            if stripped.startswith(("set ", ":if")):
                continue
            raise AssertionError(f"the fake RouterOS cannot import: {stripped}")
        out.append("Script file loaded and executed successfully")
        return "\n".join(out)


def _split(command: str) -> list[str]:
    """Split a command line on `;` outside quotes and braces."""
    parts, depth, quoted, cur, i = [], 0, False, "", 0
    while i < len(command):
        ch = command[i]
        if quoted and ch == "\\" and i + 1 < len(command):
            cur += command[i:i + 2]
            i += 2
            continue
        if ch == '"':
            quoted = not quoted
        elif not quoted and ch in "{[(":
            depth += 1
        elif not quoted and ch in "}])":
            depth -= 1
        if ch == ";" and not quoted and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
        i += 1
    parts.append(cur)
    return parts
