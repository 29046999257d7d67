"""A followed job through its server's outages, without bpy (addon/core/job_session.py) and with
a scripted client: each change of the server's liveness becomes a 'link' update and the follow
goes on (the client never gives up); a job a restarted server lost ends as 'lost'; a Cancel
while the server is down ends the follow at once instead of waiting for the server; a server
down when the session attaches is waited for the same way; a detached session stops following
without cancelling."""

import importlib
from types import SimpleNamespace

from addon.core import job_session
from addon.core.wire import protocol

WIRE = protocol()
CHANNEL = importlib.import_module(f"{WIRE.__name__}.channel")


def _event(kind: str, **fields):
    """An event message as the client's channel hands it on: its typed event read."""
    return CHANNEL.typed(WIRE.Message("event", {"job": "j", "kind": kind, **fields}))


def _said(update) -> tuple:
    """(kind, link change): a session's ``Update`` or a job's typed event alike."""
    change = update.fields.get("change") if isinstance(update, job_session.Update) else None
    return update.kind, change


class ScriptedClient:
    """A client whose ``events`` calls play ``slices`` in turn: each a list of link changes
    (str, left on ``liveness`` as ``Liveness.change`` leaves them), events (Message) or an
    exception to raise. ``session``: the server's, None before it answered."""

    def __init__(self, slices, stopped=False, session="s"):
        self.slices = list(slices)
        self.liveness = SimpleNamespace(stopped=stopped, session=session)
        self.cancelled, self.give_up, self.attached = [], [], []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def attach(self, job):
        if self.liveness.session is None:  # as a real client, after its retry time
            raise WIRE.ServerUnavailable("no answer")
        self.attached.append(job)
        return {"job": job, "state": "running"}

    def cancel(self, job):
        self.cancelled.append(job)

    def fetch(self, job, directory, only=None):
        return []

    def events(self, idle_timeout, give_up, on_link):
        self.give_up.append(give_up)
        for item in self.slices.pop(0):
            if isinstance(item, Exception):
                raise item
            if isinstance(item, str):
                self.liveness.stopped = item == "stopped"
                self.liveness.session = self.liveness.session if self.liveness.stopped else "s"
                on_link(item)
            else:
                yield item


def _updates(client, cancel=False, detach=False) -> list:
    session = job_session.JobSession(lambda: client, "j", "/nonexistent")
    if cancel:
        session.cancel()
    if detach:
        session.detach()
    session.run()  # here, not on a thread: the updates are all queued when it returns
    updates = []
    while not session.updates.empty():
        updates.append(session.updates.get())
    return updates


def test_a_stop_and_a_restart_are_posted_and_the_job_followed_to_its_end():
    progress = _event("progress", **{"pass": "pass1", "iteration": 5, "iterations": 10,
                                     "losses": {"total": 0.1}})
    client = ScriptedClient([["stopped"], [], ["restarted", progress, _event("done")]])
    updates = _updates(client)
    assert [_said(u) for u in updates] == [
        ("link", "stopped"), ("link", "restarted"), ("progress", None), ("done", None),
        ("fetched", None)]
    assert isinstance(updates[2], WIRE.events.Progress) and updates[2].iteration == 5
    assert client.give_up == [False] * 3  # a silent server is waited for, never given up on


def test_a_job_the_restarted_server_does_not_know_ends_as_lost():
    client = ScriptedClient([["stopped"], [WIRE.JobLost("j")]])
    updates = _updates(client)
    assert [u.kind for u in updates] == ["link", "lost"]
    assert updates[-1].fields["message"] == job_session.LOST
    assert "lost" in job_session.FINAL


def test_a_cancel_while_the_server_is_down_ends_the_follow_at_once():
    client = ScriptedClient([], stopped=True)
    updates = _updates(client, cancel=True)
    assert [(u.kind, u.fields["message"]) for u in updates] == [
        ("error", job_session.NOT_CANCELLED)]
    assert client.cancelled == []  # nothing waited on a server that does not answer


def test_a_cancel_while_the_server_answers_reaches_it():
    client = ScriptedClient([[_event("cancelled", message="cancelled at iteration 5")]])
    updates = _updates(client, cancel=True)
    assert client.cancelled == ["j"]
    assert [u.kind for u in updates] == ["cancelled"]


def test_a_server_down_when_the_session_attaches_is_said_stopped_and_waited_for():
    done = _event("done")
    client = ScriptedClient([["stopped"], [], ["back"], [done]], session=None)
    updates = _updates(client)
    assert [_said(u) for u in updates] == [
        ("link", "stopped"), ("link", "back"), ("done", None), ("fetched", None)]
    assert client.attached == ["j"] and client.give_up == [False] * 4  # attached once back


def test_a_cancel_while_waiting_for_the_server_to_attach_ends_at_once():
    client = ScriptedClient([], session=None)
    updates = _updates(client, cancel=True)
    assert [(u.kind, u.fields["message"]) for u in updates] == [
        ("error", job_session.NOT_CANCELLED)]
    assert client.attached == [] and client.cancelled == []


def test_a_detached_session_stops_following_and_cancels_nothing():
    client = ScriptedClient([[_event("done")]])
    assert _updates(client, detach=True) == []  # nothing posted, nothing fetched
    assert client.cancelled == [] and client.slices  # the job's events were never read


def test_a_server_gone_says_how_to_go_on_whether_it_got_the_job_or_not():
    """A submit the server never answered was told to Re-attach a job the server does not
    have (its row offers Resume, which sends it again); a followed job still is."""

    class Silent(ScriptedClient):
        def submit(self, *args, **kwargs):
            raise WIRE.ServerUnavailable("no answer from tcp://h:1 for 30 s")

    submission = job_session.Submission({"task": "fit_texture"}, {})
    session = job_session.JobSession(lambda: Silent([]), "j", "/nonexistent", submission)
    session.run()
    unsent = session.updates.get()
    assert unsent.kind == "error" and unsent.fields["message"].endswith(
        "then press the job's Resume to send it again."), unsent.fields
    followed = _updates(ScriptedClient([[WIRE.ServerUnavailable("no answer")]]))
    assert followed[-1].fields["message"].endswith("then Re-attach the job."), followed
