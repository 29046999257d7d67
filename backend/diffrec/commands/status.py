"""``diffrec status``: jobs on a server, or one job."""

from __future__ import annotations

from diffrec.protocol import Message, ProtocolError, ServerUnavailable, events
from diffrec.protocol.liveness import SAID

from ._connection import add_server_arguments, connect, refused

NAME = "status"
HELP = "show your jobs on a server, or one job"


def add_arguments(parser) -> None:
    parser.add_argument("job", nargs="?", help="a job id (default: list all your jobs)")
    add_server_arguments(parser)


def describe(job: dict, id_width: int = 0, task_width: int = 0) -> str:
    """One line: id, state, task, then progress or message; the id and the task padded to
    ``id_width`` and ``task_width`` characters (a list's columns line up)."""
    line = f"{job['job']:<{id_width}}  {job['state']:<9}  {job['task']:<{task_width}}"
    progress = job.get("progress")
    if progress and job["state"] == "running":
        line += "  " + events.describe(events.Progress.from_fields(progress))
    if job.get("message"):
        line += f"  {job['message']}"
    return line.rstrip()


def print_event(message: Message) -> None:
    """A followed job's event (``Client.wait``'s ``on_event``) as ``events.describe`` says
    it; previews are not printed."""
    if not isinstance(message.event, events.Preview):
        print(events.describe(message.event), flush=True)


def print_link(change: str) -> None:
    """A change of the server's liveness while following a job (``Client.wait``'s
    ``on_link``): "the server stopped: following again when it is back" and its sequels."""
    print(SAID[change], flush=True)


def run(args) -> int:
    with connect(args) as client:
        try:
            jobs = [client.status(args.job)] if args.job else client.list_jobs()
        except (ProtocolError, ServerUnavailable) as exc:
            raise refused(exc) from None
    if not jobs:
        print(f"no jobs of yours on {args.server} (diffrec submit sends one)")
        return 0
    id_width, task_width = (max(len(job[key]) for job in jobs) for key in ("job", "task"))
    for job in jobs:
        print(describe(job, id_width, task_width))
    return 0
