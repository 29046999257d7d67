"""Optimize's pumped target renders under bpy (see harness.py): one camera view per tick with
the progress in the status line, then one export step, then the job is sent; a cancel half-way
sends nothing and leaves the scene as it was."""

import contextlib
import io
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # blender --python does not add it
import harness  # noqa: I001  (puts the repository on sys.path)
import bpy
import numpy as np
import scenes
from recording_client import RecordingClient

import addon
from addon import follow, panel, subjects, validate
from addon import pump as pump_module
from addon.submission import SubmissionBuilder

VIEWS = 3


def _scene():
    """A selected cube, VIEWS cameras around it, an HDRI world, tiny Cycles renders."""
    addon.register()
    scene = bpy.context.scene
    scenes.cube_to_optimize(scene, VIEWS, (40, 30))
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
        "persistent data": render.use_persistent_data,
    }


class _Run:
    """A JobRun of a fresh builder with a recording connection; counts the renders and
    records the scene's Persistent Data setting at each (``kept``)."""

    def __init__(self, scene):
        self.submitted, self.connections, self.renders, self.reports = [], [], [], []
        self.kept = []
        bpy.app.handlers.render_post.append(self._rendered)
        builder = SubmissionBuilder(bpy.context, scene.diffrec)
        self.run = follow.JobRun(uuid.uuid4().hex, self._connect,
                                 lambda kind, text: self.reports.append(text), builder)

    def _rendered(self, *_args):
        self.renders.append(bpy.context.scene.camera.name)
        self.kept.append(bpy.context.scene.render.use_persistent_data)

    def _connect(self):
        self.connections.append(True)
        return RecordingClient(self.submitted)

    def close(self):
        bpy.app.handlers.render_post.remove(self._rendered)


def check_one_view_per_tick_with_progress_then_the_job_is_sent():
    scene = _scene()
    scene.diffrec.gpus = 2  # sent as the job's ranks
    pump = _Run(scene)
    try:
        settings = scene.diffrec
        assert pump.run.tick(bpy.context) is False  # the world light first: no render
        assert not pump.renders and settings.status == f"rendering targets 1/{VIEWS}"
        for view in range(1, VIEWS + 1):
            assert pump.run.tick(bpy.context) is False
            assert pump.renders == [f"cam{index}" for index in range(view)], pump.renders
            if view < VIEWS:
                assert settings.status == f"rendering targets {view + 1}/{VIEWS}", settings.status
            assert abs(settings.progress - 100 * (view + 1) / (VIEWS + 2)) < 1e-4, settings.progress
            assert not pump.connections and len(settings.jobs) == 0, "nothing sent yet"
        assert settings.status == "exporting the mesh", settings.status
        assert pump.kept == [True] * VIEWS, "the render data kept through the targets"
        assert scene.render.use_persistent_data is False, "the scene's setting back after them"
        assert pump.run.tick(bpy.context) is False  # the mesh: no render
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


def check_a_lamp_lighting_the_renders_makes_auto_learn_the_light_and_the_panel_says_so():
    """Lamps are never sent, so with one lighting the targets the world is not their whole
    light: Auto learns it (from the world), and Keep HDRI's line warns; a black world beside
    a lamp is not refused, and the light is learned from grey (no black map to start from)."""
    scene = _scene()
    cube, settings = bpy.context.active_object, scene.diffrec
    bpy.ops.object.light_add(type="POINT", location=(2.0, -2.0, 3.0))
    lamp = bpy.context.active_object
    bpy.ops.object.light_add(type="SUN")
    bpy.context.active_object.data.energy = 0.0  # lights nothing: not counted
    for obj in scene.objects:
        obj.select_set(obj == cube)
    bpy.context.view_layer.objects.active = cube
    view_layer = bpy.context.view_layer
    assert subjects.render_lamps(scene, view_layer) == 1
    assert panel.light_line(settings, True, 1) == (
        "Fit learns the light, from the world (1 lamp lights the renders too)", "LIGHT")
    settings.light = "KEEP"
    assert panel.light_line(settings, True, 1) == (
        "World kept, but 1 lamp lights the renders too: set Light to Learn", "ERROR")
    settings.light = "AUTO"
    pump = _Run(scene)
    try:
        while not pump.run.tick(bpy.context, block=True):
            pass
        assert pump.submitted[0][1]["settings"]["light"] == "learn-from-envmap"
        # a black world with a lamp is a studio, not a mistake: the light is learned from grey
        scene.world.node_tree.nodes["Background"].inputs["Strength"].default_value = 0.0
        assert validate.problems(bpy.context, settings) == []
        assert panel.light_line(settings, False, 1) == (
            "Fit learns the light (1 lamp lights the renders too)", "LIGHT")
        pump.close()
        pump = _Run(scene)
        while not pump.run.tick(bpy.context, block=True):
            pass
        spec, arrays = pump.submitted[0][1:]
        assert spec["settings"]["light"] == "learn" and "envmap" not in arrays
        lamp.hide_render = True  # the world alone again, and it is dark: refused
        assert validate.problems(bpy.context, settings) == [validate.DARK_WORLD], \
            validate.problems(bpy.context, settings)
        assert subjects.render_lamps(scene, view_layer) == 0
        assert panel.light_line(settings, True, 0) == (
            "Fit under the world's light, kept (the true light of these renders)", "LIGHT")
    finally:
        pump.close()
        addon.unregister()


def check_a_world_rendering_black_behind_lit_looking_nodes_is_refused_before_any_render():
    """A Background fed black by a node passes the panel's look at the nodes; the world is
    read first, so where it is all the light the job ends with a sentence before any target
    render, the scene as it was; a lamp lighting the renders makes it a studio (learned)."""
    scene = _scene()
    nodes, links = scene.world.node_tree.nodes, scene.world.node_tree.links
    black = nodes.new("ShaderNodeRGB")
    black.outputs[0].default_value = (0.0, 0.0, 0.0, 1.0)
    links.new(black.outputs[0], nodes["Background"].inputs["Color"])
    settings = scene.diffrec
    assert validate.problems(bpy.context, settings) == [], "the nodes look lit"
    before = _snapshot(scene)
    pump = _Run(scene)
    try:
        while not pump.run.tick(bpy.context, block=True):
            pass
        assert settings.status == f"not sent: {validate.black_world(scene.world.name)}", \
            settings.status
        assert not pump.renders and not pump.connections, "refused before any render"
        assert _snapshot(scene) == before, (_snapshot(scene), before)
        pump.close()
        bpy.ops.object.light_add(type="POINT", location=(2.0, -2.0, 3.0))
        pump = _Run(scene)
        while not pump.run.tick(bpy.context, block=True):
            pass
        spec, arrays = pump.submitted[0][1:]
        assert spec["settings"]["light"] == "learn" and "envmap" not in arrays
    finally:
        pump.close()
        addon.unregister()


def check_cancel_half_way_sends_nothing_and_leaves_the_scene_as_it_was():
    scene = _scene()
    before = _snapshot(scene)
    pump = _Run(scene)
    assert follow.jobs.follow(pump.run)  # as an operator hands it over in the interface
    try:
        for _ in range(3):  # the world light, then two views
            assert follow.pump_jobs() == pump_module.TICK_S
        assert len(pump.renders) == 2
        assert _snapshot(scene) == {**before, "persistent data": True}, (_snapshot(scene), before)
        assert bpy.ops.diffrec.cancel() == {"FINISHED"}  # the panel's Cancel button
        assert follow.pump_jobs() is None, "the run ends at the next tick, and the pump with it"
        assert pump.run.job not in follow.jobs
        assert len(pump.renders) == 2, "no render after the cancel"
        assert not pump.connections and not pump.submitted, "nothing sent"
        assert _snapshot(scene) == before
        assert scene.diffrec.status == "cancelled: nothing was sent", scene.diffrec.status
    finally:
        follow.jobs.detach_all()
        pump.close()
        addon.unregister()


def check_a_cancel_during_a_render_announces_no_further_render():
    """A Cancel that comes while a target renders (here from a render handler, as the
    reviewer's script pressed it) ends the run at the next tick: neither the status line nor
    the console (headless, a line per step) announces the render after it."""
    scene = _scene()
    pump = _Run(scene)

    def cancel(*_args):
        if len(pump.renders) == 1:
            pump.run.cancel()

    bpy.app.handlers.render_post.append(cancel)
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            assert pump.run.tick(bpy.context) is False  # the world light
            assert pump.run.tick(bpy.context) is False  # the first view, cancelled meanwhile
            assert scene.diffrec.status == f"rendering targets 1/{VIEWS}", scene.diffrec.status
            assert pump.run.tick(bpy.context) is True
        assert len(pump.renders) == 1 and not pump.submitted
        assert printed.getvalue().splitlines() == [f"diffrec: rendering targets 1/{VIEWS}"], \
            printed.getvalue()
        assert scene.diffrec.status == "cancelled: nothing was sent", scene.diffrec.status
    finally:
        bpy.app.handlers.render_post.remove(cancel)
        pump.close()
        addon.unregister()


def check_a_budget_the_reference_is_within_says_it_is_copied_not_decimated():
    scene = _scene()  # a cube: 12 triangles
    settings = scene.diffrec
    try:
        for budget, wanted in ((100, "copying the reference and unwrapping the copy (Smart "
                                     "UV Project)"), (6, "decimating the reference")):
            settings.triangles = budget  # Start From Auto: a baked copy
            builder = SubmissionBuilder(bpy.context, settings)
            try:
                for _ in range(1 + VIEWS):  # the world light, then the targets
                    assert builder.step(bpy.context) is False
                assert builder.text == wanted, (budget, builder.text)
            finally:
                builder.close()
    finally:
        addon.unregister()


def _until_pump_stops(deadline_s: float = 10.0) -> None:
    """Call the pump as its timer would until it asks for no more ticks."""
    deadline = time.monotonic() + deadline_s
    while follow.pump_jobs() is not None:
        assert time.monotonic() < deadline, "the pump never stopped"
        time.sleep(0.05)


def check_one_timer_pumps_two_jobs_and_cancel_reaches_one():
    """Two Optimize runs started as in the interface: one timer (``follow.pump_jobs``) ticks
    both, a view of each per tick; the Cancel button of one ends it with nothing sent while the
    other goes on to its submission; the timer asks for no more ticks once both ended."""
    scene = _scene()
    before = _snapshot(scene)
    first, second = _Run(scene), _Run(scene)
    interface = pump_module.blocking
    pump_module.blocking = lambda context: False  # as in the interface: a window, a timer
    try:
        assert follow.start(bpy.context, first.run) and follow.start(bpy.context, second.run)
        assert not follow.start(bpy.context, first.run), "a job is followed once"
        assert bpy.app.timers.is_registered(follow.pump_jobs), "the one timer"
        assert len(first.renders) == 0 and len(follow.jobs) == 2, "nothing ticked yet"
        assert follow.pump_jobs() == pump_module.TICK_S
        assert (first.run.builder.done, second.run.builder.done) == (1, 1)
        assert bpy.ops.diffrec.cancel(job_id=first.run.job) == {"FINISHED"}
        assert follow.pump_jobs() == pump_module.TICK_S
        assert first.run.job not in follow.jobs and second.run.job in follow.jobs
        assert (first.run.builder.done, second.run.builder.done) == (1, 2)
        assert not first.connections, "the cancelled one sent nothing"
        _until_pump_stops()
        assert not follow.jobs
        assert len(second.submitted) == 1 and second.submitted[0][0] == second.run.job
        assert [entry.job_id for entry in scene.diffrec.jobs] == [second.run.job]
        assert _snapshot(scene) == {**before, "jobs": 1}
    finally:
        pump_module.blocking = interface
        if bpy.app.timers.is_registered(follow.pump_jobs):
            bpy.app.timers.unregister(follow.pump_jobs)
        follow.jobs.detach_all()
        first.close()
        second.close()
        addon.unregister()


def check_a_selected_start_beside_the_reference_is_baked_and_rendered_alone_after_the_targets():
    """The cube the start, a small sphere inside it the reference: the targets show the sphere
    (the start hidden), the sphere is baked onto a copy of the cube, and then one tick per
    camera renders that copy alone (the sphere hidden), sent as start_images at the targets'
    size with the maps it wears; every render flag is back afterwards."""
    scene = _scene()
    cube = bpy.context.active_object
    bpy.ops.mesh.primitive_uv_sphere_add(radius=0.3)
    sphere = bpy.context.active_object
    for obj in scene.objects:
        obj.select_set(obj == cube)
    bpy.context.view_layer.objects.active = cube
    scene.diffrec.reference_object = sphere
    scene.diffrec.texture_resolution = "256"
    flags = {obj.name: obj.hide_render for obj in scene.objects}
    pump = _Run(scene)
    try:
        for _ in range(1 + VIEWS):  # the world light, then the targets
            assert pump.run.tick(bpy.context) is False
        texts = []
        while not scene.diffrec.status.startswith("rendering the start"):
            texts.append(scene.diffrec.status)
            assert len(texts) < 20, texts
            assert pump.run.tick(bpy.context) is False
        assert texts[0] == "copying the selected mesh: its UVs and shading kept"
        assert any(text.startswith("baking") for text in texts), texts
        for _ in range(VIEWS):
            assert pump.run.tick(bpy.context) is False
        assert scene.diffrec.status == "exporting the mesh", scene.diffrec.status
        assert pump.renders[-2 * VIEWS:] == [f"cam{index}" for index in range(VIEWS)] * 2
        assert pump.kept[-2 * VIEWS:] == [True] * (2 * VIEWS), pump.kept
        assert pump.run.tick(bpy.context) is False and pump.run.tick(bpy.context, True) is True
        (_job, _spec, arrays), = pump.submitted
        targets, start = arrays["images"], arrays["start_images"]
        assert start.shape == targets.shape == (VIEWS, 12, 16, 4), start.shape
        assert arrays["start_kd"].shape == (256, 256, 3), arrays["start_kd"].shape
        assert "start_ks" in arrays and "start_normal" in arrays, sorted(arrays)
        # the cube, 1 across, covers far more than the sphere, 0.6 across, from every camera
        covered = start[..., 3].sum(axis=(1, 2)), targets[..., 3].sum(axis=(1, 2))
        assert np.all(covered[0] > 2 * covered[1]), covered
        assert {obj.name: obj.hide_render for obj in scene.objects} == flags
        assert scene.render.use_persistent_data is False
    finally:
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
        assert pump.run.builder.text == "reading the world light"
        assert pump.run.tick(bpy.context) is False
        assert scene.diffrec.status == "reading targets", scene.diffrec.status
        assert pump.run.tick(bpy.context) is False
        assert scene.diffrec.status == "exporting the mesh", scene.diffrec.status
        assert pump.run.tick(bpy.context) is False and pump.run.tick(bpy.context, True) is True
        assert not pump.renders, pump.renders
        (_job, _spec, arrays), = pump.submitted
        assert arrays["images"].shape == (VIEWS, 10, 20, 4), arrays["images"].shape
        assert arrays["intrinsics"][0, 2] == 10.0, "cx: the photos' size, not the render's"
    finally:
        pump.close()
        addon.unregister()


harness.main(globals())
