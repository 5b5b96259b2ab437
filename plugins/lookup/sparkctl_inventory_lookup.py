"""The roles' secret lookups, one plugin for all: spark_rank's ``sparkctl_rank_secrets`` (the rank's
secrets config with its values) and spark_router's ``sparkctl_router_key`` (the site's API key).

Each role's ``lookup_plugins/`` links to this file under the name its tasks call; the name the
lookup was called by picks the answer in ``sparkctl.ansible.lookups`` (``RESOLVERS``). The one way a
secret's value is read is the model's (``SecretRef.resolve``: the environment variable, the file or
the vaulted variable the inventory's ``sparkctl_secrets`` names). It runs at task time, under
``no_log``: the values never sit in hostvars, in ``ansible-inventory`` output or in the run's
artifacts.

    lookup('sparkctl_rank_secrets', inventory_dir)           -> the file text with the values
    lookup('sparkctl_router_key', inventory_dir)             -> the key (one line, no newline)
    query(NAME, inventory_dir, check=true)                   -> problems (names and reasons only)
"""

from __future__ import annotations

import sys
from pathlib import Path

from ansible.errors import AnsibleError
from ansible.plugins.lookup import LookupBase

DOCUMENTATION = r"""
name: sparkctl_inventory_lookup
short_description: A role's secrets, resolved on the controller from the sparkctl inventory
description:
  - Loads the sparkctl inventory and answers what the lookup's name asks for, every secret resolved
    from its reference - sparkctl_rank_secrets renders the rank's 0600 secrets config (SGLang --config
    file), sparkctl_router_key gives sparkctl_secrets.api_key.
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
  description: The value, or with check=true the list of problems.
"""

# The directory that holds the `sparkctl` package when this Ansible's Python lacks it (a clone).
_REPO = next((p for p in Path(__file__).resolve().parents if (p / "sparkctl" / "__init__.py").is_file()),
             Path(__file__).resolve().parents[2])


def _lookups():
    try:
        from sparkctl.ansible import lookups
    except ImportError:
        sys.path.insert(0, str(_REPO))
        from sparkctl.ansible import lookups
    return lookups


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        lookups = _lookups()
        name = self._load_name.split(".")[-1]
        if name not in lookups.RESOLVERS:
            raise AnsibleError(f"{name}: not one of sparkctl's lookups ({', '.join(lookups.RESOLVERS)})")
        try:
            return lookups.answer(name, terms, self.get_option("check"), lookups.RESOLVERS[name])
        except lookups.Refused as exc:
            raise AnsibleError(str(exc)) from None
