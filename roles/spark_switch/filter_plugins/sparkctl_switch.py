"""Filters of the spark_switch role: read what a switch answered, pick backups to prune, show a diff,
and write the RouterOS commands that arm, probe and disarm the on-switch revert.

Standard library only (they run inside Ansible on the controller); unit-tested with transcripts of
device answers in tests/fixtures/switch/.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

# RouterOS reports a failing command with one of these (any line, any position). `/import
# verbose=yes` runs the script line by line and carries on after a failure, so the only safe
# reading is: one such line anywhere means the import did not do what the script says.
ROUTEROS_ERROR_PATTERNS = (
    r"\bfailure:",
    r"\berror\b",
    r"\bexpected (end of command|command name|closing brace|variable name)\b",
    r"\bsyntax error\b",
    r"\bbad command name\b",
    r"\bno such item\b",
    r"\bno such command( or directory)?\b",
    r"\binvalid (value|argument|internal item number)\b",
    r"\binput does not match any value\b",
    r"\bambiguous value\b",
    r"\bvalue of \S+ (out of range|must be)\b",
    r"\bnot enough permissions\b",
    r"\bcould not\b",
    r"\bcan ?not\b",
    r"\bunknown parameter\b",
    r"\b(missing|unexpected) (value|argument)",
    r"\(line \d+ column \d+\)",
    r"\binterrupted\b",
)
_ROUTEROS_ERROR = re.compile("|".join(ROUTEROS_ERROR_PATTERNS), re.IGNORECASE)
_ROUTEROS_OK = "Script file loaded and executed successfully"
# `/import verbose=yes` echoes each script line as it runs it; a comment echo is not an answer.
_ECHO = re.compile(r"^\s*(#|/|:|add |set |remove )")


def _lines(output: object) -> list[str]:
    if isinstance(output, list | tuple):
        return [line for item in output for line in _lines(item)]
    return str(output or "").replace("\r\n", "\n").replace("\r", "\n").split("\n")


def routeros_import_errors(output: object) -> list[str]:
    """Every line of an `/import` answer that reports a failure ([] when the import went through).

    An answer that neither reports an error nor says the script ran (an empty answer, a cut
    session) counts as a failure too: silence is not success.
    """
    errors: list[str] = []
    seen_ok = False
    last_command = ""
    for raw in _lines(output):
        line = raw.strip()
        if not line:
            continue
        if _ROUTEROS_OK.lower() in line.lower():
            seen_ok = True
            continue
        if _ECHO.match(line):  # an echoed script line: its text (a comment=...) is not an answer
            last_command = line
            continue
        if _ROUTEROS_ERROR.search(line):
            errors.append(f"{line}  [after: {last_command}]" if last_command else line)
    if not errors and not seen_ok:
        errors.append("the switch did not confirm the import (no 'Script file loaded and executed "
                      "successfully' in its answer)")
    return errors


def routeros_backups(listing: object, prefix: str = "sparkctl-backup-") -> list[str]:
    """Backup base names (no extension) found in a `/file print terse` answer, oldest first."""
    names: set[str] = set()
    for line in _lines(listing):
        m = re.search(r"\bname=(?:\"([^\"]+)\"|(\S+))", line)
        if not m:
            continue
        name = (m.group(1) or m.group(2)).rsplit("/", 1)[-1]
        if name.startswith(prefix):
            names.add(re.sub(r"\.(backup|rsc)$", "", name))
    return sorted(names)  # the names carry a UTC timestamp: sorted = oldest first


def backups_to_prune(names: Iterable[str], keep: int) -> list[str]:
    """The oldest backups beyond the newest ``keep`` (sorted names, oldest first)."""
    ordered = sorted(set(names))
    keep = max(int(keep), 1)
    return ordered[:-keep] if len(ordered) > keep else []


def config_lines(text: object) -> list[str]:
    """Configuration lines without comments, blank lines or RouterOS export headers."""
    return [line.rstrip() for line in _lines(text) if line.strip() and not line.lstrip().startswith("#")]


def unified_diff(before: object, after: object, before_name: str = "running",
                 after_name: str = "candidate") -> str:
    """A unified diff of two configurations (comments ignored); '' when they are the same."""
    return "".join(
        f"{line}\n" if not line.endswith("\n") else line
        for line in difflib.unified_diff(config_lines(before), config_lines(after),
                                         before_name, after_name, lineterm="")
    )


def nvue_revisions(history: object) -> list[str]:
    """Applied revision ids in `nv config history` output, most recent first."""
    found: list[str] = []
    for line in _lines(history):
        m = re.match(r"\s*-?\s*rev_id\s*:\s*(\S+)", line)
        if m and m.group(1) not in found:
            found.append(m.group(1).strip("'\","))
    return found


def nvue_last_applied(history: object) -> str | None:
    """The revision applied now (the most recent in `nv config history`), or None."""
    revisions = nvue_revisions(history)
    return revisions[0] if revisions else None


# --- RouterOS: the dead-man revert -------------------------------------------------------------
# The revert is a `/system scheduler` entry added right after this run's backup is saved: unless a
# NEW login removes it, it fires `interval` seconds later and loads that backup (`/system backup
# load`: the switch reboots into the configuration it had before the run). A scheduler entry with an
# interval first fires one interval after it is added, not when it is added, and `/system backup
# load` run from a scheduler has no prompt to answer. The entry is added after the backup, so the
# restored configuration does not hold it: the revert fires once. Should the load itself fail, the
# entry fires again every interval (and logs each attempt) until someone removes it.
# The rendered fabric script is not the place for it: a script imported by hand must never arm a
# revert to a backup it knows nothing of. These commands are built here because they depend on
# this run (the backup's timestamped name, the role's timeout), not on the inventory.
REVERT_MARK = "sparkctl-revert armed="


def _ros(text: str) -> str:
    """A RouterOS string literal (the same quoting as sparkctl.render.switch)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'


def _seconds(value: object) -> int:
    seconds = int(str(value))
    if seconds < 30:
        raise ValueError(f"a revert after {seconds} s would fire before the import and the new login "
                         "are done (spark_switch_revert_seconds must be 30 or more)")
    return seconds


def routeros_revert_arm(backup: str, seconds: object, name: str = "sparkctl-revert") -> str:
    """The command that arms the revert: load ``backup``.backup ``seconds`` from now unless removed."""
    if not backup or any(ch in backup for ch in "\"\\$\n\r;"):
        raise ValueError(f"backup name {backup!r} is not a plain file name")
    event = (f":log warning {_ros(f'sparkctl: no new login confirmed the change; loading {backup}.backup')}; "
             f"/system backup load name={_ros(backup + '.backup')} password=\"\"")
    return (f"/system scheduler add name={_ros(name)} interval={_seconds(seconds)}s "
            f"comment={_ros('sparkctl: dead-man revert to ' + backup + ' (removed once a new login works)')} "
            f"on-event={_ros(event)}")


def routeros_revert_probe(name: str = "sparkctl-revert") -> str:
    """A command whose answer says how many revert entries wait (read with routeros_revert_armed)."""
    return f":put ({_ros(REVERT_MARK)} . [:len [/system scheduler find where name={_ros(name)}]])"


def routeros_revert_disarm(name: str = "sparkctl-revert") -> str:
    """The command that removes the revert (a no-op when none is armed)."""
    return f"/system scheduler remove [find where name={_ros(name)}]"


def routeros_revert_armed(answer: object) -> int:
    """How many revert entries a routeros_revert_probe answer counted; -1 when it has no count."""
    for line in _lines(answer):
        m = re.search(re.escape(REVERT_MARK) + r"(\d+)", line)
        if m and not _ECHO.match(line.strip()):
            return int(m.group(1))
    return -1


def routeros_moved_ports(output: object, mark: str = "sparkctl: moving ") -> list[str]:
    """The ports the fabric script took out of another bridge, as it said so during `/import`."""
    return [line.strip()[len(mark):] for line in _lines(output)
            if line.strip().startswith(mark)]


_MOVE = re.compile(r':foreach p in=\[find where interface=("(?:[^"\\]|\\.)*"|\S+) and bridge!=(\S+)\]')
_VALUE = r'("(?:[^"\\]|\\.)*"|\S+)'


def _unquote(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return re.sub(r"\\(.)", r"\1", text[1:-1])
    return text


def routeros_foreign_bridge_ports(listing: object, script: object) -> list[str]:
    """Fabric ports that a `/interface bridge port print terse` answer shows in another bridge than
    the fabric's, as "<port> (in <bridge>)": the ports the rendered ``script`` will move. The ports
    and the fabric bridge are read from the script's own move lines (rendered once, in
    sparkctl.render.switch), not named a second time here."""
    moves = {_unquote(m.group(1)): m.group(2) for m in _MOVE.finditer("\n".join(_lines(script)))}
    found = []
    for line in _lines(listing):
        port = re.search(r"\binterface=" + _VALUE, line)
        bridge = re.search(r"\bbridge=" + _VALUE, line)
        if not port or not bridge:
            continue
        name, holder = _unquote(port.group(1)), _unquote(bridge.group(1))
        if name in moves and holder != moves[name]:
            found.append(f"{name} (in {holder})")
    return found


class FilterModule:
    def filters(self) -> dict[str, object]:
        return {
            "sparkctl_routeros_import_errors": routeros_import_errors,
            "sparkctl_routeros_backups": routeros_backups,
            "sparkctl_backups_to_prune": backups_to_prune,
            "sparkctl_unified_diff": unified_diff,
            "sparkctl_nvue_last_applied": nvue_last_applied,
            "sparkctl_nvue_revisions": nvue_revisions,
            "sparkctl_routeros_revert_arm": routeros_revert_arm,
            "sparkctl_routeros_revert_probe": routeros_revert_probe,
            "sparkctl_routeros_revert_disarm": routeros_revert_disarm,
            "sparkctl_routeros_revert_armed": routeros_revert_armed,
            "sparkctl_routeros_moved_ports": routeros_moved_ports,
            "sparkctl_routeros_foreign_bridge_ports": routeros_foreign_bridge_ports,
        }
