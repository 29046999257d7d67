"""``diffrec cancel``: stop jobs on a server."""

from __future__ import annotations

from ._connection import add_job_arguments, on_each_job
from .status import describe

NAME = "cancel"
HELP = ("stop jobs: a queued one at once, a running one once it has written its checkpoint "
        "(`diffrec resume` continues from there); an ended job stays as it is")


def add_arguments(parser) -> None:
    add_job_arguments(parser)


def cancel(client, job: str) -> str:
    """The job's status line after the cancel (said as unchanged for an ended job)."""
    reply = client.cancel(job)
    ended = reply["state"] not in ("cancelled", "cancelling")
    return describe(reply) + ("  (it had ended: nothing changed)" if ended else "")


def run(args) -> int:
    return on_each_job(args, cancel)
