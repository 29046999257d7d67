"""``diffrec submit``: send a job described by a JSON file to a server."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import numpy as np

from diffrec.errors import UserError
from diffrec.protocol import ProtocolError, ServerUnavailable

from ._connection import add_server_arguments, connect
from .status import print_event

NAME = "submit"
HELP = "submit a job: FOLDER/job.json or a CONFIG file naming the spec and .npy inputs"


def add_arguments(parser) -> None:
    parser.add_argument("job_file", metavar="FOLDER|CONFIG", type=Path,
                        help='JSON {"spec": {"task": ...}, "inputs": {"images": "images.npy"}}; '
                             "input paths are relative to the file")
    parser.add_argument("--job", default=None, help="job id (default: a new random id)")
    parser.add_argument("--wait", action="store_true", help="follow the job to its end")
    add_server_arguments(parser)


def load_job(path: Path) -> tuple[dict, dict[str, np.ndarray]]:
    """(spec, {name: array}) from a job file (or ``FOLDER/job.json``)."""
    if path.is_dir():
        path = path / "job.json"
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read the job file {path}: {exc}") from None
    if not isinstance(config, dict) or not isinstance(config.get("spec"), dict):
        raise UserError(f"{path} must be a JSON object with a 'spec' object")
    arrays = {}
    for name, relative in config.get("inputs", {}).items():
        try:
            arrays[name] = np.load(path.parent / relative, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise UserError(f"input {name!r}: cannot load {relative}: {exc}") from None
    return config["spec"], arrays


def run(args) -> int:
    spec, arrays = load_job(args.job_file)
    job_id = args.job or uuid.uuid4().hex
    with connect(args) as client:
        try:
            reply = client.submit(job_id, spec, arrays)
            again = " (already submitted)" if reply["existing"] else ""
            print(f"job {job_id}: {reply['state']}{again}")
            if args.wait:
                final = client.wait(job_id, on_event=print_event)
                return 0 if final["kind"] == "done" else 1
        except (ProtocolError, ServerUnavailable) as exc:
            raise UserError(str(exc)) from None
    return 0
