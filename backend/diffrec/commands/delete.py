"""``diffrec delete``: remove jobs from a server."""

from __future__ import annotations

from ._connection import add_job_arguments, on_each_job

NAME = "delete"
HELP = ("remove jobs from a server with their checkpoints and results (a running one is "
        "stopped first)")


def add_arguments(parser) -> None:
    add_job_arguments(parser)


def delete(client, job: str) -> str:
    client.delete(job)
    return f"{job}  deleted"


def run(args) -> int:
    return on_each_job(args, delete)
