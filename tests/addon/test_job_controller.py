"""The one controller of every followed job (addon/core/job_controller.py), without Blender:
one tick drives every run, started or followed again; cancel reaches the run of its job; the
pump asks for no more ticks once nothing is left; a failing run is reported and dropped."""

from __future__ import annotations

import pytest

from addon.core.job_controller import JobController


class FakeRun:
    """A run that is over after ``ticks`` ticks (at its next tick once cancelled or
    detached), recording what the controller asked of it."""

    def __init__(self, job: str, ticks: int = 3, fails_at: int | None = None):
        self.job, self.ticks, self.fails_at = job, ticks, fails_at
        self.ticked: list[tuple[object, bool]] = []
        self.reports: list[tuple[set, str]] = []
        self.cancelled = self.detached = False

    def tick(self, context, block: bool = False) -> bool:
        self.ticked.append((context, block))
        if len(self.ticked) == self.fails_at:
            raise ConnectionRefusedError("the backend refused the connection")
        return self.cancelled or self.detached or (block or len(self.ticked) >= self.ticks)

    def report(self, kinds, message: str) -> None:
        self.reports.append((kinds, message))

    def cancel(self) -> None:
        self.cancelled = True

    def detach(self) -> None:
        self.detached = True


def test_one_tick_drives_every_run_until_none_is_left():
    ended = []
    controller = JobController(tick_s=0.25, on_end=ended.append)
    started, refollowed = FakeRun("started", ticks=2), FakeRun("refollowed", ticks=3)
    assert controller.follow(started) and controller.follow(refollowed)
    assert len(controller) == 2 and "started" in controller and "refollowed" in controller
    assert controller.tick("ctx") == 0.25
    assert started.ticked == refollowed.ticked == [("ctx", False)], "one tick each"
    assert controller.tick("ctx") == 0.25
    assert ended == [started] and "started" not in controller and "refollowed" in controller
    assert controller.tick("ctx") is None, "nothing left: the timer unregisters"
    assert ended == [started, refollowed] and not controller
    assert len(started.ticked) == 2 and len(refollowed.ticked) == 3, "no tick once over"
    assert controller.tick("ctx") is None


def test_a_job_is_followed_once():
    controller = JobController()
    first = FakeRun("job")
    assert controller.follow(first)
    assert not controller.follow(FakeRun("job")), "a second run of the same job is refused"
    assert controller.run("job") is first and controller.run("other") is None


def test_cancel_reaches_the_run_of_its_job_or_every_run():
    controller = JobController()
    runs = [FakeRun(name, ticks=10) for name in ("a", "b", "c")]
    for run in runs:
        controller.follow(run)
    assert controller.cancel("b") == ["b"]
    assert [run.cancelled for run in runs] == [False, True, False]
    assert controller.cancel("unknown") == []
    assert controller.tick(None) is not None
    assert "b" not in controller and len(controller) == 2, "it ends at the next tick"
    assert controller.cancel() == ["a", "c"] and all(run.cancelled for run in runs)
    assert controller.tick(None) is None


def test_detach_all_drops_every_run_at_once_without_ending_any():
    ended = []
    controller = JobController(on_end=ended.append)
    runs = [FakeRun("a"), FakeRun("b")]
    for run in runs:
        controller.follow(run)
    controller.detach_all()
    assert not controller and all(run.detached for run in runs)
    assert not any(run.cancelled for run in runs), "the jobs go on on the server"
    assert controller.tick(None) is None and ended == [], "no tick, no end applied"
    assert all(not run.ticked for run in runs)


def test_a_run_whose_tick_raises_is_reported_cancelled_and_dropped_the_others_go_on():
    ended = []
    controller = JobController(on_end=ended.append)
    failing, healthy = FakeRun("failing", fails_at=1), FakeRun("healthy", ticks=2)
    controller.follow(failing)
    controller.follow(healthy)
    assert controller.tick(None) is not None
    assert failing.reports == [({"ERROR"}, "The backend refused the connection.")]
    assert failing.cancelled and "failing" not in controller and ended == []
    assert healthy.ticked == [(None, False)], "the next run was ticked in the same tick"
    assert controller.tick(None) is None and ended == [healthy]


def test_a_run_followed_again_is_not_dropped_by_the_old_run_of_its_job():
    """A reopened file follows its job again while the old run (detached) still ends."""
    controller = JobController()
    old = FakeRun("job")
    controller.follow(old)
    controller.detach_all()
    new = FakeRun("job", ticks=2)
    assert controller.follow(new)
    assert controller.tick(None) is not None and controller.run("job") is new


def test_run_to_end_ticks_one_run_blocking_and_leaves_the_others():
    controller = JobController()
    mine, other = FakeRun("mine", ticks=5), FakeRun("other")
    controller.follow(mine)
    controller.follow(other)
    controller.run_to_end("ctx", "mine")
    assert mine.ticked == [("ctx", True)] and "mine" not in controller
    assert other.ticked == [] and "other" in controller


def test_run_to_end_hands_a_failure_to_its_caller_and_drops_the_run():
    controller = JobController()
    controller.follow(FakeRun("job", fails_at=1))
    with pytest.raises(ConnectionRefusedError):
        controller.run_to_end(None, "job")
    assert "job" not in controller


def test_a_ctrl_c_while_a_run_is_ticked_to_its_end_cancels_it_and_says_so():
    """Headless, Ctrl-C in the middle of a job printed three tracebacks and left the job
    running on the server."""
    from addon.core import messages

    class Interrupted(FakeRun):
        def tick(self, context, block=False):
            if not self.ticked:
                self.ticked.append((context, block))
                raise KeyboardInterrupt
            return super().tick(context, block)

    controller = JobController()
    run = Interrupted("job")
    controller.follow(run)
    with pytest.raises(RuntimeError, match="Interrupted \\(Ctrl-C\\): the job was asked to stop"):
        controller.run_to_end("ctx", "job")
    assert run.cancelled and len(run.ticked) == 2, "cancelled, then ticked to its stop"
    assert "job" not in controller
    assert messages.sentence(RuntimeError(messages.INTERRUPTED)) == messages.INTERRUPTED
