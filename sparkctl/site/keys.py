"""The admin's SSH key for `sparkctl bootstrap`: the public half goes to the nodes, the private half
proves the login by key afterwards.

``--key`` names either half: ``id_ed25519.pub`` (its private half beside it, else the SSH agent
holds it) or ``id_ed25519`` (its ``.pub`` beside it, else the public key is read from the private
one). ``generate`` makes an ed25519 pair in OpenSSH's formats, the private file 0600.
"""

from __future__ import annotations

import base64
import binascii
import os
from dataclasses import dataclass
from pathlib import Path

from sparkctl.errors import InputError

DEFAULT_KEY = Path("~/.ssh/id_ed25519")
KEY_TYPES = ("ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521",
             "sk-ssh-ed25519@openssh.com", "sk-ecdsa-sha2-nistp256@openssh.com")


@dataclass(frozen=True)
class AdminKey:
    public: str  # one authorized_keys line: type, base64, comment
    private: Path | None  # None: the SSH agent holds it


def _public_line(text: str, source: Path) -> str:
    parts = text.strip().split()
    if len(parts) < 2 or parts[0] not in KEY_TYPES:
        raise InputError(f"{source} is not an OpenSSH public key (expected 'ssh-ed25519 AAAA… comment')",
                         hint="name the .pub file of the key, or the private key beside it")
    try:
        base64.b64decode(parts[1], validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InputError(f"{source}: the key's base64 does not decode",
                         hint="name an intact key file") from exc
    return " ".join(parts[:3])


def _public_of_private(path: Path) -> str:
    import paramiko

    try:
        key = paramiko.PKey.from_path(path)
    except paramiko.PasswordRequiredException as exc:
        raise InputError(f"{path} is encrypted and has no {path.name}.pub beside it",
                         hint=f"write it: ssh-keygen -y -f {path} > {path}.pub") from exc
    except (paramiko.SSHException, OSError, ValueError) as exc:
        raise InputError(f"{path} is not an SSH private key: {exc}",
                         hint="name the key's .pub or private file") from exc
    return f"{key.get_name()} {key.get_base64()}"


def resolve(given: Path | None) -> AdminKey:
    """The key ``--key`` names (default ~/.ssh/id_ed25519); InputError (exit 2) when there is none."""
    path = (given or DEFAULT_KEY).expanduser()
    if path.suffix == ".pub":
        if not path.is_file():
            raise InputError(f"no public key at {path}",
                             hint="name an existing key with --key, or pass --generate-key")
        private = path.with_suffix("")
        return AdminKey(_public_line(path.read_text(), path), private if private.is_file() else None)
    if not path.is_file():
        raise InputError(
            f"no SSH key at {path}",
            hint=f"name one with --key, or pass --generate-key to make an ed25519 pair at {path}",
        )
    pub = Path(f"{path}.pub")
    line = _public_line(pub.read_text(), pub) if pub.is_file() else _public_of_private(path)
    return AdminKey(line, path)


def generate(given: Path | None, comment: str) -> AdminKey:
    """A new ed25519 pair at ``--key`` (default ~/.ssh/id_ed25519); an existing file is never replaced."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    path = (given or DEFAULT_KEY).expanduser()
    if path.suffix == ".pub":
        path = path.with_suffix("")
    pub = Path(f"{path}.pub")
    for existing in (path, pub):
        if existing.exists():
            raise InputError(f"{existing} exists; --generate-key never replaces a key",
                             hint="use it (drop --generate-key), or name a new file with --key")
    key = Ed25519PrivateKey.generate()
    private_text = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                     serialization.NoEncryption())
    public_text = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                serialization.PublicFormat.OpenSSH)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(private_text)
    line = f"{public_text.decode()} {comment}"
    pub.write_text(line + "\n")
    return AdminKey(line, path)
