"""A job's events are typed objects at every hop (issue 53.1): what a runner emits in the job's
process comes through the pipe and the worker's report to the job table, then to the
transport, as the union of ``diffrec.protocol.events``, never a tuple or a dict, and the
client's channel hands on the same events, equal to those emitted."""

from __future__ import annotations

import time
from unittest import mock

import numpy as np
from helpers.servers import fit_spec, server_in_process, target_images

from diffrec.protocol import Client, events
from diffrec.protocol.events import Finished, Log, Outcome, Preview, Progress, Started
from diffrec.server import app, job_table
from diffrec.server.texture_fit import TextureFitRunner

RENDER = np.linspace(0.0, 1.0, 4 * 4 * 3, dtype=np.float32).reshape(4, 4, 3)
EMITTED = [Progress("fit", 1, 2, {"mse": 0.5}, 3.0, 0.1, 0.2, 0.2),
           Preview("fit", 1, images={"render": RENDER, "target": RENDER[::-1].copy()}),
           Log("halfway", stage="baking")]


class ScriptedRunner(TextureFitRunner):
    """Emits ``EMITTED`` once a client had time to attach, and ends done."""

    task = "scripted"

    def run(self, ctx) -> None:
        time.sleep(1.0)
        for event in EMITTED:
            ctx.emit(event)


def test_every_hop_carries_the_typed_events(tmp_path):
    reported, sent = [], []
    apply_report, send = job_table.JobTable._apply_report, app.Server._event

    def spy_report(table, job_id, event):
        reported.append(event)
        return apply_report(table, job_id, event)

    def spy_send(server, job_id, event, peers=None):
        sent.append(event)
        return send(server, job_id, event, peers)

    with (mock.patch.object(job_table.JobTable, "_apply_report", spy_report),
          mock.patch.object(app.Server, "_event", spy_send),
          server_in_process(tmp_path / "data", [ScriptedRunner()]) as server,
          Client(server.endpoint, timeout=2.0, retry_for=30.0) as client):
        client.submit("typed", fit_spec(task="scripted", iterations=2),
                      {"images": target_images()})
        received = []
        final = client.wait("typed", on_event=received.append)
    assert isinstance(final.event, Finished) and final.event.outcome is Outcome.DONE
    # the executor's reports (the pipe's objects, as the worker got them) and the transport's
    for hop in (reported, sent):
        assert all(isinstance(event, events.Event) for event in hop), hop
    assert [type(event) for event in reported] == [Started, Progress, Preview, Log, Finished]
    assert reported[1:4] == EMITTED and sent[:3] == EMITTED
    assert np.array_equal(reported[2].images["render"], RENDER)  # the images with their event
    # the client reads back what the runner emitted, live or replayed on attach
    typed = [message.event for message in received]
    assert all(isinstance(event, events.Event) for event in typed)
    assert {type(event) for event in typed} == {Progress, Preview, Log, Finished}
    assert [event for event in typed if not isinstance(event, Finished)][-3:] == EMITTED
    preview = next(event for event in typed if isinstance(event, Preview))
    assert np.array_equal(preview.images["target"], RENDER[::-1])
