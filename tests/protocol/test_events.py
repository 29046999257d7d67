"""The typed job events (``diffrec.protocol.events``): one model from the trainer to the
panel, read back as sent, described in one sentence, importable without pyzmq or torch."""

import ast
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from diffrec.protocol import events
from diffrec.protocol.events import (
    Finished,
    Log,
    Outcome,
    Preview,
    Progress,
    Started,
    describe,
    parse,
    time_left,
    to_wire,
)


def test_every_event_reads_back_as_it_was_sent():
    sent = [Progress("pass1", 120, 300, {"total": 0.25}, 27.41, 60.0, 90.0, 400.0, 1, 2),
            Progress("pass2", 120, 1000, psnr=27.4, eta_s=46.0, expected_iterations=350),
            Preview("pass2", 40, 2, 2),
            Log("baking textures…", stage="baking"),
            Log("resumed", resumed_from=250),
            Started(),
            Finished(Outcome.DONE, results=[{"name": "mesh.glb", "size": 3, "content_hash": "ab"}]),
            Finished(Outcome.FAILED, "the GPU ran out of memory"),
            Finished(Outcome.CANCELLED, "the job was cancelled")]
    for event in sent:
        assert parse(event.kind, event.fields()) == event
        assert parse(*to_wire(event)) == event


def test_the_artist_reads_the_pass_of_all_passes_and_the_whole_jobs_time_left():
    first = Progress("pass1", 120, 300, {"total": 0.1}, 27.43, 60.0, eta_s=90.0,
                     job_eta_s=190.0, pass_number=1, passes=2)
    assert describe(first) == "Pass 1 of 2 · 120/300 · 27.4 dB · about 3 min left"
    assert first.fraction == pytest.approx(0.2)  # 120/300 of the first of two passes
    # a one-pass job (materials) names no pass: never "pass2" in a run of one pass
    only = Progress("pass2", 10, 20, psnr=30.0, eta_s=5.0, job_eta_s=5.0)
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
    assert events.FINAL_STATES == ("done", "failed", "cancelled")


def test_a_preview_carries_its_images_to_the_wire_and_back():
    render = np.arange(12, dtype=np.float32).reshape(2, 2, 3)
    kind, fields, arrays = to_wire(Preview("pass1", 7, images={"render": render}))
    assert (kind, fields["iteration"], arrays["render"] is render) == ("preview", 7, True)
    back = parse(kind, fields, {"render": render.copy()})
    assert np.array_equal(back.images["render"], render) and back.iteration == 7
    assert to_wire(Log("x"))[2] is None and to_wire(Preview("fit", 1))[2] is None


def test_every_kind_is_described_in_one_line():
    said = [
        (Progress("pass1", 120, 300, psnr=27.43, job_eta_s=190.0, pass_number=1, passes=2),
            "Pass 1 of 2 · 120/300 · 27.4 dB · about 3 min left"),
        (Preview("pass2", 40, 2, 2), "preview: pass 2 of 2 · 40"),
        (Preview("fit", 5), "preview: 5"),
        (Log("baking textures…", stage="baking"), "baking textures…"),
        (Log("no UV layout: a fallback", "warning"), "warning: no UV layout: a fallback"),
        (Started(), "started"),
        (Finished(Outcome.DONE, results=[{"name": "manifest.json"}, {"name": "mesh.glb"}]),
            "done: manifest.json, mesh.glb"),
        (Finished(Outcome.FAILED, "the GPU ran out of memory"),
            "failed: the GPU ran out of memory"),
        (Finished(Outcome.CANCELLED, "the job was cancelled"), "cancelled: the job was cancelled"),
        (Finished(Outcome.CANCELLED), "cancelled"),
    ]
    for event, line in said:
        assert describe(event) == line
    assert {type(event) for event, _ in said} == set(events.Event.__args__)  # every kind


def test_the_final_states_are_the_outcomes_and_the_kinds_of_their_events():
    assert events.FINAL_STATES == tuple(outcome.value for outcome in Outcome)
    for outcome in Outcome:
        finished = parse(outcome.value, {})
        assert isinstance(finished, Finished) and finished.outcome is outcome
        assert finished.kind == outcome == outcome.value


REPOSITORY = Path(__file__).resolve().parents[2]


def final_state_definitions(folders: list[Path]) -> list[str]:
    """``path:line`` of every tuple, list or set literal in the Python files under
    ``folders`` that spells out all of a job's final states: a second definition of them."""
    found = []
    for folder in folders:
        for path in sorted(folder.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                    words = {element.value for element in node.elts
                             if isinstance(element, ast.Constant)}
                    if set(events.FINAL_STATES) <= words:
                        found.append(f"{path.relative_to(folder.parent)}:{node.lineno}")
    return found


def test_the_final_states_are_defined_once(tmp_path):
    code = [REPOSITORY / "backend" / "diffrec", REPOSITORY / "addon"]
    assert final_state_definitions(code) == []  # every other place imports events.Outcome
    (tmp_path / "store.py").write_text('TERMINAL = ("done", "failed", "cancelled")\n')
    assert len(final_state_definitions([tmp_path])) == 1  # what the check would find
