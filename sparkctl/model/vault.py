"""ansible-vault for the inventory: which password files, the secrets Ansible decrypts with, and
whether a value was kept with vault.

Password files, in order: the one given to ``load_inventory``, ``$ANSIBLE_VAULT_PASSWORD_FILE``
(what ``sparkctl --vault-password-file`` sets) and ``vault_password_file`` of the ansible.cfg
ansible-core finds. A password file may be a script that prints the password, as with
ansible-playbook. The runner hands the same file (its path, never the password) to
ansible-playbook.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ansible import constants as C
from ansible.errors import AnsibleError
from ansible.parsing.dataloader import DataLoader
from ansible.parsing.vault import (
    EncryptedString,
    VaultSecretsContext,
    get_file_vault_secret,
    is_encrypted_file,
)

from sparkctl.errors import InputError

try:  # ansible-core 2.19 data tags; diagnostics only
    from ansible._internal._datatag._tags import Origin, VaultedValue
except ImportError:  # pragma: no cover - other ansible-core releases
    Origin = VaultedValue = None


def vault_password_files(explicit: Path | str | None = None) -> list[Path]:
    """The vault password files to use, absolute, first the one given, without duplicates."""
    wanted: list[Any] = [explicit, os.environ.get("ANSIBLE_VAULT_PASSWORD_FILE")]
    configured = C.DEFAULT_VAULT_PASSWORD_FILE
    wanted += configured if isinstance(configured, list) else [configured]
    out: list[Path] = []
    for item in wanted:
        if not item:
            continue
        path = Path(str(item)).expanduser().absolute()
        if path not in out:
            out.append(path)
    return out


def secrets_from(loader: DataLoader, files: list[Path]) -> list[tuple[str, Any]]:
    secrets: list[tuple[str, Any]] = []
    for path in files:
        if not path.exists():
            raise InputError(
                f"vault password file {path} does not exist",
                hint="give --vault-password-file FILE (or ANSIBLE_VAULT_PASSWORD_FILE) an existing file",
            )
        try:
            secret = get_file_vault_secret(filename=str(path), vault_id="default", loader=loader)
            secret.load()
        except AnsibleError as exc:
            raise InputError(
                f"vault password file {path} cannot be used: {exc.message}",
                hint="the file holds the vault password on its first line (or is a script that prints it)",
            ) from None
        secrets.append(("default", secret))
    return secrets


def use_secrets(loader: DataLoader, secrets: list[tuple[str, Any]]) -> None:
    """Vault secrets for files (this loader) and for ``!vault`` values (Ansible's process context)."""
    loader.set_vault_secrets(secrets)
    current = VaultSecretsContext.current(optional=True)
    if current is None:
        VaultSecretsContext.initialize(_OurSecrets(secrets))
    elif isinstance(current, _OurSecrets):
        current.secrets = secrets
    # else: inside ansible-playbook (the vars plugin or a lookup), whose own context holds the
    # secrets the runner gave it through ANSIBLE_VAULT_PASSWORD_FILE, the same file as ours.


class _OurSecrets(VaultSecretsContext):
    """The process-wide vault context when sparkctl itself started it (replaceable per load)."""



def _file_is_encrypted(value: Any) -> bool:
    tag = Origin.get_tag(value) if Origin is not None else None
    if tag is None or not tag.path:
        return False
    try:
        with open(tag.path, "rb") as fh:
            return bool(is_encrypted_file(fh))
    except OSError:
        return False


def is_vaulted(raw: Any, resolved: Any) -> bool:
    """A value kept with ansible-vault: ``!vault``, from an encrypted file, or templated from one."""
    if isinstance(raw, EncryptedString) or _file_is_encrypted(raw):
        return True
    return VaultedValue is not None and VaultedValue.is_tagged_on(resolved)


