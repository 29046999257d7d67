"""``diffrec serve``: run the job server."""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
from pathlib import Path

from diffrec import __version__
from diffrec.errors import UserError
from diffrec.server.quotas import DEFAULT_QUOTAS, Quotas

from ._connection import DEFAULT_BIND, add_data_dir, data_dir

NAME = "serve"
HELP = "run the job server (loopback only unless CURVE keys are set up)"


def add_arguments(parser) -> None:
    parser.add_argument("--bind", default=DEFAULT_BIND,
                        help=f"address to listen on (default {DEFAULT_BIND}); any non-loopback "
                             "address requires `diffrec keys init`")
    add_data_dir(parser)
    parser.add_argument("--device", default=None,
                        help="torch device for jobs (default auto: cuda:0 when CUDA is available, "
                             "else mps when available, else cpu)")
    parser.add_argument("--cluster", default=None, metavar="ADDRESS",
                        help="run the jobs on a Ray cluster instead of this machine: "
                             "ray://HEAD:10001, HEAD:6379, auto (the cluster this machine "
                             "belongs to) or local (a Ray started here); every node mounts "
                             "--data-dir at the same path (needs Ray: `pip install -e "
                             "'backend[cluster]'` in a checkout)")
    parser.add_argument("--curve", action="store_true",
                        help="require CURVE encryption and the allow-list on loopback too")
    parser.add_argument("--retention-days", type=float, default=7.0,
                        help="delete finished jobs this many days after they end (default 7)")
    quotas = parser.add_argument_group("quotas per client key, bounds per job")
    for name, kind, what in QUOTA_FLAGS:
        default = getattr(DEFAULT_QUOTAS, name)
        quotas.add_argument(f"--max-{name.replace('_', '-')}", dest=f"max_{name}", type=kind,
                            default=default, metavar=_METAVARS.get(kind, "SIZE"),
                            help=f"{what} (default {default:,}"
                                 f"{' bytes' if kind is byte_size else ''})")


def byte_size(text: str) -> int:
    """``"64G"`` → 68719476736: an integer with an optional K, M, G or T suffix (powers of 1024)."""
    match = re.fullmatch(r"\s*(\d+)\s*([KMGT]?)i?B?\s*", text, re.IGNORECASE)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size such as 500M or 64G")
    return int(match[1]) * 1024 ** " KMGT".index(match[2].upper() or " ")


QUOTA_FLAGS = (
    ("pending_uploads", int, "uploads begun and not finished, at once"),
    ("pending_bytes", byte_size, "declared bytes of those uploads; SIZE takes K, M, G, T "
                                 "suffixes"),
    ("stored_bytes", byte_size, "bytes of uploaded and submitted inputs held"),
    ("queued_jobs", int, "jobs queued or running at once"),
    ("running_jobs", int, "jobs handed to the worker at once, 0: 1 on this machine, no limit "
                          "on a cluster; keys take turns"),
    ("iterations", int, "iterations one job may ask for (per pass)"),
    ("wall_time_s", float, "seconds one job may run before it fails"),
)
"""(Quotas field, flag type, help) for each ``--max-...`` flag."""


_METAVARS = {int: "N", float: "SECONDS"}


def quotas_from_args(args) -> Quotas:
    return Quotas(**{name: getattr(args, f"max_{name}") for name, _, _ in QUOTA_FLAGS})


def _device(name: str | None) -> str:
    """The device string jobs get: ``name`` when torch can use it, else (None or "auto") the
    device "auto" picks (``diffrec.devices``), a GPU as ``cuda:0``."""
    from diffrec.devices import resolve_device

    device = resolve_device(name)
    if name not in (None, "auto"):
        return name
    return "cuda:0" if device.type == "cuda" else str(device)


def _check_ray() -> None:
    try:
        import ray  # noqa: F401
    except ImportError:
        raise UserError("--cluster needs Ray: pip install -e 'backend[cluster]' in a diffrec "
                        "checkout (pip install 'diffrec[cluster]' where diffrec is "
                        "installed as a package)") from None


def run(args) -> int:
    from diffrec.server.app import Server
    from diffrec.server.disk import PRIVATE_UMASK

    if args.cluster is not None:
        _check_ray()
    os.umask(PRIVATE_UMASK)  # its files and its jobs' are no other local user's to read
    server = Server(args.bind, data_dir(args), _device(args.device), curve=args.curve,
                    retention_s=args.retention_days * 86400.0, quotas=quotas_from_args(args),
                    cluster=args.cluster)
    stopping = []
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda number, _: stopping.append(signal.Signals(number).name))
    where = f"Ray cluster {args.cluster}" if args.cluster else f"device {server.device}"
    print(f"diffrec {__version__} serving on {server.endpoint} ({where}, "
          f"data {server.data_dir})", flush=True)
    if server.pairing:
        print(f"pairing string for clients: {server.pairing}", flush=True)
    try:
        server.serve_forever(lambda: bool(stopping))
    finally:
        server.close()
        _say(stopped_sentence(stopping[0] if stopping else None, server.data_dir, args.cluster))
    return 0


def stopped_sentence(signal_name: str | None, data: Path, cluster: str | None) -> str:
    """The last line ``serve`` prints: why it stopped, and what becomes of unfinished jobs (on
    a cluster the operator started they go on running and are re-attached; elsewhere they stop
    and resume from their last checkpoint)."""
    stopped = "diffrec serve stopped" + (f" on {signal_name}" if signal_name else "")
    again = f"when it starts again with --data-dir {data}" + (f" --cluster {cluster}"
                                                             if cluster else "")
    if cluster in (None, "local"):
        return f"{stopped}: unfinished jobs resume {again}"
    return (f"{stopped}: unfinished jobs go on running on the Ray cluster; it re-attaches to "
            f"them {again}")


def _say(line: str) -> None:
    """Print ``line``; when nobody reads our output any more (a closed pipe), drop it."""
    try:
        print(line, flush=True)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
