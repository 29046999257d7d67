"""Optimize's pumped target renders under bpy (see harness.py): one camera view per tick with
the progress in the status line, then one export step, then the job is sent; a cancel half-way
sends nothing and leaves the scene as it was."""

import sys
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # blender --python does not add it
import harness  # noqa: I001  (puts the repository on sys.path)
import bpy
import numpy as np
import scenes

import addon
from addon import follow
from addon.submission import SubmissionBuilder

VIEWS = 3


class _Client:
    """Records what is submitted, then ends the session (attach fails: no server here)."""

    def __init__(self, submitted: list):
        self.submitted = submitted

    def __enter__(self):
        return self

    def __exit__(self, *_exc):
        return False

    def submit(self, job, spec, arrays, on_progress=None):
        self.submitted.append((job, spec, dict(arrays)))
        return {"state": "queued"}

    def attach(self, job):
        raise ConnectionError("the test ends the job here")


def _scene():
    """A selected cube, VIEWS cameras around it, an HDRI world, tiny Cycles renders."""
    addon.register()
    scene = bpy.context.scene
    scene.render.engine = "CYCLES"
    scene.cycles.device, scene.cycles.samples = "CPU", 1
    scene.render.resolution_x, scene.render.resolution_y = 40, 30
    bpy.ops.mesh.primitive_cube_add(size=1.0)
    cube = bpy.context.active_object
    scenes.cameras_around(scene, VIEWS, radius=5.0, height=1.0)
    scenes.sky_world(scene, np.ones(4), width=8)
    cube.select_set(True)
    bpy.context.view_layer.objects.active = cube
    scene.diffrec.train_resolution = 16
    return scene


def _snapshot(scene) -> dict:
    """What a render could leave changed, and what a job adds."""
    render, image_settings = scene.render, scene.render.image_settings
    return {
        "camera": scene.camera.name if scene.camera else None,
        "render": (render.resolution_x, render.resolution_y, render.resolution_percentage,
                   render.filepath, render.film_transparent),
        "output": (image_settings.file_format, image_settings.color_depth,
                   image_settings.color_mode),
        "objects": sorted(obj.name for obj in bpy.data.objects),
        "images": sorted(image.name for image in bpy.data.images
                         if image.type != "RENDER_RESULT"),
        "meshes": sorted(mesh.name for mesh in bpy.data.meshes),
        "jobs": len(scene.diffrec.jobs),
    }


class _Run:
    """A JobRun of a fresh builder with a recording connection; counts the renders."""

    def __init__(self, scene):
        self.submitted, self.connections, self.renders, self.reports = [], [], [], []
        bpy.app.handlers.render_post.append(self._rendered)
        builder = SubmissionBuilder(bpy.context, scene.diffrec)
        self.run = follow.JobRun(uuid.uuid4().hex, self._connect,
                                 lambda kind, text: self.reports.append(text), builder)

    def _rendered(self, *_args):
        self.renders.append(bpy.context.scene.camera.name)

    def _connect(self):
        self.connections.append(True)
        return _Client(self.submitted)

    def close(self):
        bpy.app.handlers.render_post.remove(self._rendered)


def check_one_view_per_tick_with_progress_then_the_job_is_sent():
    scene = _scene()
    scene.diffrec.gpus = 2  # sent as the job's ranks
    pump = _Run(scene)
    try:
        settings = scene.diffrec
        for view in range(1, VIEWS + 1):
            assert pump.run.tick(bpy.context) is False
            assert pump.renders == [f"cam{index}" for index in range(view)], pump.renders
            if view < VIEWS:
                assert settings.status == f"rendering targets {view + 1}/{VIEWS}", settings.status
            assert abs(settings.progress - 100 * view / (VIEWS + 1)) < 1e-4, settings.progress
            assert not pump.connections and len(settings.jobs) == 0, "nothing sent yet"
        assert settings.status == "exporting mesh and light", settings.status
        assert pump.run.tick(bpy.context) is False  # the mesh and the world: no render
        assert len(pump.renders) == VIEWS  # the session starts now, on its worker thread
        assert settings.status == "submitting" and settings.jobs[-1].job_id == pump.run.job
        assert settings.jobs[-1].object_name == "Cube"
        assert pump.run.tick(bpy.context, block=True) is True  # sent, then the client fails
        assert len(pump.submitted) == 1, pump.submitted
        job, spec, arrays = pump.submitted[0]
        assert job == pump.run.job and spec["task"] == "optimize"
        assert spec["settings"]["light"] == "fixed"  # Auto: the renders' world is the true light
        assert spec["settings"]["ranks"] == 2
        assert arrays["images"].shape == (VIEWS, 12, 16, 4), arrays["images"].shape
        assert arrays["cameras"].shape == (VIEWS, 4, 4) and arrays["intrinsics"].shape == (
            VIEWS, 6)
        assert {"vertices", "faces", "envmap"} <= arrays.keys()
        assert settings.status == "The test ends the job here.", settings.status  # no class name
    finally:
        pump.close()
        addon.unregister()


def check_cancel_half_way_sends_nothing_and_leaves_the_scene_as_it_was():
    scene = _scene()
    before = _snapshot(scene)
    pump = _Run(scene)
    follow.running[pump.run.job] = pump.run  # as the modal operator registers it
    try:
        assert pump.run.tick(bpy.context) is False
        assert pump.run.tick(bpy.context) is False
        assert len(pump.renders) == 2
        assert _snapshot(scene) == before, (_snapshot(scene), before)
        assert bpy.ops.diffrec.cancel() == {"FINISHED"}  # the panel's Cancel button
        assert pump.run.tick(bpy.context) is True, "the run ends at the next tick"
        assert len(pump.renders) == 2, "no render after the cancel"
        assert not pump.connections and not pump.submitted, "nothing sent"
        assert _snapshot(scene) == before
        assert scene.diffrec.status == "cancelled: nothing was sent", scene.diffrec.status
    finally:
        follow.running.pop(pump.run.job, None)
        pump.close()
        addon.unregister()


def check_the_modal_operator_ticks_on_timer_events_and_stops_on_esc():
    """The operators' modal glue, driven by hand (no event loop under the bpy module): a
    render per TIMER event, ESC cancels, the next TIMER ends the operator as cancelled."""
    from types import SimpleNamespace

    from addon import job_operators

    scene = _scene()
    before = _snapshot(scene)
    pump = _Run(scene)
    removed = []
    operator = job_operators._FollowsJob()
    operator._run, operator._timer = pump.run, "timer"
    follow.running[pump.run.job] = pump.run
    context = SimpleNamespace(scene=scene, area=None, window_manager=SimpleNamespace(
        event_timer_remove=removed.append))
    try:
        timer, esc = SimpleNamespace(type="TIMER"), SimpleNamespace(type="ESC")
        assert operator.modal(context, timer) == {"PASS_THROUGH"}
        assert operator.modal(context, SimpleNamespace(type="MOUSEMOVE")) == {"PASS_THROUGH"}
        assert len(pump.renders) == 1, "a render per timer event only"
        assert operator.modal(context, esc) == {"PASS_THROUGH"}
        assert scene.diffrec.status == "cancelling"
        assert operator.modal(context, timer) == {"CANCELLED"}
        assert removed == ["timer"] and pump.run.job not in follow.running
        assert len(pump.renders) == 1 and not pump.connections
        assert _snapshot(scene) == before
    finally:
        follow.running.pop(pump.run.job, None)
        pump.close()
        addon.unregister()


def check_camera_images_are_read_in_one_step_without_rendering():
    scene = _scene()
    scene.diffrec.target_source = "CAMERA_IMAGES"
    for index in range(VIEWS):
        image = bpy.data.images.new(f"photo{index}", 20, 10)
        background = bpy.data.objects[f"cam{index}"].data.background_images.new()
        background.image = image
    pump = _Run(scene)
    try:
        assert scene.diffrec.status == "" and pump.run.builder.text == "reading targets"
        assert pump.run.tick(bpy.context) is False
        assert scene.diffrec.status == "exporting mesh and light", scene.diffrec.status
        assert pump.run.tick(bpy.context) is False and pump.run.tick(bpy.context, True) is True
        assert not pump.renders, pump.renders
        (_job, _spec, arrays), = pump.submitted
        assert arrays["images"].shape == (VIEWS, 10, 20, 4), arrays["images"].shape
        assert arrays["intrinsics"][0, 2] == 10.0, "cx: the photos' size, not the render's"
    finally:
        pump.close()
        addon.unregister()


harness.main(globals())
