"""``diffrec fetch``: download a finished job's results, or the part of them asked for."""

from __future__ import annotations

from pathlib import Path

from diffrec.errors import UserError
from diffrec.protocol import ManifestError, ProtocolError, ServerUnavailable
from diffrec.protocol.manifest import ROLES

from ._connection import add_server_arguments, connect

NAME = "fetch"
HELP = ("download a finished job's result files (resumable, each checked against the result's "
        "manifest: size and sha256)")


def add_arguments(parser) -> None:
    parser.add_argument("job")
    parser.add_argument("--out", type=Path, default=None, help="directory (default: ./JOB)")
    parser.add_argument("--only", nargs="+", metavar="NAME_OR_ROLE", default=None,
                        help="fetch only these files (e.g. mesh.glb probe.hdr) or roles "
                             f"({', '.join(ROLES)}); manifest.json always comes too "
                             "(default: every file)")
    add_server_arguments(parser)


def run(args) -> int:
    out = args.out or Path(args.job)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file: give a folder (new or existing) for the "
                        "result files")
    with connect(args) as client:
        try:
            paths = client.fetch(args.job, out, only=args.only)
        except (ManifestError, ProtocolError, ServerUnavailable) as exc:
            raise UserError(str(exc)) from None
        except OSError as exc:
            raise UserError(f"cannot write the result files into {out}: "
                            f"{exc.strerror or exc}") from None
    for path in paths:
        print(path)
    return 0
