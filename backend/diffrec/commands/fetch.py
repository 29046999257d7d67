"""``diffrec fetch``: download a finished job's results."""

from __future__ import annotations

from pathlib import Path

from diffrec.errors import UserError
from diffrec.protocol import ProtocolError, ServerUnavailable

from ._connection import add_server_arguments, connect

NAME = "fetch"
HELP = "download a finished job's result files (resumable, each verified by its content hash)"


def add_arguments(parser) -> None:
    parser.add_argument("job")
    parser.add_argument("--out", type=Path, default=None, help="directory (default: ./JOB)")
    add_server_arguments(parser)


def run(args) -> int:
    with connect(args) as client:
        try:
            paths = client.fetch(args.job, args.out or Path(args.job))
        except (ProtocolError, ServerUnavailable) as exc:
            raise UserError(str(exc)) from None
    for path in paths:
        print(path)
    return 0
