"""Shared by the client commands: where data lives and how to reach a server."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from diffrec.errors import UserError
from diffrec.protocol import Client, ProtocolError, ServerError, ServerUnavailable, read_keypair
from diffrec.protocol.channel import split_address, tcp_failure
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
                        help="where jobs and keys live (default: $DIFFREC_DATA, else "
                             "$XDG_DATA_HOME/diffrec, else ~/.local/share/diffrec)")


def data_dir(args) -> Path:
    return args.data_dir or default_data_dir()


def add_server_arguments(parser) -> None:
    add_data_dir(parser)
    parser.add_argument("--server", default=DEFAULT_BIND,
                        help="tcp://HOST:PORT, or a pairing string diffrec://HOST:PORT?key=… "
                             f"for an encrypted server (default {DEFAULT_BIND})")
    parser.add_argument("--timeout", type=float, default=10.0,
                        help="seconds to wait for an answer before reconnecting")


def check_server(args) -> None:
    """Refuse a --server that is neither ``tcp://HOST:PORT`` nor a well-formed pairing string,
    before anything is loaded or sent."""
    server = args.server
    if server.startswith("diffrec://"):
        try:
            parse_pairing(server)
        except ProtocolError as exc:
            raise UserError(f"--server {server}: {exc.message}, as `diffrec keys init` "
                            "printed it; a server started without keys is reached as "
                            "tcp://HOST:PORT") from None
    elif split_address(server) is None:
        hint = (f"write tcp://{server}" if split_address(f"tcp://{server}")
                else "give tcp://HOST:PORT")
        raise UserError(f"--server {server} is not a server address: {hint}, or the pairing "
                        "string diffrec://HOST:PORT?key=… that `diffrec keys init` printed")


def client_keypair(args) -> tuple[str, str]:
    """This machine's client key pair (DATA/keys/client.key and .key_secret), or a sentence
    saying what to do about them."""
    keys = data_dir(args) / "keys"
    try:
        return read_keypair(keys, "client")
    except FileNotFoundError:
        raise UserError(f"no client key pair in {keys}: run `diffrec keys client`, then have "
                        "the server's owner run `diffrec keys allow -- YOUR_KEY`") from None
    except PermissionError as exc:
        raise UserError(str(exc)) from None
    except ProtocolError:
        raise UserError(f"{keys / 'client.key'} or {keys / 'client.key_secret'} holds no "
                        "CURVE key: run `diffrec keys client --force` for a new pair, then have "
                        "the server's owner allow the new key") from None


def connect(args) -> Client:
    """A client for ``args.server`` that the server answered; a pairing string uses this
    machine's client key pair. A server not reached is said in one sentence: nothing there,
    or a server that does not answer this machine (its key not allowed, a stale pairing
    string, a server with keys reached without one)."""
    check_server(args)
    keys = {}
    address = args.server
    if args.server.startswith("diffrec://"):
        address, server_key = parse_pairing(args.server)
        keys = {"server_key": server_key, "client_keypair": client_keypair(args)}
    if failure := tcp_failure(address, args.timeout):
        raise UserError(f"no diffrec server at {address}: {failure}; start one there "
                        "(`diffrec serve`) or correct --server")
    client = Client(address, timeout=args.timeout, retry_for=args.timeout, **keys)
    try:
        client.ping()
    except ServerUnavailable:
        client.close()
        raise UserError(silent(address, keys.get("client_keypair"))) from None
    client.retry_for = 3 * args.timeout
    return client


def silent(address: str, keypair: tuple[str, str] | None) -> str:
    """Why a server that takes connections at ``address`` did not answer a ping."""
    if keypair:
        return (f"the server at {address} does not answer this machine: ask its owner to "
                f"allow this machine's key (`diffrec keys allow -- '{keypair[0]}'`), and check "
                "that --server is the server's current pairing string")
    return (f"something listens at {address} but does not answer as a diffrec server: a "
            "server with keys is reached with its pairing string diffrec://HOST:PORT?key=… "
            "instead, or correct --server")


def refused(exc: Exception) -> UserError:
    """The UserError for a request the server refused or never answered: its sentence alone
    (a ``ProtocolError``'s ``message``, without the wire code before it)."""
    return UserError(exc.message if isinstance(exc, ProtocolError) else str(exc))


def add_job_arguments(parser) -> None:
    """JOB... and the server arguments: a command that acts on jobs one by one."""
    parser.add_argument("jobs", nargs="+", metavar="JOB", help="job ids (`diffrec status` "
                                                               "lists yours)")
    add_server_arguments(parser)


def on_each_job(args, operation: Callable[[Client, str], str]) -> int:
    """Print the line ``operation(client, job)`` answers for each of ``args.jobs``; the jobs
    the server refuses (an unknown id...) are said together at the end, as one UserError."""
    refusals = []
    with connect(args) as client:
        for job in args.jobs:
            try:
                print(operation(client, job), flush=True)
            except ServerError as exc:
                refusals.append(exc.message)
            except (ProtocolError, ServerUnavailable) as exc:
                raise refused(exc) from None
    if refusals:
        raise UserError("; ".join(refusals))
    return 0
