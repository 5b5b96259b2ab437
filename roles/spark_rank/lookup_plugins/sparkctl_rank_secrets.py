"""Lookup of the spark_rank role: the rank's secrets config with its values, resolved on the controller.

The one way a secret's value is read is the model's (``SecretRef.resolve``: the environment variable
or the file the inventory's ``sparkctl_secrets`` names). This lookup loads the inventory with that
model and renders the file with ``sparkctl.render.rank.rank_secrets_text``, the same function that
renders the ``<secret:NAME>`` markers `plan` shows, so what the role writes and what `status`
hashes are the same bytes. It runs at task time, under ``no_log``: the values never sit in hostvars,
in ``ansible-inventory`` output or in the run's artifacts.

    lookup('sparkctl_rank_secrets', inventory_dir)            -> the file text with the values
    query('sparkctl_rank_secrets', inventory_dir, check=true) -> problems (names and reasons only)
"""

from __future__ import annotations

import sys
from pathlib import Path

from ansible.errors import AnsibleError
from ansible.plugins.lookup import LookupBase

DOCUMENTATION = r"""
name: sparkctl_rank_secrets
short_description: The rank's secrets config with the values resolved on the controller
description:
  - Loads the sparkctl inventory and renders the rank's 0600 secrets config (SGLang --config file)
    with every secret resolved from its reference (environment variable or file).
options:
  _terms:
    description: The sparkctl inventory directory.
    required: true
  check:
    description: Only resolve; return the problems (secret names and reasons, never values).
    type: bool
    default: false
"""

RETURN = r"""
_raw:
  description: The file text, or with check=true the list of problems.
"""

# The directory that holds the `sparkctl` package when this Ansible's Python lacks it (a clone).
_REPO = next((p for p in Path(__file__).resolve().parents if (p / "sparkctl" / "__init__.py").is_file()),
             Path(__file__).resolve().parents[3])


def _sparkctl():
    try:
        from sparkctl.errors import SparkctlError
        from sparkctl.model import load_inventory
        from sparkctl.render import rank
    except ImportError:
        sys.path.insert(0, str(_REPO))
        from sparkctl.errors import SparkctlError
        from sparkctl.model import load_inventory
        from sparkctl.render import rank
    return load_inventory, rank, SparkctlError


def _problem(exc):
    hint = getattr(exc, "hint", None)
    return str(getattr(exc, "message", exc)) + (f" ({hint})" if hint else "")


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        if len(terms) != 1:
            raise AnsibleError("sparkctl_rank_secrets: give the inventory directory, and nothing else")
        load_inventory, rank, error = _sparkctl()
        try:
            cluster = load_inventory(Path(str(terms[0])))
        except error as exc:
            raise AnsibleError(f"sparkctl inventory {terms[0]}: {_problem(exc)}") from None
        values, problems = {}, []
        for name in rank.rank_secret_names(cluster):
            try:
                values[name] = cluster.secrets[name].resolve()
            except error as exc:
                problems.append(f"secret {name} ({cluster.secrets[name].describe()}): {_problem(exc)}")
        if self.get_option("check"):
            return problems
        if problems:
            raise AnsibleError("; ".join(problems))
        return [rank.rank_secrets_text(cluster, values)]
