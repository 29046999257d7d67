"""Who may connect: loopback binds may run in plain text; any other bind needs CURVE with a
server key pair and an allow-list of client keys checked by a ZAP authenticator.

Files under ``DATA/keys``: ``server.key`` / ``server.key_secret`` (0600), ``client.key`` /
``client.key_secret`` (this machine's identity as a client) and ``authorized_keys`` (one Z85
client key per line, then an optional comment; ``#`` starts a comment line), and
``server.host``, the host name ``keys init --host`` chose for pairing strings.
"""

from __future__ import annotations

import ipaddress
import logging
import socket as socketlib
from dataclasses import dataclass
from pathlib import Path

import zmq
from zmq.auth.thread import ThreadAuthenticator

from diffrec.errors import UserError
from diffrec.files import write_atomic
from diffrec.protocol.errors import ProtocolError
from diffrec.protocol.keys import check_key, pairing_string, read_keypair

log = logging.getLogger(__name__)
ZAP_DOMAIN = b"diffrec"
HOST_NAME = "server.host"


def keys_dir(data_dir: Path) -> Path:
    return Path(data_dir) / "keys"


def save_pairing_host(data_dir: Path, host: str | None) -> None:
    """Record ``host`` as the name clients use to reach this server (None: forget it, so
    that pairing strings name the machine as it binds)."""
    path = keys_dir(data_dir) / HOST_NAME
    if host is None:
        path.unlink(missing_ok=True)
    else:
        write_atomic(path, f"{host}\n".encode())


def pairing_host(data_dir: Path) -> str | None:
    """The host name recorded by ``save_pairing_host``, if any."""
    try:
        return (keys_dir(data_dir) / HOST_NAME).read_text().strip() or None
    except FileNotFoundError:
        return None


def bind_host_port(bind: str) -> tuple[str, str]:
    """(host, port) of a ``tcp://HOST:PORT`` address; UserError for anything else."""
    scheme, _, rest = bind.partition("://")
    host, _, port = rest.rpartition(":")
    if scheme != "tcp" or not host or not port:
        raise UserError(f"cannot bind {bind!r}: give an address like tcp://127.0.0.1:5557")
    return host.strip("[]"), port


def is_loopback(bind: str) -> bool:
    host, _ = bind_host_port(bind)
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a wildcard, an interface name or a host name: reachable from outside


class AllowList:
    """The ``authorized_keys`` file; read on every handshake, so changes apply at once."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def entries(self) -> dict[str, str]:
        """{key: comment}."""
        if not self.path.exists():
            return {}
        entries = {}
        for line in self.path.read_text().splitlines():
            key, _, comment = line.strip().partition(" ")
            if key and not key.startswith("#"):
                entries[key] = comment.strip()
        return entries

    def allow(self, key: str, comment: str = "") -> None:
        entries = self.entries() | {check_key(key): comment}
        self._write(entries)

    def revoke(self, key: str) -> bool:
        entries = self.entries()
        found = entries.pop(key, None) is not None
        self._write(entries)
        return found

    def _write(self, entries: dict[str, str]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        text = "".join(f"{key} {comment}".rstrip() + "\n" for key, comment in entries.items())
        write_atomic(self.path, text.encode())

    def callback(self, domain: str, key: bytes) -> bool:
        """The ZAP check (pyzmq passes the client key in Z85)."""
        return key.decode("ascii", "replace") in self.entries()


def refuse_plaintext(bind: str, data_dir: Path) -> UserError:
    return UserError(
        f"refusing to listen on {bind} without encryption: a non-loopback address needs CURVE "
        f"keys. Run `diffrec keys init --data-dir {data_dir}` to create the server key pair, "
        f"`diffrec keys allow --data-dir {data_dir} -- CLIENT_KEY` for each client (a client's key "
        "comes from `diffrec keys client` on its machine, or from the Blender add-on's "
        "preferences), then start the server again. To stay on this machine, bind "
        "tcp://127.0.0.1:PORT."
    )


@dataclass
class Security:
    """The installed authenticator and, with CURVE, the server's public key and the host name
    ``keys init --host`` recorded for clients."""

    authenticator: ThreadAuthenticator
    server_public: str | None
    host: str | None = None

    def pairing(self, endpoint: str) -> str | None:
        """The pairing string for a server at ``endpoint``: the recorded host name, else the
        bound host (this machine's name for a wildcard)."""
        if self.server_public is None:
            return None
        host, port = bind_host_port(endpoint)
        if self.host:
            host = self.host
        elif host in ("0.0.0.0", "::", "*"):
            host = socketlib.gethostname()
        return pairing_string(host, int(port), self.server_public)

    def close(self) -> None:
        self.authenticator.stop()


def secure(context: zmq.Context, socket: zmq.Socket, bind: str, data_dir: Path,
           curve: bool = False) -> Security:
    """Configure ``socket`` (before it binds): CURVE when ``curve`` or ``bind`` is not loopback,
    and in every case a ZAP authenticator; raises UserError when CURVE is needed but not set up."""
    curve = curve or not is_loopback(bind)
    server_public = None
    if curve:
        try:
            server_public, server_secret = read_keypair(keys_dir(data_dir), "server")
        except FileNotFoundError:
            raise refuse_plaintext(bind, data_dir) from None
        except (PermissionError, ValueError) as exc:
            raise UserError(str(exc)) from None
        except ProtocolError as exc:
            raise UserError(f"{exc.message}; run `diffrec keys init --force --data-dir "
                            f"{data_dir}` to make a new server key pair (clients must then "
                            "pair again with the pairing string it prints)") from None
    authenticator = ThreadAuthenticator(context, log=log)
    authenticator.start()
    if curve:
        allow_list = AllowList(keys_dir(data_dir) / "authorized_keys")
        if not allow_list.entries():
            log.warning("no client key is allowed yet: run `diffrec keys allow --data-dir %s "
                        "-- KEY`", data_dir)
        authenticator.configure_curve_callback(ZAP_DOMAIN.decode(), allow_list)
        socket.curve_server = True
        socket.curve_publickey = server_public.encode()
        socket.curve_secretkey = server_secret.encode()
    socket.zap_domain = ZAP_DOMAIN
    return Security(authenticator, server_public, pairing_host(data_dir) if curve else None)
