"""``diffrec serve``: run the job server."""

from __future__ import annotations

import signal

import torch

from diffrec import __version__
from diffrec.errors import UserError

from ._connection import DEFAULT_BIND, add_data_dir, data_dir

NAME = "serve"
HELP = "run the job server (loopback only unless CURVE keys are set up)"


def add_arguments(parser) -> None:
    parser.add_argument("--bind", default=DEFAULT_BIND,
                        help=f"address to listen on (default {DEFAULT_BIND}); any non-loopback "
                             "address requires `diffrec keys init`")
    add_data_dir(parser)
    parser.add_argument("--device", default=None,
                        help="torch device for jobs (default cuda:0 when CUDA is available, "
                             "else cpu)")
    parser.add_argument("--curve", action="store_true",
                        help="require CURVE encryption and the allow-list on loopback too")
    parser.add_argument("--retention-days", type=float, default=7.0,
                        help="delete finished jobs this many days after they end (default 7)")


def _device(name: str | None) -> str:
    if name is None:
        return "cuda:0" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UserError(f"{name!r} is not a torch device (try cuda:0 or cpu)") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"--device {name}: CUDA is not available on this machine")
    return name


def run(args) -> int:
    from diffrec.server.app import Server

    server = Server(args.bind, data_dir(args), _device(args.device), curve=args.curve,
                    retention_s=args.retention_days * 86400.0)
    stopping = []
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stopping.append(True))
    print(f"diffrec {__version__} serving on {server.endpoint} (device {server.device}, "
          f"data {server.data_dir})", flush=True)
    if server.pairing:
        print(f"pairing string for clients: {server.pairing}", flush=True)
    try:
        server.serve_forever(lambda: bool(stopping))
    finally:
        server.close()
    return 0
