"""A server job's settings are parsed once: at submit, then handed on parsed (to the disk
check, the job's run and its failure message), never read from the spec again."""

from __future__ import annotations

from unittest import mock

from helpers.servers import optimize_inputs, server_in_process

from diffrec.errors import UserError
from diffrec.protocol import Client
from diffrec.protocol import settings as settings_module
from diffrec.protocol.events import Started
from diffrec.server import app, job_process, optimize_runner
from diffrec.server.executor import Executor, conclude, no_room


class InThisProcess(Executor):
    """Runs each ticket at once, in this process (``job_process.execute``, as a cluster's
    actor does), so that a spy here sees every parse of the job's whole life."""

    def __init__(self, report):
        self._report = report

    def enqueue(self, ticket) -> None:
        self._report(ticket.job_id, Started())
        order = job_process.JobOrder(ticket.job_id, ticket.runner, ticket.settings,
                                     job_process.JobOrder.portable(ticket.inputs),
                                     ticket.state_dir, ticket.results_dir, "cpu")
        verdict = no_room(ticket) or job_process.execute(order, lambda event: None,
                                                         mock.Mock(is_set=lambda: False))
        self._report(ticket.job_id, conclude(ticket, verdict, False))

    def dequeue(self, job_id: str) -> bool:
        return False

    def stop(self, job_id: str) -> bool:
        return False

    def recovered(self) -> None:
        pass

    def engine(self) -> dict:
        return {"engine": "this process", "device": "cpu", "gpu_free_bytes": None}

    def close(self) -> None:
        pass


def test_an_optimize_job_parses_its_settings_once(tmp_path, monkeypatch):
    parses, trained = [], []
    parse = settings_module.parse_settings

    def counted(*args, **kwargs):
        parses.append(args)
        return parse(*args, **kwargs)

    def optimize(settings, *args, **kwargs):  # stands in for the training: it ends the job
        trained.append(settings)
        raise UserError("the training stand-in stops here")

    for module in (settings_module, optimize_runner):
        monkeypatch.setattr(module, "parse_settings", counted)
    monkeypatch.setattr("diffrec.pipeline.run.optimize", optimize)
    monkeypatch.setattr(app, "executor_factory", lambda *args: InThisProcess)
    spec = {"task": "optimize", "settings": {"mode": "reconstruct", "preset": "preview",
                                             "iterations": 3, "train_res": 16}}
    with server_in_process(tmp_path / "data") as server, \
            Client(server.endpoint, timeout=2.0, retry_for=30.0) as client:
        client.submit("once", spec, optimize_inputs())
        final = client.wait("once")
    assert final["kind"] == "failed"
    assert "the training stand-in stops here" in final["message"]
    assert len(trained) == 1 and trained[0].size.iterations == 3 and trained[0].size.batch == 2
    assert len(parses) == 1
