"""Where the backend is and how to reach it, without bpy: endpoint parsing, the loopback
rule for ``bpy.app.online_access``, the client key pair on disk, starting a local backend."""

from __future__ import annotations

import ipaddress
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from .wire import protocol

LOCAL_ADDRESS = "tcp://127.0.0.1:5557"
KEY_NAME = "client"


@dataclass(frozen=True)
class Endpoint:
    """A ZeroMQ address and, for a paired server, its pinned CURVE public key (Z85)."""

    address: str
    server_key: str | None = None

    @property
    def host(self) -> str:
        return urlsplit(self.address).hostname or ""

    @property
    def is_loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


def endpoint(text: str) -> Endpoint:
    """An Endpoint from the preferences' text: a pairing string ``diffrec://HOST:PORT?key=HEX``,
    or a plain ``tcp://HOST:PORT`` address (loopback servers need no keys), or "" for local."""
    text = text.strip()
    if not text:
        return Endpoint(LOCAL_ADDRESS)
    if text.startswith("diffrec://"):
        return Endpoint(*protocol().parse_pairing(text))
    if not text.startswith("tcp://") or not urlsplit(text).port:
        raise ValueError(f"{text!r} is neither a pairing string nor tcp://HOST:PORT")
    return Endpoint(text)


def check_online_access(target: Endpoint, online_access: bool) -> None:
    """Refuse a non-loopback endpoint when Blender is set to work offline."""
    if not target.is_loopback and not online_access:
        raise PermissionError(
            f"Blender is set to work offline, so diffrec will not connect to {target.host}: "
            "allow online access in Preferences > System > Network, or use a local backend."
        )


def client_keypair(directory: Path) -> tuple[str, str]:
    """The add-on's CURVE key pair in ``directory``, created on first use."""
    try:
        return protocol().read_keypair(directory, KEY_NAME)
    except FileNotFoundError:
        return protocol().write_keypair(directory, KEY_NAME)


def start_local_backend(python: str, address: str, data_dir: Path) -> subprocess.Popen:
    """Start ``python -m diffrec serve`` on the loopback ``address``; the caller owns it."""
    data_dir.mkdir(parents=True, exist_ok=True)
    log = open(data_dir / "serve.log", "ab")
    return subprocess.Popen(
        [python, "-m", "diffrec", "serve", "--bind", address, "--data-dir", str(data_dir)],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
