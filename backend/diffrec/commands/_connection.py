"""Shared by the client commands: where data lives and how to reach a server."""

from __future__ import annotations

import os
from pathlib import Path

from diffrec.errors import UserError
from diffrec.protocol import Client, ProtocolError, read_keypair
from diffrec.protocol.keys import parse_pairing

DEFAULT_PORT = 5557
DEFAULT_BIND = f"tcp://127.0.0.1:{DEFAULT_PORT}"


def default_data_dir() -> Path:
    """$DIFFREC_DATA, else $XDG_DATA_HOME/diffrec, else ~/.local/share/diffrec."""
    if os.environ.get("DIFFREC_DATA"):
        return Path(os.environ["DIFFREC_DATA"])
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "diffrec"


def add_data_dir(parser) -> None:
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="where jobs and keys live (default: $DIFFREC_DATA or "
                             "~/.local/share/diffrec)")


def data_dir(args) -> Path:
    return args.data_dir or default_data_dir()


def add_server_arguments(parser) -> None:
    add_data_dir(parser)
    parser.add_argument("--server", default=DEFAULT_BIND,
                        help="tcp://HOST:PORT, or a pairing string diffrec://HOST:PORT?key=… "
                             f"for an encrypted server (default {DEFAULT_BIND})")
    parser.add_argument("--timeout", type=float, default=10.0,
                        help="seconds to wait for an answer before reconnecting")


def connect(args) -> Client:
    """A client for ``args.server``; a pairing string uses this machine's client key pair."""
    if not args.server.startswith("diffrec://"):
        return Client(args.server, timeout=args.timeout, retry_for=3 * args.timeout)
    try:
        parse_pairing(args.server)  # the string first: its mistake before the keys'
    except ProtocolError as exc:
        raise UserError(f"--server {args.server}: {exc.message}, as `diffrec keys init` "
                        "printed it; a server started without keys is reached as "
                        "tcp://HOST:PORT") from None
    keys = data_dir(args) / "keys"
    try:
        keypair = read_keypair(keys, "client")
    except FileNotFoundError:
        raise UserError(f"no client key pair in {keys}: run `diffrec keys client`, then have "
                        "the server's owner run `diffrec keys allow -- YOUR_KEY`") from None
    try:
        return Client.from_pairing(args.server, keypair, timeout=args.timeout,
                                   retry_for=3 * args.timeout)
    except ProtocolError as exc:
        raise UserError(exc.message) from None
