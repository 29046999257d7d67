"""``diffrec resume``: queue cancelled or failed jobs again."""

from __future__ import annotations

from ._connection import add_job_arguments, on_each_job
from .status import describe

NAME = "resume"
HELP = ("queue cancelled or failed jobs again, with the inputs they were submitted with, from "
        "their checkpoints where they kept them")


def add_arguments(parser) -> None:
    add_job_arguments(parser)


def run(args) -> int:
    return on_each_job(args, lambda client, job: describe(client.resume(job)))
