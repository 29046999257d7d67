"""What the artist does between two ticks of Optimize under bpy (see harness.py): the timer
that ticks a job lets every other action through, so an undo, a redo, a save, a deleted
camera, another scene shown or a resolution changed can come between any two steps. Each
check drives the runs as the timer does (``follow.pump_jobs``) with a recording connection,
and does that action between two ticks: the run ends with a sentence or goes on right, and
nothing of it stays in the artist's file."""

import sys
import tempfile
import uuid
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).parent))  # blender --python does not add it
import harness  # noqa: I001  (puts the repository on sys.path)
import bpy
import scenes
from recording_client import RecordingClient

import addon
from addon import export_scene, follow, scene_updates, temporaries
from addon import pump as pump_module
from addon.core import messages
from addon.submission import SubmissionBuilder

VIEWS = 2


def _scene(baked: bool = False):
    """A fresh file: a bevelled cube selected, VIEWS cameras, an HDRI world, tiny Cycles
    renders; ``baked``: a budget, so that the start is the cube's decimated, baked copy."""
    bpy.ops.wm.read_factory_settings(use_empty=True)
    addon.register()
    scene = bpy.context.scene
    scenes.cube_to_optimize(scene, VIEWS, (32, 24)).modifiers.new("bevel", "BEVEL")
    if baked:
        scene.diffrec.triangles = 40
        scene.diffrec.texture_resolution = "256"
    return scene


def _file(scene) -> dict:
    """What a job could leave in the artist's file."""
    return {
        "objects": sorted(obj.name for obj in bpy.data.objects),
        "meshes": sorted(mesh.name for mesh in bpy.data.meshes),
        "materials": sorted(material.name for material in bpy.data.materials),
        "images": sorted(image.name for image in bpy.data.images
                         if image.type != "RENDER_RESULT"),
        "scenes": sorted(other.name for other in bpy.data.scenes),
        "persistent data": scene.render.use_persistent_data,
        "marked": [block.name for kind in temporaries.COLLECTIONS.values()
                   for block in getattr(bpy.data, kind) if block.get(temporaries.MARK)],
    }


def _started(scene):
    """A run of Optimize's builder, followed as the operator hands it over: (run, what it
    reported, what it submitted)."""
    reports, submitted = [], []
    builder = SubmissionBuilder(bpy.context, scene.diffrec)
    run = follow.JobRun(uuid.uuid4().hex, lambda: RecordingClient(submitted),
                        lambda _kinds, text: reports.append(text), builder)
    assert follow.jobs.follow(run)
    return run, reports, submitted


def _pump_until(condition, limit: int = 40) -> None:
    """Tick as the timer does until ``condition()``."""
    for _ in range(limit):
        if condition():
            return
        follow.pump_jobs()
    raise AssertionError("never reached")


def _artist_edit(scene, frame: int) -> None:
    """An edit of the artist's, as its own undo step."""
    scene.frame_current = frame
    bpy.ops.ed.undo_push(message=f"frame {frame}")


def _end() -> None:
    follow.jobs.detach_all()
    addon.unregister()


def check_an_undo_while_a_start_is_baked_ends_the_run_and_leaves_nothing():
    """Before: the next tick read freed memory (Blender crashed) or raised, and the copy, the
    bake's objects, material and image stayed in the file; a redo brought them back."""
    scene = _scene(baked=True)
    bpy.ops.ed.undo_push(message="the artist's scene")
    before = _file(scene)
    run, reports, submitted = _started(scene)
    try:
        _pump_until(lambda: run.builder.text.startswith("baking roughness"))
        assert _file(scene)["marked"], "the copy and the bake's temporaries exist now"
        _artist_edit(scene, 3)  # caught in an undo step with the temporaries
        _artist_edit(scene, 4)
        bpy.ops.ed.undo()
        scene = bpy.context.scene
        assert follow.pump_jobs() is None, "the run ended at its next tick"
        assert reports == [follow.UNDONE] and not submitted, (reports, submitted)
        assert scene.diffrec.status == f"not sent: {follow.UNDONE}", scene.diffrec.status
        assert _file(scene) == before, (_file(scene), before)
        bpy.ops.ed.redo()
        assert _file(bpy.context.scene) == before, "a redo brings nothing of it back"
        bpy.ops.ed.undo()
        bpy.ops.ed.undo()
        assert _file(bpy.context.scene) == before, (_file(bpy.context.scene), before)
    finally:
        _end()


def check_an_undo_between_target_renders_ends_the_run_with_the_scenes_own_settings():
    scene = _scene()
    scene.render.use_persistent_data = False
    bpy.ops.ed.undo_push(message="the artist's scene")
    before = _file(scene)
    run, reports, _submitted = _started(scene)
    try:
        _pump_until(lambda: run.builder.text == f"rendering targets 2/{VIEWS}")
        assert scene.render.use_persistent_data, "held between the renders"
        _artist_edit(scene, 3)  # caught with Persistent Data held on
        bpy.ops.ed.undo()
        assert follow.pump_jobs() is None and reports == [follow.UNDONE], reports
        assert _file(bpy.context.scene) == before, (_file(bpy.context.scene), before)
        bpy.ops.ed.redo()
        assert _file(bpy.context.scene) == before, (_file(bpy.context.scene), before)
    finally:
        _end()


def check_a_file_saved_while_a_start_is_baked_opens_as_the_artists():
    """A save between two steps writes the copy, the bake's temporaries and Persistent Data
    held on; the file opened again holds none of it."""
    scene = _scene(baked=True)
    before = _file(scene)
    run, _reports, _submitted = _started(scene)
    try:
        _pump_until(lambda: run.builder.text.startswith("baking roughness"))
        with tempfile.TemporaryDirectory() as folder:
            path = str(Path(folder) / "mid job.blend")
            bpy.ops.wm.save_as_mainfile(filepath=path, copy=True)
            bpy.ops.wm.open_mainfile(filepath=path)
            assert run.detached and not follow.jobs, "the open file's build let go"
            assert _file(bpy.context.scene) == before, (_file(bpy.context.scene), before)
    finally:
        _end()


def check_a_deleted_camera_ends_the_run_with_a_sentence_and_a_resolution_change_is_not_seen():
    scene = _scene()
    _run, reports, submitted = _started(scene)
    try:
        follow.pump_jobs()  # the world
        scene.render.resolution_x = 48  # another aspect after the press: the job keeps its own
        follow.pump_jobs()  # the first target
        bpy.data.objects.remove(bpy.data.objects[f"cam{VIEWS - 1}"])
        assert follow.pump_jobs() is None
        assert reports == [messages.GONE] and not submitted, reports
        scene.render.resolution_x = 32
        _run, reports, submitted = _started(scene)
        follow.pump_jobs()
        follow.pump_jobs()
        scene.render.resolution_x = 48
        _pump_until(lambda: submitted)
        images = submitted[0][2]["images"]
        assert images.shape[1:3] == (12, 16), images.shape  # 32x24 at 16 px, as pressed
    finally:
        _end()


def check_a_run_waits_while_the_window_shows_another_scene_and_its_result_goes_to_its_own():
    """Before: the other scene got the job's entry and status, and the job's own scene,
    shown again, never imported its result."""
    scene = _scene()
    other = bpy.data.scenes.new("Other")
    run, reports, submitted = _started(scene)
    try:
        follow.pump_jobs()  # the world
        bpy.context.window.scene = other
        status = scene.diffrec.status
        for _ in range(VIEWS + 3):
            assert follow.pump_jobs() is not None
        assert scene.diffrec.status == status and not submitted, "nothing done meanwhile"
        assert other.diffrec.status == "" and len(other.diffrec.jobs) == 0
        bpy.context.window.scene = scene
        # a timer's context holds the scene of the window last handled: another window's
        other_windows = SimpleNamespace(scene=other, window_manager=bpy.context.window_manager,
                                        temp_override=bpy.context.temp_override)
        assert run.tick(other_windows) is False
        assert scene.diffrec.status == f"rendering targets 2/{VIEWS}", "worked in its window"
        assert other.diffrec.status == ""
        _pump_until(lambda: submitted)
        assert [entry.job_id for entry in scene.diffrec.jobs] == [run.job]
        listed = other.diffrec.jobs.add()  # Refresh there lists it as another file's
        listed.job_id, listed.from_server = run.job, True
        bpy.context.window.scene = other
        follow.pump_jobs()
        assert other.diffrec.status == "" and len(other.diffrec.jobs) == 1
        assert not reports, "the job's end waits for its scene too"
        bpy.context.window.scene = scene
        _pump_until(lambda: reports)
        assert reports == ["diffrec: The test ends the job here."], reports
    finally:
        _end()


def check_a_dataset_export_cancelled_in_its_file_browser_is_quiet_and_one_ended_cleans_up():
    """Blender calls a modal operator's ``cancel`` when its file browser is cancelled (before
    ``execute``) and when a file is loaded while it runs."""
    calls = []
    operator = SimpleNamespace(_timer=None, abandon=lambda _context: calls.append("abandon"))
    pump_module.Pumped.cancel(operator, bpy.context)
    assert calls == [], "nothing ran: nothing to clean"
    window_manager = bpy.context.window_manager
    operator._timer = window_manager.event_timer_add(1.0, window=bpy.context.window)
    pump_module.Pumped.cancel(operator, bpy.context)
    assert calls == ["abandon"] and operator._timer is None


def check_a_scene_still_carrying_its_own_setting_gets_it_back_from_the_next_job():
    """A file saved mid-job and opened without the add-on on keeps Persistent Data held on and
    the scene's own setting beside it: the next job's renders give the own one back."""
    scene = _scene()
    kept = export_scene.KeptRenderData
    scene.render.use_persistent_data, scene[kept.OWN] = True, False
    try:
        with kept(scene):
            assert scene.render.use_persistent_data
        assert scene.render.use_persistent_data is False and kept.OWN not in scene
    finally:
        _end()


def check_a_sent_jobs_entry_an_undo_took_out_is_listed_again():
    """The entry is added by a tick, after Optimize's undo step: an undo took it out, and its
    result was then never imported (nothing to import it by)."""
    scene = _scene()
    bpy.ops.ed.undo_push(message="the artist's scene")
    bpy.ops.ed.undo_push(message="Optimize")
    run, reports, submitted = _started(scene)
    try:
        _pump_until(lambda: submitted)
        assert [entry.job_id for entry in scene.diffrec.jobs] == [run.job]
        _artist_edit(scene, 3)
        bpy.ops.ed.undo()
        bpy.ops.ed.undo()
        assert len(bpy.context.scene.diffrec.jobs) == 0, "the undo took it out"
        _pump_until(lambda: reports)
        entries = bpy.context.scene.diffrec.jobs
        assert [entry.job_id for entry in entries] == [run.job], list(entries)
        assert scene_updates.job_original(entries[0]).name == "Cube", "placed beside it"
    finally:
        _end()


harness.main(globals())
