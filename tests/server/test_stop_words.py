"""What a cancelled job and a resumed one say about their checkpoint (issue 56.4): where the
job stopped and where it starts again, read from the checkpoint folder without loading a
checkpoint, and the grace a stop gets from what the job measured."""

from __future__ import annotations

import pytest

from diffrec.pipeline.checkpoints import CheckpointStore
from diffrec.protocol.events import Progress
from diffrec.server.executor import STOP_MARGIN, StopGrace, cancelled_message
from diffrec.server.job_table import resume_message
from diffrec.server.runner import StopTakes


def test_a_job_with_no_checkpoint_says_resume_starts_it_over(tmp_path):
    where = CheckpointStore(tmp_path).latest()
    assert where is None
    assert cancelled_message(tmp_path) == ("the job was cancelled before its first checkpoint: "
                                           "Resume starts it over")
    assert resume_message(where) == "resuming from the start: the job kept no checkpoint"


def test_a_checkpointed_job_says_where_it_stopped_and_where_it_resumes(tmp_path):
    store = CheckpointStore(tmp_path)
    store.save("pass1", {"iteration": 3}, "iteration 3 of 20 of pass 1 of 2")
    store.save("pass2", {"iteration": 7}, "iteration 7 of 20 of pass 2 of 2")
    assert cancelled_message(tmp_path) == (
        "the job was cancelled, its checkpoint kept at iteration 7 of 20 of pass 2 of 2: "
        "Resume continues from there")
    assert resume_message(store.latest()) == (
        "resuming from its checkpoint at iteration 7 of 20 of pass 2 of 2")
    store.clear()
    assert store.latest() is None


def test_a_checkpoint_kept_without_its_position_is_still_said(tmp_path):
    CheckpointStore(tmp_path).save("fit", {"iteration": 5})
    assert resume_message(CheckpointStore(tmp_path).latest()) == "resuming from its checkpoint"
    assert cancelled_message(tmp_path) == ("the job was cancelled, its checkpoint kept: Resume "
                                           "continues from there")


@pytest.mark.parametrize("measured", [0.0, 4.0])
def test_the_grace_grows_with_what_the_job_measured(measured):
    grace = StopGrace(0.5)
    assert not grace.heard(Progress("pass1", 1, 10, elapsed_s=99.0))
    assert grace.seconds == 0.5
    assert grace.heard(StopTakes(measured))
    assert grace.seconds == pytest.approx(0.5 + STOP_MARGIN * measured)
