"""Secret environment variables, read where they are: the controller's environment, or (inside a
playbook that sparkctl runs) the in-memory file the runner hands over instead.

ansible-runner records the whole environment of ansible-playbook in the run directory. So the
runner takes the secret variables out of that environment and writes the values to an anonymous
in-memory file (``memfd``) that only exists while sparkctl runs; ``SPARKCTL_SECRETS_FD`` names it
(``/proc/<pid>/fd/<n>``). Nothing secret reaches the disk, even when the run is killed.

Which variables are secret is the explicit list the inventory declares (its ``{env: VAR}`` secret
references, the Hugging Face token variable the stage role reads: ``ansible.plan``), never a guess
from a name: a vault password script reading ``$VAULT_PASS``, ``ANSIBLE_BECOME_PASS`` or a git
token must still find its variable in the playbook's environment.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Iterator

SECRETS_FD_ENV = "SPARKCTL_SECRETS_FD"


def get(name: str) -> str | None:
    """The value of secret environment variable ``name`` (None when it is set nowhere)."""
    value = os.environ.get(name)
    if value:
        return value
    path = os.environ.get(SECRETS_FD_ENV)
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        return None
    found = doc.get(name) if isinstance(doc, dict) else None
    return str(found) if found else None


def secret_names(declared: Iterable[str] = ()) -> list[str]:
    """The ``declared`` secret variables that are set in this environment."""
    wanted = set(declared)
    return sorted(n for n in os.environ if n in wanted)


@contextlib.contextmanager
def withheld(declared: Iterable[str] = ()) -> Iterator[dict[str, str]]:
    """While inside: the ``declared`` secret variables are out of ``os.environ`` (so nothing spawned
    now records them) and in a memfd; yields the variables to add to the child's environment (the
    fd's path). Every other variable stays where it is."""
    names = secret_names(declared)
    saved = {n: os.environ.pop(n) for n in names}
    fd = -1
    try:
        child: dict[str, str] = {}
        if saved:
            fd = os.memfd_create("sparkctl-secrets", 0)
            os.write(fd, json.dumps(saved).encode())
            child[SECRETS_FD_ENV] = f"/proc/{os.getpid()}/fd/{fd}"
        yield child
    finally:
        if fd >= 0:
            os.close(fd)
        os.environ.update(saved)
