"""Filters of the spark_upgrade role: what one node's update does, decided in one place.

A node that already matches what ``sparkctl_upgrade`` pins is left alone — no install, no command,
no reboot — so a run after a stop resumes where it stopped. It matches when every pinned package
and .deb is installed at its version, its running identity equals every ``expect`` field, and —
for firmware/driver ``commands``, which nothing else can confirm when ``expect`` is empty — the
record this role writes on the node after a completed update (``pins_digest``) names the same pins.

A node that does not match gets the update, then reboots only when the update requires it: the
node asks for it (``/run/reboot-required`` after the update), its running identity differs from
``expect`` (the new driver, kernel or firmware runs only after a reboot), or commands ran that no
``expect`` field confirms. A package update that needs none of these does not reboot the node.

Standard library only (they run inside Ansible on the controller); unit-tested in
tests/unit/test_upgrade_filters.py.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any


def upgrade_installed(results: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """``{package: version}`` of the installed packages, from the looped ``dpkg-query -W -f='${Package}
    ${Version} ${db:Status-Status}'`` results (a package not installed, or not known, is absent)."""
    out: dict[str, str] = {}
    for r in results:
        words = str(r.get("stdout") or "").split()
        if r.get("rc") == 0 and len(words) >= 3 and words[-1] == "installed":
            out[words[0]] = words[1]
    return out


def upgrade_pins_digest(packages: Mapping[str, Any], debs: Iterable[Mapping[str, Any]],
                        commands: Iterable[Iterable[Any]], expect: Mapping[str, Any]) -> str:
    """One digest of what the inventory pins (the .debs by package and version, not by path)."""
    doc = {
        "packages": {str(k): str(v) for k, v in packages.items()},
        "debs": sorted([str(d["package"]), str(d["version"])] for d in debs),
        "commands": [[str(w) for w in argv] for argv in commands],
        "expect": {str(k): str(v) for k, v in expect.items()},
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def upgrade_plan(installed: Mapping[str, str], packages: Mapping[str, Any],
                 debs: Iterable[Mapping[str, Any]], commands: Iterable[Iterable[Any]],
                 expect: Mapping[str, Any], identity: Mapping[str, Any] | None,
                 applied_digest: str | None) -> dict[str, Any]:
    """What this node's update does: ``{"matches", "todo_packages", "todo_debs", "mismatched",
    "run_commands", "expect_fields", "digest", "changes"}``.

    ``identity`` is the node's running identity (None when it was not read: with ``expect`` set,
    every expected field then counts as differing); ``applied_digest`` the pins digest recorded on
    the node by the last completed update (None: none recorded).
    """
    debs = list(debs)
    commands = [list(argv) for argv in commands]
    todo_packages = {str(name): str(version) for name, version in packages.items()
                     if installed.get(str(name)) != str(version)}
    todo_debs = [dict(d) for d in debs if installed.get(str(d["package"])) != str(d["version"])]
    mismatched = {}
    for field, want in expect.items():
        have = (identity or {}).get(field)
        if have is None or str(have) != str(want):
            mismatched[str(field)] = {"running": None if have is None else str(have), "expected": str(want)}
    digest = upgrade_pins_digest(packages, debs, commands, expect)
    unconfirmed = bool(commands) and not expect and applied_digest != digest
    matches = not (todo_packages or todo_debs or mismatched or unconfirmed)
    changes = [f"{name} {installed.get(name, 'not installed')} -> {version}"
               for name, version in todo_packages.items()]
    changes += [f"{d['package']} {installed.get(str(d['package']), 'not installed')} -> {d['version']} (.deb)"
                for d in todo_debs]
    changes += [f"{field} is {m['running'] or 'unknown'}, expected {m['expected']}"
                for field, m in mismatched.items()]
    if unconfirmed:
        changes.append("the commands were not recorded as applied with these pins")
    if not matches:
        changes += ["run " + " ".join(str(w) for w in argv) for argv in commands]
    return {
        "matches": matches,
        "todo_packages": todo_packages,
        "todo_debs": todo_debs,
        "mismatched": mismatched,
        "run_commands": bool(commands) and not matches,
        "expect_fields": sorted(str(f) for f in expect),
        "digest": digest,
        "changes": changes,
    }


def upgrade_reboot(plan: Mapping[str, Any], reboot: bool, flag_after: bool) -> dict[str, Any]:
    """Whether the node reboots after its update, and why (``{"reboot", "why"}``)."""
    if plan["matches"]:
        return {"reboot": False, "why": "the node already matches the pins: nothing was changed"}
    reasons = []
    if flag_after:
        reasons.append("the node asks for a reboot (reboot-required)")
    if plan["mismatched"]:
        reasons.append("its running " + ", ".join(sorted(plan["mismatched"])) + " differ(s) from expect")
    if plan["run_commands"] and not plan["expect_fields"]:
        reasons.append("firmware/driver commands ran and no expect field can confirm them without a reboot")
    if not reasons:
        return {"reboot": False, "why": "the update does not require a reboot"}
    if not reboot:
        return {"reboot": False,
                "why": "a reboot is due (" + "; ".join(reasons) + ") but sparkctl_upgrade.reboot is false"}
    return {"reboot": True, "why": "; ".join(reasons)}


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "sparkctl_upgrade_installed": upgrade_installed,
            "sparkctl_upgrade_plan": upgrade_plan,
            "sparkctl_upgrade_reboot": upgrade_reboot,
        }
