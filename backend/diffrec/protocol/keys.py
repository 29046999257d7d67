"""CURVE key files and pairing strings, shared by the server, the CLI client and the add-on.

A key file holds one Z85 key (40 characters). ``NAME.key`` is the public key, ``NAME.key_secret``
the secret key, created with mode 0600. A pairing string ``diffrec://HOST:PORT?key=HEX`` carries
what a client needs to reach a server and pin its public key (hex, so it survives URLs).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from urllib.parse import urlsplit

import zmq
from zmq.utils import z85

from .errors import ProtocolError


def generate_keypair() -> tuple[str, str]:
    """A new CURVE key pair (public, secret), Z85 text."""
    public, secret = zmq.curve_keypair()
    return public.decode("ascii"), secret.decode("ascii")


def check_key(key: str) -> str:
    """``key`` if it is a Z85 CURVE key (40 characters decoding to 32 bytes)."""
    try:
        if len(key) == 40 and len(z85.decode(key)) == 32:
            return key
    except (ValueError, KeyError, TypeError):
        pass
    raise ProtocolError("bad_key", f"{key!r} is not a CURVE key (40 Z85 characters)")


def write_keypair(directory: Path, name: str, overwrite: bool = False) -> tuple[str, str]:
    """Create ``directory/name.key`` and ``name.key_secret`` (0600) in ``directory`` (its
    user's alone: 0700); returns (public, secret)."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    public, secret = generate_keypair()
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if overwrite else os.O_EXCL)
    fd = os.open(directory / f"{name}.key_secret", flags, 0o600)
    with os.fdopen(fd, "w") as stream:
        stream.write(secret + "\n")
    os.chmod(directory / f"{name}.key_secret", 0o600)
    (directory / f"{name}.key").write_text(public + "\n")
    return public, secret


def read_keypair(directory: Path, name: str) -> tuple[str, str]:
    """(public, secret) from the key files; refuses a secret file others can read, and
    raises ProtocolError('bad_key') naming a file that holds no key."""
    secret_path = directory / f"{name}.key_secret"
    if not secret_path.exists():
        raise FileNotFoundError(secret_path)
    if os.name == "posix" and stat.S_IMODE(secret_path.stat().st_mode) & 0o077:
        raise PermissionError(f"{secret_path} is readable by others; run chmod 600 on it")
    return read_key(directory / f"{name}.key"), read_key(secret_path)


def read_key(path: Path) -> str:
    """The key the file ``path`` holds; ProtocolError('bad_key') naming it if it holds none."""
    try:
        return check_key(path.read_bytes().decode("ascii", "replace").strip())
    except ProtocolError:
        raise ProtocolError("bad_key", f"{path} is damaged: it does not hold a CURVE key (40 "
                                       "Z85 characters)") from None


def pairing_string(host: str, port: int, server_public: str) -> str:
    """``diffrec://HOST:PORT?key=HEX`` (IPv6 hosts in brackets)."""
    host = f"[{host}]" if ":" in host and not host.startswith("[") else host
    raw = z85.decode(check_key(server_public))
    return f"diffrec://{host}:{port}?key={raw.hex()}"


def parse_pairing(text: str) -> tuple[str, str]:
    """(ZeroMQ address ``tcp://HOST:PORT``, server public key in Z85) from a pairing string."""
    parts = urlsplit(text.strip())
    try:
        port = parts.port
        raw = bytes.fromhex(parts.query.removeprefix("key="))
    except ValueError:
        port, raw = None, b""
    if parts.scheme != "diffrec" or not parts.hostname or not port or len(raw) != 32:
        raise ProtocolError("bad_pairing", "a pairing string looks like diffrec://HOST:PORT?key=HEX")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"tcp://{host}:{port}", z85.encode(raw).decode("ascii")
