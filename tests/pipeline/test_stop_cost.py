"""What a pass tells its reporter a stop would take (issue 56.4): the slowest iteration so far
plus the latest checkpoint's write, measured, told again only when it grows by more than
StopCost.GROWTH (the job server sizes the grace before a kill by it)."""

from __future__ import annotations

import pytest

from diffrec.pipeline.reporter import Reporter
from diffrec.pipeline.trainer import StopCost


class Told(Reporter):
    def __init__(self):
        self.told: list[float] = []

    def stop_takes(self, seconds: float) -> None:
        self.told.append(seconds)


def test_the_slowest_iteration_and_the_checkpoint_are_told_when_they_grow():
    clock = iter([0.0, 2.0, 3.0, 3.5, 9.5, 10.0])  # laps of 2, 1, 0.5, 6 and 0.5 s
    reporter = Told()
    cost = StopCost(reporter, clock=lambda: next(clock))
    cost.lap(save_s=0.5)   # 2 s + 0.5: told
    cost.lap(save_s=0.5)   # slowest still 2 s: not told again
    cost.lap(save_s=0.6)   # 2.6 s, within GROWTH of 2.5: not told
    cost.lap(save_s=0.5)   # 6 s + 0.5: told
    cost.lap(save_s=3.0)   # 6 s + 3: told (grew by more than GROWTH)
    assert reporter.told == pytest.approx([2.5, 6.5, 9.0])
