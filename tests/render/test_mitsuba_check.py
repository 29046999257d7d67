"""diffrec.render.mitsuba_check: a child process that crashes, fails or hangs is a phrase
naming what happened, and the process that asked is still running; load_mitsuba turns that
phrase into a sentence saying what to do."""

import sys

import pytest

from diffrec.errors import UserError
from diffrec.render import mitsuba_bridge, mitsuba_check


def child(code: str) -> tuple[str, ...]:
    return (sys.executable, "-c", code)


def test_a_child_that_aborts_is_named_with_its_signal_and_last_words():
    problem = mitsuba_check.cpu_backend_problem(child(
        "import os, sys; sys.stderr.write('compiling\\nLLVM ERROR: Cannot select\\n\\n'); "
        "sys.stderr.flush(); os.abort()"))
    assert problem.startswith("Mitsuba's CPU backend crashed")
    assert problem.endswith("(SIGABRT: LLVM ERROR: Cannot select)")


def test_a_child_that_exits_with_a_status_says_it():
    problem = mitsuba_check.cpu_backend_problem(child("import sys; sys.exit(3)"))
    assert problem.endswith("(exit status 3)")
    assert mitsuba_check.cpu_backend_problem(child("pass")) is None


def test_a_child_that_hangs_is_given_up_on(monkeypatch):
    monkeypatch.setattr(mitsuba_check, "CHECK_TIMEOUT_S", 1)
    problem = mitsuba_check.cpu_backend_problem(child("import time; time.sleep(30)"))
    assert problem == "Mitsuba's CPU backend did not finish a 16-pixel test render in 1 s"


@pytest.mark.mitsuba
def test_a_crashing_cpu_backend_is_one_sentence_saying_what_to_do(monkeypatch):
    monkeypatch.setattr(mitsuba_bridge, "cpu_backend_problem",
                        lambda: "Mitsuba's CPU backend crashed (SIGABRT)")
    mitsuba_bridge._load.cache_clear()
    try:
        with pytest.raises(UserError, match=r"crashed \(SIGABRT\): path tracing cannot run "
                                            r"here; train with renderer: rasterized"):
            mitsuba_bridge.load_mitsuba("cpu")
    finally:
        mitsuba_bridge._load.cache_clear()
