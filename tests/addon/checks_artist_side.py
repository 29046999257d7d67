"""Issue 24, the artist's side, under bpy (see harness.py and test_artist_side.py).

Needs the endpoints of artist_servers.py in DIFFREC_RESULT (hands back a prepared result),
DIFFREC_FAILING (jobs fail), DIFFREC_FULL (disk full), DIFFREC_REFUSING (the pairing string of
a CURVE server that does not allow Blender's key) and DIFFREC_DOWN (nothing listens), and
BLENDER_USER_RESOURCES pointing at a scratch folder (this computer's key pair goes there).

What the bpy wheel cannot show: the timer of followed jobs firing (no event loop here;
checks_pumped_renders.py calls its function by hand) and undo in the interface, where Blender
pushes the operator's step itself; here ``bpy.ops.diffrec.optimize("EXEC_DEFAULT", True)``
asks for that push, which Blender makes only for an operator with UNDO in its
``bl_options``.
"""

import os
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # blender --python does not add it
import harness  # noqa: I001  (puts the repository on sys.path)
import bpy
import numpy as np
import scenes
from mathutils import Vector

from addon import import_result, nerf_io, worlds
from addon.core import messages

MALFORMED_PAIRINGS = (
    "diffrec://127.0.0.1:5557?key=" + "zz" * 32,  # not hexadecimal
    "diffrec://127.0.0.1:5557?key=" + "ab" * 16,  # a short key
    "diffrec://127.0.0.1?key=" + "ab" * 32,  # no port
    "diffrec://127.0.0.1:5557",  # no key
    "diffrec://127.0.0.1:5557?key=" + "ab" * 31 + "a",  # truncated by one digit
)
FAILURE = "the optimisation diverged at iteration 3"  # artist_servers.FAILURE (no torch here)
CLASS_NAME = re.compile(r"\b[A-Z]\w*(Error|Exception|Unavailable)\b")
RENDERS: list[str] = []


def _count_render(*_args):
    RENDERS.append(bpy.context.scene.camera.name)


def _enable(endpoint: str):
    import addon_utils

    addon_utils.enable("addon", default_set=True)
    preferences = bpy.context.preferences.addons["addon"].preferences
    preferences.endpoint = endpoint
    preferences.timeout = 5.0
    return preferences


def _scene(server: str):
    """The artist's scene: the mesh 'ball' with the material 'ball paint' and its image, two
    cameras, the HDRI world 'sky'; tiny Cycles renders; the add-on pointed at ``server``."""
    _enable(os.environ[f"DIFFREC_{server.upper()}"])
    scene = bpy.context.scene
    scene.render.engine = "CYCLES"
    scene.cycles.device, scene.cycles.samples = "CPU", 1
    scene.render.resolution_x, scene.render.resolution_y = 32, 24
    bpy.ops.mesh.primitive_uv_sphere_add(segments=12, ring_count=6, radius=1.0)
    ball = bpy.context.active_object
    ball.name = ball.data.name = "ball"
    material = bpy.data.materials.new("ball paint")
    material.use_nodes = True
    texture = material.node_tree.nodes.new("ShaderNodeTexImage")
    texture.image = bpy.data.images.new("ball paint", 4, 4)
    ball.data.materials.append(material)
    scenes.cameras_around(scene, 2, radius=4.0, height=1.0)
    scenes.sky_world(scene, np.linspace(1.5, 0.3, 8), width=16)
    ball.select_set(True)
    bpy.context.view_layer.objects.active = ball
    bpy.context.view_layer.update()
    settings = scene.diffrec
    settings.preset, settings.iterations, settings.train_resolution = "PREVIEW", 10, 16
    settings.light = "LEARN"  # the learned light's world is what these checks follow
    RENDERS.clear()
    if _count_render not in bpy.app.handlers.render_post:
        bpy.app.handlers.render_post.append(_count_render)
    return scene


def _disable():
    import addon_utils

    addon_utils.disable("addon", default_set=True)


def _artist_data() -> dict:
    """The scene's data an artist made or could lose: objects (transform, mesh size,
    materials), worlds and the scene's, materials, images."""
    def described(obj):
        mesh = obj.data if obj.type == "MESH" else None
        return (tuple(map(tuple, obj.matrix_world)), len(mesh.vertices) if mesh else None,
                tuple(slot.material.name for slot in obj.material_slots if slot.material))

    return {
        "objects": {obj.name: described(obj) for obj in bpy.data.objects},
        "worlds": sorted(world.name for world in bpy.data.worlds),
        "world": bpy.context.scene.world.name if bpy.context.scene.world else None,
        "materials": sorted(material.name for material in bpy.data.materials),
        "images": sorted(image.name for image in bpy.data.images
                         if image.type != "RENDER_RESULT"),
    }


def _press(operator, *args, **kwargs) -> tuple:
    """(the operator's result or None when it reported an error, the error text, seconds)."""
    start = time.monotonic()
    try:
        return operator(*args, **kwargs), "", time.monotonic() - start
    except RuntimeError as error:  # bpy.ops raises the operator's ERROR reports
        return None, str(error), time.monotonic() - start


def _assert_sentence(text: str, expected: str) -> None:
    """``text`` is an error report (bpy.ops prefixes 'Error: ') that says ``expected``, with
    no traceback and no exception class name."""
    assert text.startswith("Error: "), text
    said = text.removeprefix("Error: ")
    assert "Traceback" not in said and "Python:" not in said, text
    assert not CLASS_NAME.search(said), text
    assert expected in said, (expected, text)


# -- 1 and 2: the artist's world and object ------------------------------------------------


def _ball_box_x(name: str) -> tuple[float, float]:
    obj = bpy.data.objects[name]
    xs = [(obj.matrix_world @ Vector(corner)).x for corner in obj.bound_box]
    return min(xs), max(xs)


def check_optimize_keeps_the_artists_world_and_puts_the_result_beside_the_original():
    """Issue 24.1 and 24.2: Light = Learn made the learned world the scene's and left the
    artist's 'sky' with no user (gone once saved); the result sat inside the original."""
    scene = _scene("result")
    before = _artist_data()
    try:
        result, error, _ = _press(bpy.ops.diffrec.optimize)
        assert result == {"FINISHED"} and not error, (result, error, scene.diffrec.status)
        after = _artist_data()
        assert scene.world.name == "sky", "the scene keeps the artist's world"
        for kind in ("worlds", "materials", "images"):
            assert set(before[kind]) <= set(after[kind]), kind
        for name, described in before["objects"].items():
            assert after["objects"][name] == described, name  # the original untouched
        learned = bpy.data.worlds["ball optimised"]
        assert worlds.is_learned(learned) and scene.diffrec.learned_world == learned
        result = bpy.data.objects["ball optimised"]
        assert [c.name for c in result.users_collection] == [import_result.RESULTS]
        assert _ball_box_x("ball optimised")[0] > _ball_box_x("ball")[1], "beside, not inside"

        assert bpy.ops.diffrec.switch_world() == {"FINISHED"}  # the button, one click
        assert scene.world == learned
        sky = bpy.data.worlds["sky"]
        assert sky.users >= 1, "the artist's world keeps a user while the learned one shows"
        with tempfile.TemporaryDirectory() as folder:
            path = str(Path(folder) / "scene.blend")
            bpy.ops.wm.save_as_mainfile(filepath=path)
            bpy.ops.wm.open_mainfile(filepath=path)
        scene = bpy.context.scene
        assert "sky" in bpy.data.worlds, "saved and reopened, the artist's world is still there"
        assert scene.world.name == "ball optimised"
        assert bpy.ops.diffrec.switch_world() == {"FINISHED"}  # and back
        assert scene.world.name == "sky"
        assert "ball optimised" in bpy.data.worlds and bpy.data.worlds["ball optimised"].users
    finally:
        _disable()


def check_a_preference_makes_the_learned_light_the_scenes_world():
    scene = _scene("result")
    bpy.context.preferences.addons["addon"].preferences.use_learned_world = True
    try:
        result, error, _ = _press(bpy.ops.diffrec.optimize)
        assert result == {"FINISHED"} and not error, (result, error)
        assert scene.world.name == "ball optimised"
        assert scene.diffrec.artist_world.name == "sky" and bpy.data.worlds["sky"].users >= 1
    finally:
        _disable()


# -- 3 and 4: every failure one sentence, fast, and nothing changed -------------------------


def check_malformed_pairing_strings_are_a_sentence_in_every_operator():
    """Issue 24.3: a traceback ending in ProtocolError: bad_pairing."""
    scene = _scene("down")
    entry = scene.diffrec.jobs.add()
    entry.job_id, entry.object_name = "an-earlier-job", "ball"
    before = _artist_data()
    preferences = bpy.context.preferences.addons["addon"].preferences
    try:
        for pairing in MALFORMED_PAIRINGS:
            preferences.endpoint = pairing
            for name, press in (("test_connection", bpy.ops.diffrec.test_connection),
                                ("optimize", bpy.ops.diffrec.optimize),
                                ("attach", lambda: bpy.ops.diffrec.attach(job_id=entry.job_id))):
                result, error, _ = _press(press)
                assert result is None, (pairing, name, result)
                _assert_sentence(error, messages.BAD_PAIRING)
        assert not RENDERS and _artist_data() == before, (RENDERS, _artist_data(), before)
    finally:
        _disable()


def _every_press_refused(server: str, within_s: float, *said: str) -> None:
    """Optimize, Test Connection and Attach (to an earlier job's entry), pressed against
    ``server``: each an error sentence saying every one of ``said`` within ``within_s``
    seconds, before any render, the artist's data and the job list as they were."""
    scene = _scene(server)
    entry = scene.diffrec.jobs.add()
    entry.job_id = "an-earlier-job"
    before = _artist_data()
    try:
        for press in (bpy.ops.diffrec.optimize, bpy.ops.diffrec.test_connection,
                      lambda: bpy.ops.diffrec.attach(job_id=entry.job_id)):
            result, error, seconds = _press(press)
            assert result is None and seconds < within_s, (result, seconds)
            for expected in said:
                _assert_sentence(error, expected)
        assert not RENDERS and _artist_data() == before, (RENDERS, _artist_data(), before)
        assert len(scene.diffrec.jobs) == 1, "no job entry left behind"
    finally:
        _disable()


def check_a_server_down_is_one_sentence_within_two_seconds_before_any_render():
    """Issue 24.4: 32 s of renders, a 30 s wait, then 'ServerUnavailable: no answer...'."""
    _every_press_refused("down", 2.0, "No diffrec backend answers at tcp://127.0.0.1:",
                         "start it ('diffrec serve'")


def check_a_server_refusing_the_key_says_to_allow_it_before_any_render():
    """A CURVE server answers nothing to a key it does not allow: said as such in ~2 s."""
    _every_press_refused("refusing", 3.0, "ask its operator to allow this computer's key")


def check_a_job_failing_on_the_server_is_its_sentence_and_changes_nothing():
    scene = _scene("failing")
    before = _artist_data()
    try:
        _result, error, _ = _press(bpy.ops.diffrec.optimize)
        _assert_sentence(error, FAILURE)
        assert _artist_data() == before
        assert scene.diffrec.jobs[-1].state == "failed", scene.diffrec.jobs[-1].state
    finally:
        _disable()


def check_a_full_disk_on_the_server_is_a_sentence_and_changes_nothing():
    """The upload is refused with disk_full: was 'ServerError: disk_full: ...'."""
    _scene("full")
    before = _artist_data()
    try:
        _result, error, _ = _press(bpy.ops.diffrec.optimize)
        _assert_sentence(error, "The server cannot store the job: the server's disk is full")
        assert _artist_data() == before
    finally:
        _disable()


def check_the_dataset_operators_report_sentences():
    """Export into a folder that cannot be made, import of a missing file."""
    _scene("down")
    before = _artist_data()
    try:
        with tempfile.NamedTemporaryFile() as not_a_folder:
            result, error, _ = _press(bpy.ops.diffrec.export_nerf,
                                      directory=str(Path(not_a_folder.name) / "dataset"))
            assert result is None
            _assert_sentence(error, "A file could not be used")
        result, error, _ = _press(bpy.ops.diffrec.import_nerf,
                                  filepath="/nonexistent/transforms_train.json")
        assert result is None
        _assert_sentence(error, "/nonexistent has no transforms_train.json")
        assert not RENDERS and _artist_data() == before, (RENDERS, _artist_data(), before)
    finally:
        _disable()


# -- 10: undo --------------------------------------------------------------------------------


def check_optimize_and_switch_light_are_undo_steps():
    """Issue 24.10: undo after Optimize gave back the scene before the artist's last step."""
    _scene("result")
    bpy.ops.ed.undo_push(message="the artist's scene")
    before = _artist_data()
    try:
        result, error, _ = _press(bpy.ops.diffrec.optimize, "EXEC_DEFAULT", True)
        assert result == {"FINISHED"} and not error, (result, error)
        assert "ball optimised" in bpy.data.objects
        bpy.ops.ed.undo()
        assert _artist_data() == before, (_artist_data(), before)
        assert import_result.RESULTS not in bpy.data.collections
        assert len(bpy.context.scene.diffrec.jobs) == 0
        bpy.ops.ed.redo()
        assert "ball optimised" in bpy.data.objects, "and redo brings it back"

        assert bpy.ops.diffrec.switch_world("EXEC_DEFAULT", True) == {"FINISHED"}
        assert bpy.context.scene.world.name == "ball optimised"
        bpy.ops.ed.undo()
        assert bpy.context.scene.world.name == "sky", "Switch Light undone"
        assert "ball optimised" in bpy.data.objects, "one step at a time"
        assert "UNDO" in bpy.types.DIFFREC_OT_attach.bl_options  # Attach imports the same way
    finally:
        _disable()


# -- the guide's script ----------------------------------------------------------------------


def _guide_script(name: str) -> str:
    """The Python block of docs/guide.md that its mention of ``name`` introduces."""
    guide = (Path(__file__).parents[2] / "docs" / "guide.md").read_text()
    start = guide.index("```python\n", guide.index(f"`{name}`:")) + len("```python\n")
    return guide[start:guide.index("```", start)]


def check_the_guides_high_to_low_script_runs_as_written_and_stops_at_a_cancel():
    """docs/guide.md's high_to_low.py on a saved file with a 'Sculpt': the job ends done and
    the GLB its comment names lies beside the .blend. Run again with Cancel pressed during the
    first target render (nothing is sent, the operator raises nothing), it stops with no
    result instead of taking the earlier job for its own."""
    _scene("result")
    bpy.data.objects["ball"].name = "Sculpt"
    script = _guide_script("high_to_low.py")
    assert "# <name>_optimised.glb beside the saved .blend" in script, script

    def cancel(*_args):
        bpy.ops.diffrec.cancel()

    try:
        with tempfile.TemporaryDirectory() as folder:
            bpy.ops.wm.save_as_mainfile(filepath=str(Path(folder) / "scene.blend"))
            exec(compile(script, "high_to_low.py", "exec"), {})
            jobs = bpy.context.scene.diffrec.jobs
            assert len(jobs) == 1 and jobs[-1].state == "done", [job.state for job in jobs]
            assert (Path(folder) / "Sculpt_optimised.glb").is_file(), list(Path(folder).iterdir())
            bpy.app.handlers.render_post.append(cancel)
            try:
                exec(compile(script, "high_to_low.py", "exec"), {})
                raise AssertionError("the script went on after a cancel")
            except SystemExit as stop:
                assert str(stop) == "no result: cancelled: nothing was sent", stop
            assert len(jobs) == 1, "nothing sent"
    finally:
        if cancel in bpy.app.handlers.render_post:
            bpy.app.handlers.render_post.remove(cancel)
        _disable()


# -- File > Export ---------------------------------------------------------------------------


def check_export_nerf_is_in_file_export_and_renders_one_view_per_step():
    scene = _scene("down")
    scenes.cameras_around(scene, 1, radius=5.0, height=2.0)[0].name = "cam2"
    try:
        menu = bpy.types.TOPBAR_MT_file_export._dyn_ui_initialize()
        assert nerf_io.export_nerf_menu in menu, "File > Export > Dataset: NeRF"
        with tempfile.TemporaryDirectory() as folder:
            cameras = sorted((o for o in scene.objects if o.type == "CAMERA"),
                             key=lambda o: o.name)
            writer = nerf_io.DatasetWriter(scene, cameras, Path(folder))
            for view in range(3):
                assert writer.step() is False
                assert RENDERS == [camera.name for camera in cameras[: view + 1]], RENDERS
                assert not (Path(folder) / "transforms_train.json").exists()
            assert scene.render.use_persistent_data is True  # kept between the views
            assert writer.step() is True and len(RENDERS) == 3
            assert scene.render.use_persistent_data is False  # the scene's own, back
            assert (Path(folder) / "transforms_train.json").exists()
            assert sorted(p.name for p in (Path(folder) / "train").iterdir()) == [
                "r_0.png", "r_1.png", "r_2.png"]
    finally:
        _disable()


harness.main(globals())
