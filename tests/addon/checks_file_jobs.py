"""Issue 56 items 5 and 6, and a file opened while its server is down, under bpy (see
harness.py and test_file_jobs.py): jobs belong to the .blend that sent them. Another file's
Clear Finished, Remove and Import leave a file's jobs alone; opening another file stops
following a file's running job (nothing of it reaches the other file, whose panel is free),
and reopening the file follows it again to its end there; a file opened while the server is
down says the server stopped within seconds and follows its job once the server is back,
instead of failing after the client's retry time.

Each check starts its own ``diffrec serve`` child process (``helpers.servers.ServerProcess``,
on a free loopback port) with tiny fit_texture jobs, and saves two .blend files in a scratch
folder; BLENDER_USER_RESOURCES must point at a scratch folder.
"""

import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # blender --python does not add it
sys.path.insert(0, str(Path(__file__).parents[1]))  # the tests' helpers
import harness  # noqa: I001  (puts the repository on sys.path)
import bpy
import numpy as np
from helpers.servers import ServerProcess

from addon import follow, queue_operators, scene_updates
from addon.core.wire import protocol

STOPPED = "the server stopped: following again when it is back"
BACK = "the server answers again; following again"
SAID_WITHIN_S = 5.0
"""How soon a file opened while its server is down must say so (STOPPED_AFTER_S is 3 s)."""
RESTART_AFTER_S = 4.0
"""When the killed server is started again (it then takes a few seconds to answer)."""


def _enable(address: str):
    import addon_utils

    addon_utils.enable("addon", default_set=True)
    preferences = bpy.context.preferences.addons["addon"].preferences
    preferences.endpoint, preferences.timeout = address, 10.0  # the add-on's default timeout


def _disable():
    import addon_utils

    addon_utils.disable("addon", default_set=True)


def _submit(server: ServerProcess, label: str, iterations: int = 5, wait: bool = True) -> str:
    """A fit_texture job of ``iterations`` on ``server`` (followed to its end when ``wait``);
    its id."""
    job = uuid.uuid4().hex
    spec = {"task": "fit_texture", "iterations": iterations, "texture_size": 8,
            "checkpoint_every": 100, "preview_every": 10**6, "label": label}
    images = np.random.default_rng(0).uniform(0, 1, (2, 16, 16, 4)).astype(np.float32)
    with protocol().Client(server.address, timeout=5.0, retry_for=30.0) as client:
        client.submit(job, spec, {"images": images})
        if wait:
            assert client.wait(job)["kind"] == "done"
    return job


def _own_entry(job: str, state: str, name: str = "ball"):
    """This file's Jobs list entry of ``job``, as Optimize leaves it once the server has it."""
    entry = bpy.context.scene.diffrec.jobs.add()
    entry.job_id, entry.state, entry.object_name, entry.mode = job, state, name, "fit_texture"
    entry.on_server = True
    return entry


def _new_file(path: Path, object_name: str) -> None:
    """An empty file with one cube named ``object_name``, saved as ``path``."""
    bpy.ops.wm.read_homefile(use_empty=True)
    bpy.ops.mesh.primitive_cube_add()
    bpy.context.active_object.name = object_name
    bpy.ops.wm.save_as_mainfile(filepath=str(path))


def _server_state(server: ServerProcess, job: str) -> str:
    """The job's state on the server, 'not_found' when it has none."""
    with protocol().Client(server.address, timeout=5.0, retry_for=10.0) as client:
        try:
            return client.status(job)["state"]
        except protocol().ServerError as exc:
            return exc.code


def _refused(operator, **args) -> str:
    """The ERROR report of an operator that must refuse (bpy.ops raises it)."""
    try:
        operator(**args)
    except RuntimeError as error:
        return str(error)
    raise AssertionError(f"{operator} ran")


class _Applied:
    """Records every update applied to a scene: (the open file's name, update kind, status
    after it)."""

    def __init__(self):
        self.seen = []
        self._original = scene_updates.apply_update

    def __enter__(self):
        def recording(context, job, update, report):
            self._original(context, job, update, report)
            self.seen.append((Path(bpy.data.filepath).name, update.kind,
                              context.scene.diffrec.status, time.monotonic()))

        scene_updates.apply_update = recording
        return self

    def __exit__(self, *exc):
        scene_updates.apply_update = self._original


def check_live_another_files_clear_finished_remove_and_import_leave_a_files_jobs_alone():
    root = Path(tempfile.mkdtemp())
    server = ServerProcess(root / "data").start()
    _enable(server.address)
    try:
        a_file, b_file = root / "a.blend", root / "b.blend"
        _new_file(a_file, "ball")
        a_job = _submit(server, "ball")
        _own_entry(a_job, "done")
        bpy.ops.wm.save_mainfile()
        _new_file(b_file, "box")
        b_job = _submit(server, "box")
        _own_entry(b_job, "done", "box")
        assert bpy.ops.diffrec.refresh_jobs() == {"FINISHED"}
        listed = scene_updates.job_entry(bpy.context.scene, a_job)
        assert listed is not None and listed.from_server and listed.object_name == "ball"
        objects = sorted(obj.name for obj in bpy.data.objects)

        assert bpy.ops.diffrec.clear_finished() == {"FINISHED"}
        assert _server_state(server, b_job) == "not_found"  # B's own finished job is cleared
        assert _server_state(server, a_job) == "done"  # A's is not
        assert scene_updates.job_entry(bpy.context.scene, a_job) is not None  # shown, apart
        for operator in (bpy.ops.diffrec.remove_job, bpy.ops.diffrec.attach,
                         bpy.ops.diffrec.resume_job):
            refusal = _refused(operator, job_id=a_job)
            assert "sent from another .blend: open that file" in refusal, refusal
        assert _server_state(server, a_job) == "done"
        assert sorted(obj.name for obj in bpy.data.objects) == objects  # nothing imported
        assert not follow.results_dir(a_job).exists()  # nor fetched for B

        bpy.ops.wm.open_mainfile(filepath=str(a_file))
        with _Applied() as applied:
            assert bpy.ops.diffrec.attach(job_id=a_job) == {"FINISHED"}
        entry = scene_updates.job_entry(bpy.context.scene, a_job)
        assert entry.state == "done" and follow.results_dir(a_job).is_dir(), applied.seen
        assert {name for name, *_ in applied.seen} == {"a.blend"}, applied.seen

        with protocol().Client(server.address, timeout=5.0, retry_for=10.0) as client:
            client.delete(a_job)  # as another tool may: A's Refresh says the job is gone
        assert bpy.ops.diffrec.refresh_jobs() == {"FINISHED"}
        assert (entry.on_server, entry.state, entry.message) == (
            False, "failed", queue_operators.GONE), (entry.on_server, entry.state)
    finally:
        server.kill()
        _disable()


def check_live_a_running_job_is_followed_in_its_own_file_only():
    root = Path(tempfile.mkdtemp())
    server = ServerProcess(root / "data").start()
    _enable(server.address)
    try:
        a_file, b_file = root / "a.blend", root / "b.blend"
        _new_file(b_file, "box")
        _new_file(a_file, "ball")
        job = _submit(server, "ball", iterations=200, wait=False)
        _own_entry(job, "running")
        bpy.ops.wm.save_mainfile()
        with _Applied() as applied:
            bpy.ops.wm.open_mainfile(filepath=str(a_file))
            assert job in follow.jobs, "opening A follows its running job"
            followed = follow.jobs.run(job)
            deadline = time.monotonic() + 10.0
            while not applied.seen and time.monotonic() < deadline:  # its progress, say
                follow.pump_jobs()
                time.sleep(0.1)
            assert applied.seen, "the job was followed in A"

            bpy.ops.wm.open_mainfile(filepath=str(b_file))
            # B's panel is free: no Optimize held back, no Cancel for A's job
            assert not follow.jobs, len(follow.jobs)
            assert follow.pump_jobs(block=True) is None
            deadline = time.monotonic() + 5.0
            while followed.session.alive and time.monotonic() < deadline:
                time.sleep(0.1)
            assert not followed.session.alive  # its follower stopped: it fetches nothing
            assert _server_state(server, job) in ("queued", "running", "done")  # not cancelled
            with protocol().Client(server.address, timeout=5.0, retry_for=30.0) as client:
                assert client.wait(job)["kind"] == "done"  # it ends while B is open
            assert not bpy.context.scene.diffrec.jobs and not bpy.context.scene.diffrec.status

            bpy.ops.wm.open_mainfile(filepath=str(a_file))
            assert job in follow.jobs, "reopening A follows its job again"
            assert follow.pump_jobs(block=True) is None
        entry = scene_updates.job_entry(bpy.context.scene, job)
        assert entry.state == "done", (entry.state, applied.seen)
        where = [(name, kind) for name, kind, *_ in applied.seen]
        assert {name for name, _ in where} == {"a.blend"}, where  # nothing applied in B
        assert where[-1] == ("a.blend", "fetched"), where
    finally:
        server.kill()
        _disable()


def _restart_later(server: ServerProcess) -> threading.Thread:
    """Start ``server`` again RESTART_AFTER_S from now, on its port and data."""
    thread = threading.Timer(RESTART_AFTER_S, server.start)
    thread.start()
    return thread


def _said_stopped_then_back(applied: _Applied, began: float) -> None:
    """The status said the server stopped within SAID_WITHIN_S of ``began``, then that it is
    back, and the job was followed to its fetch."""
    links = [(status, at - began) for _, kind, status, at in applied.seen if kind == "link"]
    assert [status for status, _ in links][:2] == [STOPPED, BACK], applied.seen
    assert links[0][1] <= SAID_WITHIN_S, links
    assert applied.seen[-1][1] == "fetched", applied.seen


def check_live_a_file_opened_while_its_server_is_down_waits_for_it():
    root = Path(tempfile.mkdtemp())
    server = ServerProcess(root / "data").start()
    _enable(server.address)
    try:
        a_file = root / "a.blend"
        _new_file(a_file, "ball")
        job = _submit(server, "ball")
        _own_entry(job, "running")  # saved while it ran
        bpy.ops.wm.save_mainfile()
        server.kill()
        with _Applied() as applied:
            began = time.monotonic()
            bpy.ops.wm.open_mainfile(filepath=str(a_file))
            restart = _restart_later(server)
            assert job in follow.jobs
            assert follow.pump_jobs(block=True) is None
            restart.join()
        _said_stopped_then_back(applied, began)
        entry = scene_updates.job_entry(bpy.context.scene, job)
        assert entry.state == "done", (entry.state, applied.seen)
    finally:
        server.kill()
        _disable()


harness.main(globals())
