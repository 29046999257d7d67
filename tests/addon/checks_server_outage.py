"""Issue 56.1 / 55.9 and 56.10 under bpy (see harness.py and test_server_outage.py): a followed
job's server SIGKILLed and started again on the same address, the status line says so within
seconds and the job is followed again (or said lost); the Jobs list's questions to a server
that is down or hung answer within seconds; a running job reads "running" in the Jobs list and
the hour warning says "about" once.

The checks named ``check_live_*`` start their own ``diffrec serve`` child processes (this
Python's, on a free loopback port, with data folders of their own) so that they can kill and
restart them; BLENDER_USER_RESOURCES must point at a scratch folder.
"""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # blender --python does not add it
import harness  # noqa: I001  (puts the repository on sys.path)
import bpy
import numpy as np

from addon import backend_link, estimate, follow, panel, scene_updates
from addon.core import job_session
from addon.core.wire import protocol

REPORTS = []
STOPPED = "the server stopped: following again when it is back"
RESTARTED = "the server restarted; following again"
SAID_WITHIN_S = 5.0
"""How soon after the kill the status must say the server stopped (STOPPED_AFTER_S is 3 s;
the rest is the last ping's period and a loaded machine)."""


def _report(kinds, message):
    REPORTS.append((sorted(kinds), message))


class Server:
    """``diffrec serve`` in a child process on ``address``, keeping its jobs in ``data``."""

    def __init__(self, address: str, data: Path):
        self.address, self.data = address, data
        self.process = None

    def start(self) -> "Server":
        command = [sys.executable, "-m", "diffrec", "serve", "--bind", self.address,
                   "--data-dir", str(self.data), "--device", "cpu"]
        log = open(self.data.parent / f"{self.data.name}.log", "ab")
        self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                        env={**os.environ, "OMP_NUM_THREADS": "1"})
        with protocol().Client(self.address, timeout=1.0, retry_for=60.0) as client:
            client.ping()
        return self

    def signal(self, number) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(number)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        if self.process is not None:
            self.process.wait(10)


def _free_address() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{probe.getsockname()[1]}"


def _enable(endpoint: str):
    import addon_utils

    addon_utils.enable("addon", default_set=True)
    preferences = bpy.context.preferences.addons["addon"].preferences
    preferences.endpoint = endpoint
    preferences.timeout = 10.0  # the add-on's default: a question must not wait that long
    REPORTS.clear()


def _disable():
    import addon_utils

    addon_utils.disable("addon", default_set=True)


def _new_entry(job, state="submitting", name="ball"):
    entry = bpy.context.scene.diffrec.jobs.add()
    entry.job_id, entry.state, entry.object_name, entry.mode = job, state, name, "materials"
    return entry


def _fit_job(iterations: int) -> job_session.Submission:
    spec = {"task": "fit_texture", "iterations": iterations, "texture_size": 8,
            "checkpoint_every": 100, "preview_every": 10**6}
    images = np.random.default_rng(0).uniform(0, 1, (2, 16, 16, 4)).astype(np.float32)
    return job_session.Submission(spec, {"images": images})


def _follow_through_a_kill(server: Server, then) -> tuple[list, object]:
    """Follow a fit_texture job on ``server``; SIGKILL it at the job's first progress event and
    call ``then()`` once the status says it stopped. [(seconds since the kill, update kind,
    the status after it)] and the job's list entry."""
    job = uuid.uuid4().hex
    entry = _new_entry(job)
    run = follow.JobRun(job, backend_link.connector(bpy.context), _report,
                        submission=_fit_job(3000), fetch_only=None)
    original, killed_at, seen = scene_updates.apply_update, [], []

    def watching(context, job_id, update, report):
        original(context, job_id, update, report)
        if killed_at:
            status = context.scene.diffrec.status
            seen.append((time.monotonic() - killed_at[0], update.kind, status))
            if status == STOPPED and update.kind == "link":
                then()
        elif update.kind == "progress":
            server.kill()
            killed_at.append(time.monotonic())

    scene_updates.apply_update = watching
    try:
        follow.start(bpy.context, run)
    finally:
        scene_updates.apply_update = original
    assert killed_at, ("the job ended before its first progress event", REPORTS)
    return seen, entry


# -- without a server --------------------------------------------------------------------------


def check_a_job_that_trains_reads_running_in_the_jobs_list():
    _enable("tcp://127.0.0.1:1")
    try:
        entry = _new_entry("j")
        events = protocol().events
        for kind, fields in (("submitted", {"state": "queued"}),
                             ("progress", {"pass": "pass1", "iteration": 5, "iterations": 10,
                                           "losses": {"total": 0.1}})):
            update = (events.parse(kind, fields) if kind == "progress"
                      else job_session.Update(kind, fields))
            scene_updates.apply_update(bpy.context, "j", update, _report)
        assert entry.state == "running", entry.state
        assert panel.job_line(entry) == "ball · running · 50%", panel.job_line(entry)
    finally:
        _disable()


def check_the_hour_warning_says_about_once():
    guess = estimate.Estimate(triangles=None, views=8, width=64, height=64, upload_bytes=0,
                              seconds=12 * 3600, measured=True, longest_seconds=12 * 3600)
    (warning,) = guess.warnings()
    assert warning.startswith("about 12 h 00 min: lower the iterations"), warning


# -- with servers it kills ---------------------------------------------------------------------


def check_live_a_killed_server_is_said_within_seconds_and_followed_again_after_its_restart():
    root = Path(tempfile.mkdtemp())
    server = Server(_free_address(), root / "data").start()
    _enable(server.address)
    try:
        seen, entry = _follow_through_a_kill(server, server.start)
        said = [(at, kind, status) for at, kind, status in seen if kind == "link"]
        assert [status for _, _, status in said][:2] == [STOPPED, RESTARTED], (seen, REPORTS)
        assert said[0][0] <= SAID_WITHIN_S, seen  # wall clock, not per poll
        assert entry.state == "done", (entry.state, seen, REPORTS)  # followed to its end
        assert any(kind == "fetched" for _, kind, _ in seen), seen
        assert any(STOPPED in text for kinds, text in REPORTS if "WARNING" in kinds), REPORTS
    finally:
        server.kill()
        _disable()


def check_live_a_restarted_server_without_the_job_says_the_job_was_lost():
    root = Path(tempfile.mkdtemp())
    server = Server(_free_address(), root / "data").start()
    forgetful = Server(server.address, root / "other-data")  # same address, no jobs
    _enable(server.address)
    try:
        seen, entry = _follow_through_a_kill(server, forgetful.start)
        assert seen[0][2] == STOPPED and seen[0][0] <= SAID_WITHIN_S, seen
        assert seen[-1][1] == "lost", seen
        status = bpy.context.scene.diffrec.status
        assert status.startswith("the job was lost"), status
        assert (entry.state, entry.on_server) == ("failed", False), entry.state
        assert entry.message == status  # Resume then optimizes its object again
    finally:
        forgetful.kill()
        server.kill()
        _disable()


def check_live_refresh_and_remove_answer_within_seconds_when_the_server_is_down_or_hung():
    root = Path(tempfile.mkdtemp())
    server = Server(_free_address(), root / "data").start()
    _enable(server.address)
    entry = _new_entry("gone", state="done")
    entry.on_server = True
    try:
        for trouble, expected in ((lambda: server.signal(signal.SIGSTOP), "did not answer "
                                   "within 2 s"), (server.kill, "No diffrec backend answers at")):
            trouble()
            for operator, args in ((bpy.ops.diffrec.refresh_jobs, {}),
                                   (bpy.ops.diffrec.remove_job, {"job_id": "gone"})):
                began = time.monotonic()
                try:
                    operator(**args)
                except RuntimeError as error:  # bpy.ops raises the operator's ERROR report
                    text = str(error)
                else:
                    raise AssertionError(f"{operator} succeeded against a server that is not up")
                took = time.monotonic() - began
                assert expected in text, text
                assert took < 3.0, (operator, trouble, took)  # not the preferences' 10 s (x3)
        assert scene_updates.job_entry(bpy.context.scene, "gone") is not None  # not removed
    finally:
        server.signal(signal.SIGCONT)
        server.kill()
        _disable()


harness.main(globals())
