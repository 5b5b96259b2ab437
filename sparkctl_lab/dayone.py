"""Day one on the lab: the `sparkctl bootstrap` and `sparkctl init` command lines that turn the lab's
four management addresses and root password into a site (issue #36's path on real Sparks).

`make demo` (scripts/demo.sh, through ``python -m sparkctl_lab.dayone``) and the lab test
tests/integration/test_day_one_lab.py run exactly these lines:

1. ``bootstrap``: logs in as root with the password in the lab's password file (named by path, the
   password itself is never in an argument), trusts only the host keys the lab recorded (its
   known_hosts, the keys got "out of band") and pins them into the site's known_hosts, makes the
   operator user with a key generated for the run and passwordless sudo;
2. ``init``: logs in as that operator with that key, reads the node keys bootstrap pinned and the
   switch's from the lab's known_hosts, and writes a site whose nodes, fabric, switch cabling,
   profile and runtime are the lab inventory's. What no node can tell (the lab's runtime, kit,
   checkpoint, timings, interpreter) comes from the lab inventory as a ``--from`` file.

Only the lab's tests and demo import this module; the product never does.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sparkctl_lab import inventory as lab_inventory
from sparkctl_lab import state
from sparkctl_lab import topology as topo

OPERATOR = "sparkctl"  # the product's default operator (bootstrap --operator, init --user)
LOGIN = "root"  # the account a fresh lab node answers with a password
# What the lab's inventory carries that no node can tell, handed to init as its --from file.
FROM_LAB = ("sparkctl_runtime", "sparkctl_kit", "sparkctl_checkpoint", "sparkctl_supervisor",
            "sparkctl_ports", "sparkctl_profile_overrides", "sparkctl_autostart")
KEY_FILE = "id_ed25519"
DEFAULTS_FILE = "lab-defaults.yml"
COMMANDS = ("bootstrap", "init")


def lab_defaults(inventory_dir: Path) -> dict[str, Any]:
    """The --from document: the lab inventory's own values of ``FROM_LAB`` and its interpreter."""
    group_vars = yaml.safe_load((inventory_dir / lab_inventory.GROUP_VARS_FILE).read_text()) or {}
    hosts = yaml.safe_load((inventory_dir / lab_inventory.HOSTS_FILE).read_text())["all"]
    out = {k: group_vars[k] for k in FROM_LAB if k in group_vars}
    out["ansible_python_interpreter"] = hosts["vars"]["ansible_python_interpreter"]
    return out


@dataclass(frozen=True)
class DayOne:
    """Where one day-one run keeps its files. ``inventory`` is the lab's (read, never written)."""

    inventory: Path
    site: Path
    workdir: Path  # the operator's key pair and the --from file
    password_file: Path = field(default_factory=state.root_password_file)
    operator: str = OPERATOR

    @property
    def key(self) -> Path:
        return self.workdir / KEY_FILE

    @property
    def defaults_file(self) -> Path:
        return self.workdir / DEFAULTS_FILE

    @property
    def switch_key(self) -> Path:
        """The lab controller's key: the one the lab's switch container takes for root."""
        return state.controller_key()

    @property
    def lab_known_hosts(self) -> Path:
        return self.inventory / lab_inventory.KNOWN_HOSTS_FILE

    @property
    def site_known_hosts(self) -> Path:
        """Where bootstrap pins the nodes' keys; init's default for SITE_DIR, so it reads them there."""
        return self.site / lab_inventory.KNOWN_HOSTS_FILE

    @property
    def api_key_file(self) -> Path:
        """The API key file the lab inventory names: the site's key is the lab's, by reference."""
        group_vars = yaml.safe_load((self.inventory / lab_inventory.GROUP_VARS_FILE).read_text())
        return Path(group_vars["sparkctl_secrets"]["api_key"]["file"])

    @property
    def addresses(self) -> list[str]:
        return [str(topo.mgmt_ip(n)) for n in topo.node_names()]

    def prepare(self) -> None:
        """The directories both commands write into, and the --from file (from the lab inventory)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.site.mkdir(parents=True, exist_ok=True)  # bootstrap's known_hosts goes there
        self.defaults_file.write_text(yaml.safe_dump(lab_defaults(self.inventory), sort_keys=False))

    def bootstrap(self) -> list[str]:
        """`sparkctl bootstrap …` (without the program name). The key pair is generated unless a
        run before this one made it already (bootstrap never replaces a key)."""
        return [
            "bootstrap", *self.addresses, "--login", LOGIN, "--password-file", str(self.password_file),
            "--operator", self.operator, "--key", str(self.key),
            *(() if self.key.exists() else ("--generate-key",)),
            "--known-hosts", str(self.site_known_hosts), "--host-keys", str(self.lab_known_hosts), "--yes",
        ]

    def init(self) -> list[str]:
        """`sparkctl init SITE --yes …` (without the program name), as the operator bootstrap made."""
        switch = topo.SWITCH_NAME
        return [
            "init", str(self.site),
            *(a for address in self.addresses for a in ("--node", address)),
            "--user", self.operator, "--key", str(self.key), "--host-keys", str(self.lab_known_hosts),
            "--switch", str(topo.mgmt_ip(switch)), "--switch-kind", "linux", "--switch-name", switch,
            # The lab's switch is a Linux container bootstrap does not touch: root, the lab's key.
            "--switch-user", "root", "--switch-key", str(self.switch_key),
            *(a for n in topo.node_names() for a in (
                "--switch-port", f"{n}=" + ",".join(topo.switch_port(n, h) for h in topo.HALVES))),
            *(a for h in topo.HALVES for a in ("--fabric", f"{h.netdev}={h.hca}")),
            *(a for h in topo.HALVES for a in ("--fabric-subnet", str(h.subnet))),
            "--profile", "lab", "--cluster-name", topo.CLUSTER_NAME,
            "--api-key-file", str(self.api_key_file), "--from", str(self.defaults_file), "--yes",
        ]

    def command(self, name: str) -> list[str]:
        if name not in COMMANDS:
            raise ValueError(f"unknown day-one command {name!r} (one of: {', '.join(COMMANDS)})")
        return self.bootstrap() if name == "bootstrap" else self.init()


def site_commands(day: DayOne) -> list[list[str]]:
    """Prepare ``day``'s files and return its two command lines, in the order they run."""
    day.prepare()
    return [day.command(name) for name in COMMANDS]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sparkctl_lab.dayone --site DIR --workdir DIR bootstrap|init``: the arguments of
    that sparkctl command, each ended by a NUL (a shell reads them with ``mapfile -d ''``)."""
    parser = argparse.ArgumentParser(prog="python -m sparkctl_lab.dayone",
                                     description="The arguments of one day-one sparkctl command line.")
    parser.add_argument("--inventory", type=Path, default=Path(f"inventory/{topo.CLUSTER_NAME}"),
                        help="the lab's inventory (default: %(default)s)")
    parser.add_argument("--site", type=Path, required=True, help="the site bootstrap and init write")
    parser.add_argument("--workdir", type=Path, required=True,
                        help="for the operator's key and the --from file")
    parser.add_argument("--operator", default=OPERATOR, help="the operator user (default: %(default)s)")
    parser.add_argument("command", choices=COMMANDS)
    args = parser.parse_args(argv)
    for path in (args.inventory / lab_inventory.HOSTS_FILE, args.inventory / lab_inventory.GROUP_VARS_FILE,
                 args.inventory / lab_inventory.KNOWN_HOSTS_FILE, state.root_password_file()):
        if not path.is_file():
            print(f"day one: {path} is missing; run `sparkctl lab up` first", file=sys.stderr)
            return 2
    day = DayOne(inventory=args.inventory.absolute(), site=args.site.absolute(),
                 workdir=args.workdir.absolute(), operator=args.operator)
    day.prepare()
    sys.stdout.write("".join(f"{a}\0" for a in day.command(args.command)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
