"""The silence clock (diffrec.protocol.liveness) on a hand-driven clock: silence adds up by the
wall clock however the follower slices its polls, only unanswered requests count, and each
change (stopped, back, restarted) is said once."""

from diffrec.protocol.liveness import SAID, Liveness


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_silence_adds_up_across_short_polls_and_is_reported_stopped_once():
    clock = Clock()
    liveness = Liveness(stopped_after_s=3.0, clock=clock)
    liveness.heard("a")
    changes = []
    for _ in range(14):  # a follower asking every 0.25 s, hearing nothing (the bug reset here)
        liveness.asked()
        clock.now += 0.25
        changes.append(liveness.change())
    assert liveness.silence_s() == 3.5
    assert changes == [None] * 12 + ["stopped", None]  # past 3 s, once
    assert liveness.stopped


def test_only_an_unanswered_request_starts_the_silence():
    clock = Clock()
    liveness = Liveness(stopped_after_s=3.0, clock=clock)
    clock.now += 60.0  # idle: nothing asked, so nothing awaited
    assert liveness.silence_s() == 0.0 and liveness.change() is None
    assert liveness.silent_at(3.0) is None
    liveness.asked()
    clock.now += 1.0
    liveness.asked()  # a second request does not restart the clock
    clock.now += 1.0
    assert liveness.silence_s() == 2.0 and liveness.silent_at(3.0) == 163.0
    liveness.heard()  # any answer ends it
    assert liveness.silence_s() == 0.0


def test_the_same_session_answering_again_is_back_and_another_is_a_restart():
    clock = Clock()
    liveness = Liveness(stopped_after_s=3.0, clock=clock)
    liveness.heard("a")
    liveness.asked()
    clock.now += 4.0
    assert liveness.change() == "stopped"
    liveness.heard()  # a late reply that names no session: still stopped
    assert liveness.change() is None and liveness.stopped
    liveness.heard("a")
    assert liveness.change() == "back" and not liveness.stopped
    assert liveness.change() is None
    liveness.heard("b")  # restarted quicker than stopped_after_s: no stop in between
    assert liveness.change() == "restarted" and liveness.session == "b"
    liveness.heard("b")
    assert liveness.change() is None


def test_a_restart_after_a_stop_is_said_as_a_restart():
    clock = Clock()
    liveness = Liveness(stopped_after_s=3.0, clock=clock)
    liveness.heard("a")
    liveness.asked()
    clock.now += 3.5
    assert [liveness.change(), liveness.change()] == ["stopped", None]
    liveness.heard("b")
    assert liveness.change() == "restarted" and not liveness.stopped
    assert SAID["stopped"] == "the server stopped: following again when it is back"
    assert SAID["restarted"] == "the server restarted; following again"
