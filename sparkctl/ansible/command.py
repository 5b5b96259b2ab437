"""The runnable ``ansible-playbook`` line of a plan: what `sparkctl ansible-command` prints and what
every run record keeps.

``Plan.argv`` is the short form for a clone (``playbooks/<verb>.yml``, relative to the checkout);
this is the form that runs from anywhere, a wheel installed with pipx included: the
``ansible-playbook`` of sparkctl's own environment (a pipx venv puts only ``sparkctl`` on PATH),
the playbook's absolute path in the installed package, the inventory's absolute path, the same
``ANSIBLE_CONFIG`` and collections path sparkctl's own runs use (``runner.run_environment``), the
vault password *file* when there is one, and the plan's extra variables in a file (``-e @FILE``),
never on the line. Secrets are never on it: a manual run reads them from the variables the
inventory names, listed in :attr:`PlaybookCommand.secret_env` (names only).
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from sparkctl.ansible import content
from sparkctl.ansible.plan import Plan

PLAYBOOK_BIN = "ansible-playbook"
VARS_FILE = "vars.json"  # a run directory's copy of its plan's extra variables


@dataclass(frozen=True)
class PlaybookCommand:
    """An ``ansible-playbook`` invocation: environment settings plus argv."""

    env: dict[str, str]
    argv: list[str]
    playbook: Path            # absolute, also in argv
    vars_file: Path | None = None
    secret_env: tuple[str, ...] = ()

    def line(self) -> str:
        """One shell line: ``K=V … /…/ansible-playbook -i … /…/playbooks/<verb>.yml …``."""
        return shlex.join([f"{k}={v}" for k, v in self.env.items()] + self.argv)

    def as_argv(self) -> list[str]:
        """The same as one argv (through ``env``), for JSON documents and ``subprocess``."""
        return ["env", *(f"{k}={v}" for k, v in self.env.items()), *self.argv]


def playbook_bin() -> str:
    """``ansible-playbook`` beside the interpreter running sparkctl, else the one on PATH."""
    beside = Path(sys.executable).parent / PLAYBOOK_BIN
    return str(beside) if beside.exists() else PLAYBOOK_BIN


def environment() -> dict[str, str]:
    """The settings a manual run needs to behave as sparkctl's own (paths only, never a secret)."""
    env = {
        "ANSIBLE_CONFIG": str(content.ansible_cfg()),
        "ANSIBLE_COLLECTIONS_PATH": os.pathsep.join(str(p) for p in content.collections_paths()),
        # Roles keep controller-side caches (built wheels, switch backups) under the state directory.
        content.STATE_ENV: str(content.state_dir()),
    }
    from sparkctl.model.vault import vault_password_files  # ansible-core's config: only for a run

    files = vault_password_files()
    if files:
        env["ANSIBLE_VAULT_PASSWORD_FILE"] = str(files[0])
    return env


def vars_text(plan: Plan) -> str:
    """The plan's extra variables as the JSON a vars file holds (sorted, so equal plans match)."""
    return json.dumps(plan.extravars, indent=1, sort_keys=True, default=str) + "\n"


def write_vars(plan: Plan, path: Path) -> Path | None:
    """Write the plan's extra variables to ``path`` (0600); None (and nothing written) without any."""
    if not plan.extravars:
        return None
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(vars_text(plan))
    tmp.replace(path)
    return path


def shared_vars_path(plan: Plan) -> Path:
    """Where `sparkctl ansible-command` keeps a plan's vars: ``<state>/commands/<verb>-<digest>.json``
    (named by its content, so printing the same plan twice reuses one file)."""
    digest = hashlib.sha256(vars_text(plan).encode()).hexdigest()[:12]
    return content.state_dir() / "commands" / f"{Path(plan.playbook).stem}-{digest}.json"


def for_plan(plan: Plan, vars_file: Path | None = None, playbooks: Path | None = None) -> PlaybookCommand:
    """The runnable command of ``plan``; ``vars_file`` holds its extra variables (``write_vars``),
    ``playbooks`` is where its playbook is (default: the shipped ``playbooks/``)."""
    if plan.extravars and vars_file is None:
        raise ValueError(f"{plan.playbook}: the plan has extra variables; write them first (write_vars)")
    where = playbooks if playbooks is not None else content.playbook_dir()
    playbook = where.absolute() / plan.playbook
    argv = [playbook_bin(), "-i", str(Path(plan.inventory).absolute()), str(playbook)]
    if vars_file is not None and plan.extravars:
        argv += ["-e", f"@{vars_file.absolute()}"]
    argv += plan.options()
    if plan.verbosity:
        argv.append("-" + "v" * plan.verbosity)
    return PlaybookCommand(environment(), argv, playbook, vars_file, tuple(plan.secret_env))
