"""The typed job events (``diffrec.protocol.events``): one model from the trainer to the
panel, read back as sent, described in one sentence, importable without pyzmq or torch."""

import subprocess
import sys

import pytest

from diffrec.protocol import events
from diffrec.protocol.events import End, Log, Preview, Progress, describe, parse, time_left


def test_every_event_reads_back_as_it_was_sent():
    sent = [Progress("pass1", 120, 300, {"total": 0.25}, 27.41, 60.0, 90.0, 400.0, 1, 2, 0),
            Progress("pass2", 120, 1000, psnr=27.4, eta_s=46.0, expected_iterations=350),
            Preview("pass2", 40, 2, 2, 1),
            Log("baking textures…", stage="baking"),
            Log("resumed", resumed_from=250),
            End("done", results=[{"name": "mesh.glb", "size": 3, "content_hash": "ab"}]),
            End("failed", "the GPU ran out of memory"),
            End("cancelled", "the job was cancelled")]
    for event in sent:
        assert parse(event.kind, event.fields()) == event


def test_the_artist_reads_the_pass_of_all_passes_and_the_whole_jobs_time_left():
    first = Progress("pass1", 120, 300, {"total": 0.1}, 27.43, 60.0, eta_s=90.0,
                     job_eta_s=190.0, pass_number=1, passes=2)
    assert describe(first) == "Pass 1 of 2 · 120/300 · 27.4 dB · about 3 min left"
    assert first.fraction == pytest.approx(0.2)  # 120/300 of the first of two passes
    # a one-pass job (materials) names no pass: never "pass2" in a run of one pass
    only = Progress("pass2", 10, 20, psnr=30.0, eta_s=5.0, job_eta_s=5.0, pass_index=1)
    assert describe(only) == "10/20 · 30.0 dB · less than a minute left"
    assert only.fraction == 0.5
    assert first.seconds_per_iteration == 90.0 / 180  # what its ETA was reckoned at


def test_a_pass_the_stopping_rule_may_end_counts_to_its_expected_end():
    # 1000 at most, expected to stop at 350: 120 done is a third of it, and the ETA's 46 s
    # for the 230 still expected are 0.2 s each (not 46 s over the 880 to the cap)
    running = Progress("pass2", 120, 1000, eta_s=46.0, job_eta_s=46.0, expected_iterations=350)
    assert running.fraction == pytest.approx(120 / 350)
    assert running.seconds_per_iteration == pytest.approx(0.2)
    assert describe(running) == "120/1000 · less than a minute left"
    # an event whose expected end is behind it: done, at the pass's mean speed so far
    late = Progress("pass2", 400, 1000, elapsed_s=80.0, expected_iterations=350)
    assert late.fraction == 1.0 and late.seconds_per_iteration == pytest.approx(0.2)
    assert Progress.from_fields({"iteration": 5, "iterations": 10}).expected_end == 10
    for broken in (float("nan"), True, "350"):  # read as a pass that runs all its iterations
        assert Progress.from_fields({"iteration": 5, "iterations": 10,
                                     "expected_iterations": broken}).expected_end == 10


def test_time_left_is_said_as_a_person_says_it():
    assert time_left(None) == ""
    assert time_left(59) == "less than a minute left"
    assert time_left(3 * 60 + 20) == "about 3 min left"
    assert time_left(2 * 3600) == "about 2 h left"
    assert time_left(3600 + 20 * 60) == "about 1 h 20 min left"


def test_a_progress_event_of_an_older_server_reads_as_one_pass():
    old = {"pass": "pass2", "pass_index": 1, "iteration": 5, "iterations": 10,
           "losses": {"total": 0.5}, "psnr": 20.0, "elapsed_s": 5.0, "eta_s": 5.0}
    progress = Progress.from_fields(old)
    assert (progress.pass_number, progress.passes, progress.job_eta_s) == (1, 1, 5.0)
    assert describe(progress) == "5/10 · 20.0 dB · less than a minute left"


def test_an_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="unknown event kind"):
        parse("bogus", {})


def test_the_event_model_imports_without_pyzmq_or_torch():
    code = ("import sys; sys.modules['zmq'] = None; sys.modules['torch'] = None\n"
            "from diffrec.protocol.events import describe, Progress\n"
            "print(describe(Progress('fit', 1, 2)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1/2"
    assert events.FINAL_KINDS == ("done", "failed", "cancelled")
