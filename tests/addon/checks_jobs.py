"""The artist's job queue and progress under bpy (see harness.py): progress sentences, the live
preview in the panel, the pre-submit estimate, a failed submit, cancel and resume, reopening a
file, Custom settings as the server runs them, and an import that is never doubled.

The checks named ``check_live_*`` need DIFFREC_SERVER (tcp://127.0.0.1:PORT of a running
``diffrec serve``, started by test_job_queue.py); the others need no server.
"""

import contextlib
import json
import os
import sys
import tempfile
import uuid
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).parent))  # blender --python does not add it
import harness  # noqa: I001  (puts the repository on sys.path)
import bpy
import numpy as np
import scenes

from addon import (
    backend_link,
    estimate,
    export_scene,
    follow,
    job_operators,
    pump,
    scene_updates,
    submission,
)
from addon.core import job_session, panel_fields
from addon.core.wire import protocol

REPORTS = []


def _report(kinds, message):
    REPORTS.append((sorted(kinds), message))


def _enable(endpoint=None):
    import addon_utils

    addon_utils.enable("addon", default_set=True)
    preferences = bpy.context.preferences.addons["addon"].preferences
    preferences.endpoint = endpoint or os.environ["DIFFREC_SERVER"]
    preferences.timeout = 5.0
    REPORTS.clear()


def _disable():
    import addon_utils

    addon_utils.disable("addon", default_set=True)


def _update(kind, fields, arrays=None):
    """An update as the job session posts it: the event typed as the protocol reads it."""
    return protocol().events.parse(kind, fields, arrays)


@contextlib.contextmanager
def _selected_cube_seen_by_four_cameras():
    """A selected cube, four cameras around it, the add-on on for the block: its settings."""
    scene = bpy.context.scene
    bpy.ops.mesh.primitive_cube_add()
    bpy.context.active_object.select_set(True)
    scenes.cameras_around(scene, 4, radius=4.0, height=1.0)
    import addon

    addon.register()
    try:
        yield scene.diffrec
    finally:
        addon.unregister()


def _new_entry(job, state="submitting", name="ball"):
    entry = bpy.context.scene.diffrec.jobs.add()
    entry.job_id, entry.state, entry.object_name, entry.mode = job, state, name, "materials"
    return entry


# -- without a server --------------------------------------------------------------------------


def check_progress_says_pass_of_passes_and_the_whole_jobs_time_left():
    _enable("tcp://127.0.0.1:1")
    try:
        settings = bpy.context.scene.diffrec
        fields = {"pass": "pass1", "pass_index": 0, "pass_number": 1, "passes": 2,
                  "iteration": 120, "iterations": 300, "losses": {"total": 0.1}, "psnr": 27.43,
                  "elapsed_s": 60.0, "eta_s": 90.0, "job_eta_s": 190.0}
        scene_updates.apply_update(bpy.context, "j", _update("progress", fields), _report)
        assert settings.status == "Pass 1 of 2 · 120/300 · 27.4 dB · about 3 min left", (
            settings.status)
        assert abs(settings.progress - 20.0) < 1e-4, settings.progress  # of the whole job
        # a one-pass run never says "pass2"
        fields.update({"pass": "pass2", "pass_index": 1, "pass_number": 1, "passes": 1,
                       "iteration": 10, "iterations": 20, "psnr": 30.0, "job_eta_s": 30.0})
        scene_updates.apply_update(bpy.context, "j", _update("progress", fields), _report)
        assert settings.status == "10/20 · 30.0 dB · less than a minute left", settings.status
        # the pause between passes says what the job does
        stage = {"level": "info", "message": "unwrapping the surface…", "stage": "unwrapping"}
        scene_updates.apply_update(bpy.context, "j", _update("log", stage), _report)
        assert settings.status == "unwrapping the surface…" and not REPORTS, REPORTS
        # a warning (the unwrap's fallback layout) is reported as one
        warning = {"level": "warning", "message": "the unwrap fell back to a grid layout"}
        scene_updates.apply_update(bpy.context, "j", _update("log", warning), _report)
        assert REPORTS[-1][0] == ["WARNING"], REPORTS
    finally:
        _disable()


def check_uploading_shows_one_percentage():
    _enable("tcp://127.0.0.1:1")
    try:
        settings = bpy.context.scene.diffrec
        update = job_session.Update("uploading", {"done": 30, "total": 120})
        scene_updates.apply_update(bpy.context, "j", update, _report)
        assert settings.status == "uploading 25%" and settings.progress == 25.0
    finally:
        _disable()


def check_the_live_preview_is_in_the_panel_at_a_readable_size():
    render = np.zeros((18, 64, 3), np.float32)  # a wide, low preview, as a 64x18 job sends
    render[0, 0] = 1.0
    target = np.full((18, 64, 3), 0.5, np.float32)
    scene_updates.update_preview(render, target)
    preview = scene_updates.panel_preview()
    assert preview is not None
    width, height = preview.image_size
    assert (width, height) == (128 * 2, 18 * 2), (width, height)  # scaled to ~256 px wide
    shown = np.empty(width * height * 4, np.float32)
    preview.image_pixels_float.foreach_get(shown)
    shown = shown.reshape(height, width, 4)[::-1]  # rows top-down
    assert np.allclose(shown[:2, :2, :3], 1.0, atol=0.01)  # the top-left pixel, doubled
    assert np.allclose(shown[0, 128:, 0], 0.735, atol=0.01)  # linear 0.5 shown as sRGB
    scene_updates.release_panel_preview()
    assert scene_updates.panel_preview() is None


def check_the_estimate_warns_of_a_million_triangles_and_of_hours():
    scene = bpy.context.scene
    bpy.ops.mesh.primitive_grid_add(x_subdivisions=810, y_subdivisions=810, size=2.0)
    grid = bpy.context.active_object
    grid.select_set(True)
    scenes.cameras_around(scene, 8, radius=4.0, height=1.0)
    import addon

    addon.register()
    try:
        settings = scene.diffrec
        settings.preset = "PREVIEW"
        guess = estimate.for_scene(bpy.context, settings)
        assert guess.triangles == 2 * 810 * 810 and guess.views == 8, guess
        assert guess.upload_bytes > guess.triangles * 36, guess  # the corners alone
        (warning,) = guess.warnings()
        assert "1,312,200 triangles" in warning, warning
        # each iteration rasterizes the triangles too: about a second here, not the pixels' 0.1
        per_view = estimate.CALIBRATION_S_PER_TRIANGLE * guess.triangles
        assert guess.longest_seconds > settings.iterations * settings.batch * per_view, guess
        settings.triangles, settings.start_from = 1000, "BAKED"  # decimated and baked here
        baked = estimate.for_scene(bpy.context, settings)
        assert baked.triangles == 1000 and baked.seconds < guess.seconds / 5, (baked, guess)
        (warning,) = baked.warnings()
        assert warning.startswith("1,312,200 triangles to decimate and bake here first"), warning
        maps = 36 * int(settings.texture_resolution) ** 2  # three float32 RGB start textures
        assert baked.upload_bytes > maps, baked
        settings.start_from = "SELECTED"  # sent whole: the backend decimates it to 1000
        whole = estimate.for_scene(bpy.context, settings)
        assert whole.triangles == guess.triangles, whole  # what is sent
        assert whole.upload_bytes == guess.upload_bytes, (whole, guess)
        assert whole.seconds < guess.seconds / 5, (whole, guess)  # what is fitted
        (warning,) = whole.warnings()
        assert warning.startswith("1,312,200 triangles to upload (the server decimates them "
                                  "to 1,000)"), warning
        settings.triangles = 0
        settings.preset = "HIGH"
        assert any("lower the iterations" in w for w in
                   estimate.for_scene(bpy.context, settings).warnings())
        settings.seconds_per_megapixel = 1e-6  # the server measured a fast GPU
        fast = estimate.for_scene(bpy.context, settings)
        assert fast.measured and fast.seconds < 60 and len(fast.warnings()) == 1
        grid.data.uv_layers.remove(grid.data.uv_layers[0])  # a sculpt has none: the server unwraps
        assert any(w.startswith("1,312,200 triangles without a UV map") for w in
                   estimate.for_scene(bpy.context, settings).warnings())
        settings.triangles, settings.start_from = 1000, "BAKED"  # the copy gets its own UVs
        assert not any("UV map" in w for w in estimate.for_scene(bpy.context, settings).warnings())
        bpy.ops.mesh.primitive_cube_add(location=(4.0, 0.0, 0.0))  # the artist's own low-poly
        settings.reference_object, settings.triangles, settings.start_from = grid, 0, "SELECTED"
        own = estimate.for_scene(bpy.context, settings)
        assert own.baked == 2 * 810 * 810 and own.triangles == 12, own
        (warning,) = own.warnings()  # the grid is baked from, never decimated
        assert warning.startswith("1,312,200 triangles to bake from here first"), warning
    finally:
        addon.unregister()


def check_the_estimate_counts_the_bake_and_start_renders_of_a_start_beside_the_reference():
    """A selected start beside another reference is baked from it and rendered from the
    target cameras too: Blender's work names both, the upload holds the maps and a second set
    of images at the targets' size; the reference itself as the start is neither."""
    scene = bpy.context.scene
    bpy.ops.mesh.primitive_uv_sphere_add()
    sphere = bpy.context.active_object
    bpy.ops.mesh.primitive_cube_add()
    cube = bpy.context.active_object
    cube.select_set(True)
    scenes.cameras_around(scene, 4, radius=4.0, height=1.0)
    import addon

    addon.register()
    try:
        settings = scene.diffrec
        settings.preset, settings.mode = "PREVIEW", "materials"
        itself = estimate.for_scene(bpy.context, settings)
        settings.reference_object = sphere
        beside = estimate.for_scene(bpy.context, settings)
        assert beside.triangles == itself.triangles == 12, (beside, itself)
        assert itself.baked is None and not itself.start_renders, itself
        assert beside.baked == len(sphere.data.loops) - 2 * len(sphere.data.polygons), beside
        assert beside.local_work().endswith(f"a bake and {beside.views} start renders")
        images = itself.views * itself.width * itself.height * 16
        maps = int(settings.texture_resolution) ** 2 * 36
        assert beside.upload_bytes - itself.upload_bytes == images + maps, (beside, itself)
    finally:
        addon.unregister()


def check_the_estimate_counts_the_worlds_own_hdri():
    """An HDRI world is sent at its own size (before: always counted at the baked 512 x 256)."""
    with _selected_cube_seen_by_four_cameras() as settings:
        scene = bpy.context.scene
        scene.world = None
        unlit = estimate.for_scene(bpy.context, settings)
        scenes.sky_world(scene, np.ones(300), width=600)
        lit = estimate.for_scene(bpy.context, settings)
        assert lit.upload_bytes - unlit.upload_bytes == 600 * 300 * 12, (lit, unlit)


def _mip_cost(iterations: int) -> float:
    """The fit of the mip levels after a textured pass of at most ``iterations``, in
    rasterized iterations: the backend's mip_iterations steps, never more than the pass's."""
    steps = protocol().settings.FIELDS["mip_iterations"].default
    assert steps > 0
    return min(steps, iterations) * estimate.MIP_STEP_COST


def check_a_baked_start_is_estimated_at_its_shorter_pass():
    """Materials or refine from a baked copy runs at most given_start_iterations, where the
    stopping rule would run a selected start's pass on: the estimate counts that many, at
    the same speed, and the fit of the mip levels after it, never more steps than the pass
    has. What Blender renders and bakes first is named beside the time."""
    with _selected_cube_seen_by_four_cameras() as settings:
        for mode in ("materials", "refine"):
            settings.preset, settings.mode = "PREVIEW", mode
            settings.start_from = "SELECTED"
            selected = estimate.for_scene(bpy.context, settings)
            settings.start_from = "BAKED"
            baked = estimate.for_scene(bpy.context, settings)
            wire = protocol().settings
            cap = wire.FIELDS["given_start_iterations"].default
            assert 0 < cap < wire.expected_iterations(settings.iterations,
                                                      wire.PRESETS["preview"]["plateau_window"])
            assert baked.seconds == baked.longest_seconds, "the cap before the rule's window"
            per_iteration = selected.longest_seconds / (
                settings.iterations + _mip_cost(settings.iterations))
            assert abs(baked.seconds - (cap + _mip_cost(cap)) * per_iteration) < \
                1e-6 * baked.seconds, (mode, baked, selected)
            assert baked.lines()[-1] == ("first, in Blender: 4 target renders, a bake and 4 "
                                         "start renders (Cycles, not counted above)"), baked
            assert selected.lines()[-1] == ("first, in Blender: 4 target renders (Cycles, not "
                                            "counted above)"), selected
        settings.target_source = "CAMERA_IMAGES"  # photos: nothing rendered here
        assert estimate.for_scene(bpy.context, settings).lines()[-1] == (
            "first, in Blender: a bake (Cycles, not counted above)")
        settings.start_from = "SELECTED"
        assert not any("Blender" in line
                       for line in estimate.for_scene(bpy.context, settings).lines())


def check_path_traced_shading_adds_its_pass_to_the_estimate_not_to_the_learned_speed():
    with _selected_cube_seen_by_four_cameras() as settings:
        settings.preset, settings.mode = "PREVIEW", "materials"
        fast = estimate.for_scene(bpy.context, settings)
        settings.shading = "path-traced"
        traced = estimate.for_scene(bpy.context, settings)
        wire = protocol().settings
        assert settings.iterations == wire.ONE_PASS_ITERATIONS["preview"], settings.iterations
        # the stopping rule's typical end, not the 1000 at most; the most said beside it
        expected = wire.expected_iterations(settings.iterations,
                                            wire.PRESETS["preview"]["plateau_window"])
        assert expected < settings.iterations
        mips = _mip_cost(settings.iterations)  # after the pass, however long it ran
        assert abs(fast.longest_seconds * (expected + mips)
                   - fast.seconds * (settings.iterations + mips)) < 1e-6
        assert fast.lines()[2].startswith("up to about"), fast.lines()
        settings.mode = "reconstruct"  # two passes of the preset's 300, which the rule seldom ends
        assert settings.iterations == wire.PRESETS["preview"]["iterations"]
        both = estimate.for_scene(bpy.context, settings)
        pixels = fast.seconds / (expected + mips) - (  # reconstruct rasterizes no start mesh
            estimate.CALIBRATION_S_PER_TRIANGLE * settings.batch * fast.triangles)
        assert abs(both.seconds - (2 * 300 + _mip_cost(300)) * pixels) < 1e-6 * both.seconds, \
            (both, fast)
        assert both.longest_seconds == both.seconds and not any(
            line.startswith("up to") for line in both.lines()), both.lines()
        settings.mode = "materials"
        rasterized_iteration = fast.seconds / (expected + mips)
        path_pass = wire.FIELDS["path_iterations"].default * wire.PATH_TRACED_COST
        assert abs(traced.seconds - fast.seconds - path_pass * rasterized_iteration) < 1e-6 * (
            traced.seconds), (fast, traced)
        assert traced.seconds > 1.5 * fast.seconds, (fast, traced)  # no small addition
        # the speed learned for the estimate is the rasterized pass's
        entry = _new_entry("speed")
        entry.megapixels = 0.5
        fields = {"pass_index": 1, "pass_number": 1, "passes": 2, "iteration": 10,
                  "iterations": 20, "losses": {}, "elapsed_s": 10.0, "eta_s": 10.0}
        scene_updates.learn_speed(settings, entry, _update(
            "progress", {**fields, "pass": "textures"}))
        assert abs(settings.seconds_per_megapixel - 2.0) < 1e-6  # 1 s per iteration / 0.5 MP
        scene_updates.learn_speed(settings, entry, _update(
            "progress", {**fields, "pass": "path-traced", "eta_s": 90.0}))
        assert abs(settings.seconds_per_megapixel - 2.0) < 1e-6, settings.seconds_per_megapixel


def check_a_submit_that_never_reaches_the_server_ends_failed_and_is_removed():
    _enable("tcp://127.0.0.1:1")
    try:
        dead = f"tcp://127.0.0.1:{_free_port()}"
        job = uuid.uuid4().hex
        entry = _new_entry(job)

        def connect():
            return protocol().Client(dead, timeout=0.3, retry_for=0.3)

        run = follow.JobRun(job, connect, _report, submission=job_session.Submission(
            {"task": "fit_texture"}, {"images": np.zeros((2, 4, 4, 3), np.float32)}))
        follow.start(bpy.context, run)
        assert entry.state == "failed" and entry.message, (entry.state, entry.message)
        assert not entry.on_server
        assert bpy.ops.diffrec.remove_job(job_id=job) == {"FINISHED"}
        assert scene_updates.job_entry(bpy.context.scene, job) is None
        for operator in (bpy.ops.diffrec.remove_job, bpy.ops.diffrec.resume_job):
            try:  # an entry that is gone: reported, nothing done
                operator(job_id=job)
            except RuntimeError as exc:
                assert "is not in this file's list" in str(exc), exc
            else:
                raise AssertionError(f"{operator} ran on a job not in the list")
    finally:
        _disable()


def check_resume_of_a_job_never_sent_keeps_its_entry_until_the_new_one_is_submitted():
    """Resume on a job the server never had presses Optimize for its object. Its entry went
    before Optimize's checks: a refusal lost it; now the new job's submission replaces it.
    And Optimize started a second job while one was followed in the interface (the panel
    greys the button; F3 and scripts did not); headless, where nothing ticks a followed job
    (a file saved while one ran follows it again), Optimize still runs."""
    _enable("tcp://127.0.0.1:1")
    held = (follow.jobs, pump.blocking, backend_link.check, follow.start,
            job_session.JobSession)
    try:
        bpy.ops.mesh.primitive_cube_add()
        cube = bpy.context.active_object
        job = uuid.uuid4().hex
        entry = _new_entry(job, state="failed", name=cube.name)
        entry.original = cube
        for camera in [obj for obj in bpy.context.scene.objects if obj.type == "CAMERA"]:
            bpy.data.objects.remove(camera)  # Optimize refuses: no cameras
        try:
            bpy.ops.diffrec.resume_job(job_id=job)
        except RuntimeError as exc:
            assert "The scene has no cameras" in str(exc), exc
        else:
            raise AssertionError("Optimize ran without cameras")
        assert scene_updates.job_entry(bpy.context.scene, job) is not None, "the entry stays"

        follow.jobs = ["a followed job"]  # as the controller is while it follows one
        assert bpy.ops.diffrec.optimize.poll(), "headless: allowed"
        pump.blocking = lambda context: False  # in the interface, where a timer ticks it
        assert not bpy.ops.diffrec.optimize.poll()
        try:
            bpy.ops.diffrec.resume_job(job_id=job)
        except RuntimeError as exc:
            assert job_operators.BUSY in str(exc), exc
        else:
            raise AssertionError("a second job started while one is followed")
        follow.jobs, pump.blocking = held[:2]
        assert scene_updates.job_entry(bpy.context.scene, job) is not None

        scenes.cameras_around(bpy.context.scene, 4, radius=4.0, height=1.0)
        scenes.sky_world(bpy.context.scene, np.ones(4), width=8)
        runs = []
        backend_link.check = lambda context: True  # answering
        follow.start = lambda context, run: runs.append(run) or SimpleNamespace(followed=True)
        assert bpy.ops.diffrec.resume_job(job_id=job) == {"FINISHED"}
        job_session.JobSession = lambda *args, **kwargs: SimpleNamespace(
            start=lambda: None)  # no server: the submission goes nowhere
        built = job_session.Submission({"task": "optimize", "settings": {"light": "fixed"}}, {})
        runs[0]._submit(bpy.context.scene.diffrec, built)  # as its finished build does
        listed = [e.job_id for e in bpy.context.scene.diffrec.jobs]
        assert listed == [runs[0].job] and runs[0].job != job, listed
    finally:
        (follow.jobs, pump.blocking, backend_link.check, follow.start,
         job_session.JobSession) = held
        _disable()


def check_the_live_mesh_leaves_nothing_when_deleted_or_turned_off_mid_job():
    """An artist who deleted the live mesh object while the job ran was left its mesh; one
    who turned Live mesh off kept the wireframe until the job ended."""
    _enable("tcp://127.0.0.1:1")
    try:
        triangle = (np.eye(3), np.array([[0, 1, 2]]))
        obj = scene_updates.update_live_mesh(bpy.context, *triangle)
        bpy.data.objects.remove(obj)  # the artist deletes it; its mesh stays in the file
        scene_updates.remove_live_mesh()  # as the job's end does
        assert not [m for m in bpy.data.meshes if m.name.startswith(scene_updates.LIVE_MESH)]
        scene_updates.update_live_mesh(bpy.context, *triangle)
        bpy.context.scene.diffrec.live_mesh = False
        preview = _update("preview", {"iteration": 5, "pass": "textures", "pass_number": 1,
                                      "passes": 1},
                          {"render": np.zeros((4, 4, 3), np.float32),
                           "target": np.zeros((4, 4, 3), np.float32),
                           "vertices": np.eye(3, dtype=np.float32),
                           "faces": np.array([[0, 1, 2]], np.int32)})
        scene_updates.apply_update(bpy.context, "job", preview, _report)
        assert scene_updates.LIVE_MESH not in bpy.data.objects
    finally:
        _disable()


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class _Layout:
    """Stands in for a panel's UILayout (none exists headless): records the labels and the
    operators drawn, and checks that each property drawn exists."""

    def __init__(self, drawn):
        self.drawn = drawn

    def __getattr__(self, name):
        if name in ("row", "column", "box"):
            return lambda *args, **kwargs: self
        return lambda *args, **kwargs: None

    def prop(self, data, name, **_kwargs):
        getattr(data, name)  # an AttributeError names a property that does not exist

    def label(self, text="", **_kwargs):
        self.drawn.append(text)

    def progress(self, factor, text):
        self.drawn.append(text)

    def operator(self, idname, **_kwargs):
        category, name = idname.split(".")
        assert hasattr(getattr(bpy.ops, category), name), idname
        self.drawn.append(idname)
        return type("Properties", (), {})()


def check_the_panels_draw_every_job_state_with_its_buttons():
    from types import SimpleNamespace

    import addon
    from addon import panel

    addon.register()
    try:
        scene = bpy.context.scene
        bpy.ops.mesh.primitive_cube_add()
        scenes.cameras_around(scene, 2, radius=4.0, height=1.0)
        for state in ("submitting", "queued", "running", "done", "failed", "cancelled"):
            entry = _new_entry(f"job-{state}", state=state, name=f"cube {state}")
            entry.created = 1.0
        scene.diffrec.jobs[-1].message = "the job was cancelled"
        scene.diffrec.jobs[0].from_server = True
        drawn = []
        for panel_class in (panel.DIFFREC_PT_main, panel.DIFFREC_PT_jobs):
            panel_class.draw(SimpleNamespace(layout=_Layout(drawn)), bpy.context)
        assert "Others on the server" in drawn and "the job was cancelled" in drawn, drawn
        assert any("triangles" in text for text in drawn), drawn  # the estimate
        for button in ("diffrec.resume_job", "diffrec.attach", "diffrec.remove_job",
                       "diffrec.refresh_jobs", "diffrec.clear_finished"):
            assert button in drawn, (button, drawn)
        assert any(text.startswith("cube running · running") for text in drawn), drawn
    finally:
        addon.unregister()


# -- with a server ----------------------------------------------------------------------------


def _fit_spec(iterations):
    return {"task": "fit_texture", "iterations": iterations, "texture_size": 8,
            "checkpoint_every": 100, "preview_every": 10**6}


def _images():
    return np.random.default_rng(0).uniform(0, 1, (2, 16, 16, 4)).astype(np.float32)


def check_live_a_cancel_is_reported_as_such_and_resume_continues_from_the_checkpoint():
    _enable()
    original = scene_updates.apply_update
    try:
        job = uuid.uuid4().hex
        entry = _new_entry(job)
        run = follow.JobRun(job, protocol_connector(), _report, submission=job_session.Submission(
            _fit_spec(4000), {"images": _images()}), fetch_only=None)

        def cancelling(context, job_id, update, report):
            original(context, job_id, update, report)
            if isinstance(update, protocol().events.Progress) and update.iteration >= 300:
                run.cancel()

        scene_updates.apply_update = cancelling
        # as a refine job's previews leave it (issue 56 item 2: it stayed after a cancel)
        scene_updates.update_live_mesh(bpy.context, np.eye(3), np.array([[0, 1, 2]]))
        follow.start(bpy.context, run)
        scene_updates.apply_update = original
        assert scene_updates.LIVE_MESH not in bpy.data.objects, "the live mesh ends with it"
        assert entry.state == "cancelled", (entry.state, REPORTS)
        assert not [r for r in REPORTS if "ERROR" in r[0]], REPORTS
        assert any("INFO" in kinds and "cancelled" in text for kinds, text in REPORTS), REPORTS
        logs = []

        def recording(context, job_id, update, report):
            original(context, job_id, update, report)
            if isinstance(update, protocol().events.Log):
                logs.append(update)

        scene_updates.apply_update = recording
        assert bpy.ops.diffrec.resume_job(job_id=job) == {"FINISHED"}, REPORTS
        assert entry.state == "done", (entry.state, REPORTS)
        resumed = [log.resumed_from for log in logs if log.resumed_from is not None]
        assert resumed and resumed[0] >= 100, logs  # from the checkpoint, not from the start
    finally:
        scene_updates.apply_update = original
        _disable()


def protocol_connector():
    from addon import backend_link

    return backend_link.connector(bpy.context)


def check_live_reopening_the_file_follows_its_running_jobs_again():
    _enable()
    folder = Path(tempfile.mkdtemp())
    try:
        job = uuid.uuid4().hex
        with protocol_connector()() as client:
            client.submit(job, _fit_spec(1500), {"images": _images()})
        _new_entry(job, state="running")
        bpy.ops.wm.save_as_mainfile(filepath=str(folder / "jobs.blend"))
        follow.jobs.detach_all()
        bpy.ops.wm.open_mainfile(filepath=str(folder / "jobs.blend"))
        assert job in follow.jobs, "load_post re-attached the running job"
        # no timer fires in the background: a script's Re-attach takes the job to its end
        assert bpy.ops.diffrec.attach(job_id=job) == {"FINISHED"}
        entry = scene_updates.job_entry(bpy.context.scene, job)
        assert entry.state == "done" and job not in follow.jobs, entry.state
    finally:
        _disable()


def _custom_submission(context):
    """A small materials job of a sphere seen by four cameras, with Custom settings."""
    scene = context.scene
    bpy.ops.mesh.primitive_uv_sphere_add(segments=12, ring_count=6, radius=1.0)
    sphere = context.active_object
    sphere.name = "ball"
    cameras = scenes.cameras_around(scene, 4, radius=4.0, height=1.0)
    settings = scene.diffrec
    settings.mode, settings.preset, settings.light = "materials", "CUSTOM", "LEARN"
    settings.iterations, settings.batch, settings.train_resolution = 3, 1, 24
    settings.light_resolution, settings.texture_resolution = 32, "256"
    size = submission.training_size(scene, 24)
    rows = np.linspace(-1, 1, size[1])[:, None] ** 2 + np.linspace(-1, 1, size[0])[None] ** 2
    images = np.zeros((4, size[1], size[0], 4), np.float32)
    images[..., :3], images[..., 3] = 0.5, rows < 0.4
    poses, intrinsics = export_scene.export_cameras(cameras, scene, size)
    mesh = export_scene.export_mesh(sphere, context.evaluated_depsgraph_get())
    values = panel_fields.optimize_settings(settings, has_envmap=False)
    return job_session.Submission({"task": "optimize", "settings": values, "label": "ball"},
                                  {"images": images, "cameras": poses.astype(np.float32),
                                   "intrinsics": intrinsics.astype(np.float32),
                                   "vertices": mesh.vertices, "faces": mesh.faces})


def check_live_custom_runs_as_shown_and_a_second_import_adds_nothing():
    _enable()
    try:
        context = bpy.context
        job = uuid.uuid4().hex
        entry = _new_entry(job)
        run = follow.JobRun(job, protocol_connector(), _report,
                            submission=_custom_submission(context), fetch_only=None)
        follow.start(context, run)
        assert entry.state == "done" and entry.imported, (entry.state, REPORTS)
        metrics = json.loads((follow.results_dir(job) / "metrics.json").read_text())
        ran = metrics["settings"]
        assert metrics["preset"] == "custom", metrics["preset"]
        assert (ran["iterations"], ran["batch"], ran["train_res"], ran["light_res"],
                ran["texture_res"]) == (3, 1, 24, 32, 256), ran
        objects, worlds = len(bpy.data.objects), len(bpy.data.worlds)
        assert bpy.ops.diffrec.attach(job_id=job) == {"FINISHED"}
        assert (len(bpy.data.objects), len(bpy.data.worlds)) == (objects, worlds)
        assert not [o.name for o in bpy.data.objects if o.name.endswith(".001")]
        assert "already imported" in context.scene.diffrec.status, context.scene.diffrec.status
    finally:
        _disable()


def check_live_refresh_lists_the_servers_other_jobs_by_label():
    _enable()
    try:
        job = uuid.uuid4().hex
        with protocol_connector()() as client:
            client.submit(job, {**_fit_spec(5), "label": "Suzanne"}, {"images": _images()})
        assert bpy.ops.diffrec.refresh_jobs() == {"FINISHED"}, REPORTS
        entry = scene_updates.job_entry(bpy.context.scene, job)
        assert entry is not None and entry.from_server and entry.object_name == "Suzanne"
        assert entry.state in ("queued", "running", "done") and entry.created > 0
    finally:
        _disable()


harness.main(globals())
