"""Issue 26.2: a job's processes die with their server, a restarted server waits for any that
still live before it runs their job again, and ``ranks`` is bounded at submit. Before, a
SIGKILLed server left its job's process (a child of the fork server) and its ranks running."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from helpers.servers import fit_spec, optimize_inputs, target_images

from diffrec.protocol.events import Finished
from diffrec.server import lifeline
from diffrec.server.executor import Ticket
from diffrec.server.optimize_runner import OptimizeRunner
from diffrec.server.runner import JobFailed
from diffrec.server.texture_fit import TextureFitRunner
from diffrec.server.worker import Worker

GONE_WITHIN_S = 30.0
"""The job and its ranks end at once; the fork server, a Python that imported torch, takes
a few seconds to exit on a loaded machine."""


def descendants(pid: int) -> set[int]:
    """The processes below ``pid`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_gone(pids: set[int]) -> set[int]:
    deadline = time.monotonic() + GONE_WITHIN_S
    while time.monotonic() < deadline and any(alive(pid) for pid in pids):
        time.sleep(0.1)
    return {pid for pid in pids if alive(pid)}


SILENT_RANKS = {"task": "optimize", "settings": {
    "mode": "reconstruct", "light": "learn", "train_res": 16, "dmtet_grid": 8, "batch": 2,
    "ranks": 2, "iterations": 1_000_000, "log_every": 1_000_000, "test_views": 1}}
"""A two-rank job that sends no event for a long time once it runs: before, its process
noticed its server's death only when it next sent one."""


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_a_killed_server_takes_its_job_and_ranks_with_it(start_server, connect):
    server = start_server()
    client = connect(server)
    client.submit("ranks", SILENT_RANKS, optimize_inputs(count=6))
    deadline = time.monotonic() + 180
    processes: set[int] = set()
    while len(processes) < 4 and time.monotonic() < deadline:  # fork server, job, 2 ranks
        time.sleep(0.5)
        processes = {pid for pid in descendants(server.process.pid) if alive(pid)}
    assert len(processes) >= 4, f"the ranks did not start: {processes}"
    server.kill()
    assert not wait_gone(processes), "processes outlived their server"


def test_a_process_dies_with_its_parent(tmp_path):
    """What each rank of a multi-rank job does (``lifeline.die_with_parent``)."""
    script = textwrap.dedent(f"""
        import os, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c",
            "from diffrec.server import lifeline; import os, time; "
            f"lifeline.die_with_parent({{os.getpid()}}); "
            "open({str(tmp_path / 'ready')!r}, 'w').close(); time.sleep(60)"])
        print(child.pid, flush=True)
        time.sleep(60)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    deadline = time.monotonic() + 30
    while not (tmp_path / "ready").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    assert not wait_gone({child})


def test_a_job_waits_while_processes_of_its_earlier_run_live(tmp_path):
    """A restarted server must not run a job twice at once: the worker waits for the lock
    that every process of the job holds."""
    work, results = tmp_path / "work", tmp_path / "results"
    work.mkdir()
    results.mkdir()
    old_process = os.open(work / lifeline.LOCK_NAME, os.O_RDWR | os.O_CREAT)
    fcntl.flock(old_process, fcntl.LOCK_SH)
    finished = threading.Event()
    worker = Worker("cpu", lambda job, event: isinstance(event, Finished) and finished.set())
    try:
        fit = TextureFitRunner()
        worker.enqueue(Ticket("again", fit, fit.parse(fit_spec(iterations=5)),
                              {"images": target_images()}, work, results))
        assert not finished.wait(2.0)
        os.close(old_process)  # the old process ends
        assert finished.wait(60.0)
    finally:
        worker.close()


@pytest.mark.parametrize(("settings", "refusal"), [
    ({"ranks": 64, "batch": 64}, "ranks 64 is more than this worker has room for"),
    ({"ranks": 2, "batch": 3}, "a batch of 3 views does not split evenly over 2 ranks"),
])
def test_ranks_are_bounded_at_submit(settings, refusal, monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    spec = {"task": "optimize", "settings": {"mode": "reconstruct", "light": "learn",
                                             "train_res": 16, **settings}}
    with pytest.raises(JobFailed, match=refusal):
        runner = OptimizeRunner("cpu")
        runner.check_inputs(runner.parse(spec), optimize_inputs())
