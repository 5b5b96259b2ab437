"""Lookup of the spark_stage role: a secret environment variable of the controller (the Hugging
Face token), read as sparkctl reads it: from the environment, or, in a run that sparkctl started,
from the in-memory file the runner hands over (``sparkctl.model.secretenv``; the runner keeps
secret variables out of ansible-playbook's recorded environment).

    lookup('sparkctl_secret_env', 'HF_TOKEN')  -> the value, or '' when it is set nowhere
"""

from __future__ import annotations

import sys
from pathlib import Path

from ansible.errors import AnsibleError
from ansible.plugins.lookup import LookupBase

DOCUMENTATION = r"""
name: sparkctl_secret_env
short_description: A secret environment variable of the controller, as sparkctl reads it
description:
  - The variable's value from the environment, or from the in-memory file sparkctl's runner names
    in SPARKCTL_SECRETS_FD; an empty string when it is set nowhere.
options:
  _terms:
    description: The variable's name.
    required: true
"""

RETURN = r"""
_raw:
  description: The value ('' when unset).
"""

# The directory that holds the `sparkctl` package when this Ansible's Python lacks it (a clone).
_REPO = next((p for p in Path(__file__).resolve().parents if (p / "sparkctl" / "__init__.py").is_file()),
             Path(__file__).resolve().parents[3])


def _secretenv():
    try:
        from sparkctl.model import secretenv
    except ImportError:
        sys.path.insert(0, str(_REPO))
        from sparkctl.model import secretenv
    return secretenv


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        if len(terms) != 1:
            raise AnsibleError("sparkctl_secret_env: give one variable name")
        return [_secretenv().get(str(terms[0])) or ""]
