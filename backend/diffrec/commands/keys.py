"""``diffrec keys``: CURVE keys for serving beyond loopback, and the client allow-list."""

from __future__ import annotations

import socket

from diffrec.errors import UserError
from diffrec.protocol import ProtocolError, pairing_string, read_keypair, write_keypair

from ._connection import DEFAULT_PORT, add_data_dir, data_dir

NAME = "keys"
HELP = "manage CURVE keys: server key pair, client key pair, allowed client keys"


def add_arguments(parser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    init = actions.add_parser("init", help="create the server key pair; print a pairing string")
    init.add_argument("--force", action="store_true", help="replace an existing key pair")
    init.add_argument("--host", default=None, help="host name clients use, in this pairing "
                                                   "string and `diffrec serve`'s (default: this "
                                                   "host)")
    init.add_argument("--port", type=int, default=DEFAULT_PORT)
    client = actions.add_parser("client", help="create this machine's client key pair")
    client.add_argument("--force", action="store_true", help="replace an existing key pair")
    allow = actions.add_parser("allow", help="allow a client public key (one that starts with "
                                              "'-': put -- before it)")
    allow.add_argument("key", help="the client's public key (Z85, 40 characters)")
    allow.add_argument("--comment", default="", help="who the key belongs to")
    revoke = actions.add_parser("revoke", help="remove a client public key from the allow-list "
                                               "(one that starts with '-': put -- before it)")
    revoke.add_argument("key", help="the client's public key (Z85, 40 characters)")
    show = actions.add_parser("show", help="show the keys and the allow-list")
    for action in (init, client, allow, revoke, show):
        add_data_dir(action)


ABSENT = {
    "server": "this machine serves on loopback only; `diffrec keys init` makes one to serve "
              "beyond it",
    "client": "needed only to reach a server with keys; `diffrec keys client` makes one",
}
"""What ``keys show`` says of each key pair the folder lacks: what it is for, not an order (a
client machine needs no server key pair, a server no client one)."""


def _create(args, name: str) -> str:
    directory = data_dir(args) / "keys"
    try:
        public, _ = write_keypair(directory, name, overwrite=args.force)
    except FileExistsError:
        raise UserError(f"{directory / name}.key_secret exists; --force replaces it (clients "
                        "that pinned the old key must be paired again)") from None
    return public


def run(args) -> int:
    from diffrec.server.security import AllowList, keys_dir, save_pairing_host

    directory = keys_dir(data_dir(args))
    allow_list = AllowList(directory / "authorized_keys")
    if args.action == "init":
        public = _create(args, "server")
        save_pairing_host(data_dir(args), args.host)
        print(f"server public key: {public}")
        host = args.host or socket.gethostname()
        print(f"pairing string: {pairing_string(host, args.port, public)}")
    elif args.action == "client":
        public = _create(args, "client")
        print(f"client public key (give it to the server's owner): {public}")
        print(f"the server's owner allows it with: diffrec keys allow -- '{public}'")
    elif args.action == "allow":
        try:
            allow_list.allow(args.key, args.comment)
        except ProtocolError as exc:
            raise UserError(exc.message) from None
        print(f"allowed {args.key}")
    elif args.action == "revoke":
        if not allow_list.revoke(args.key):
            raise UserError(f"{args.key} was not on the allow-list")
        print(f"revoked {args.key}")
    else:
        for name, missing in ABSENT.items():
            try:
                print(f"{name} public key: {read_keypair(directory, name)[0]}")
            except FileNotFoundError:
                print(f"{name} public key: none ({missing})")
        for key, comment in allow_list.entries().items():
            print(f"allowed: {key} {comment}".rstrip())
    return 0
