"""``diffrec fetch``: download a finished job's results, or the part of them asked for."""

from __future__ import annotations

import logging
from pathlib import Path

from diffrec.errors import UserError
from diffrec.protocol import ManifestError, ProtocolError, ServerUnavailable
from diffrec.protocol.manifest import ROLES, read_manifest, select

from ._connection import add_server_arguments, connect, refused

NAME = "fetch"
HELP = ("download a finished job's result files (resumable, each checked against the result's "
        "manifest: size and sha256)")

log = logging.getLogger(__name__)


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
            raise refused(exc) from None
        except OSError as exc:
            raise UserError(f"cannot write the result files into {out}: "
                            f"{exc.strerror or exc}") from None
    for path in paths:
        print(path)
    if args.only:
        for role in _roles_without_files(out, args.only):
            log.warning("the result has no %s files, so none came (%s: %s)", role, role,
                        ROLES[role])
    return 0


def _roles_without_files(folder: Path, only: list[str]) -> list[str]:
    """The roles among ``only`` that no file of the result in ``folder`` has (a result made
    without ``export_obj`` has no "obj" files, say)."""
    entries = read_manifest(folder)
    return [word for word in only if word in ROLES and not select(entries, [word])]
