"""Submit, follow, fetch and re-attach against a real ``diffrec serve`` (see harness.py).

Needs DIFFREC_SERVER (tcp://127.0.0.1:PORT of a running server). One check follows a small
``fit_texture`` job through the job session; the other presses Optimize on a real scene:
Cycles renders the targets, the backend's ``optimize`` task runs the pipeline on the CPU, and
the result comes back as an object, a material and a world.
"""

import os
import sys
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # blender --python does not add it
import harness  # noqa: I001
import bpy
import numpy as np
import scenes

from addon import backend_link, follow, scene_updates
from addon.core import job_session

REPORTS = []


def _report(kind, message):
    REPORTS.append((sorted(kind), message))


def _enable_with_endpoint():
    import addon_utils

    addon_utils.enable("addon", default_set=True)
    preferences = bpy.context.preferences.addons["addon"].preferences
    preferences.endpoint = os.environ["DIFFREC_SERVER"]
    preferences.timeout = 5.0


def _disable():
    import addon_utils

    addon_utils.disable("addon", default_set=True)


def check_submit_follow_fetch_and_reattach():
    _enable_with_endpoint()
    try:
        scene = bpy.context.scene
        rng = np.random.default_rng(0)
        images = rng.uniform(0, 1, (2, 16, 16, 4)).astype(np.float32)
        spec = {"task": "fit_texture", "iterations": 40, "texture_size": 8,
                "preview_every": 10, "checkpoint_every": 20}
        job = uuid.uuid4().hex
        entry = scene.diffrec.jobs.add()
        entry.job_id, entry.mode = job, "fit_texture"
        run = follow.JobRun(job, backend_link.connector(bpy.context), _report,
                            submission=job_session.Submission(spec, {"images": images}),
                            fetch_only=None)  # every file, as diffrec fetch gets them
        seen = []
        original = scene_updates.apply_update

        def recording(context, job_id, update, report):
            seen.append(update.kind)
            original(context, job_id, update, report)

        scene_updates.apply_update = recording
        try:
            follow.start(bpy.context, run)
        finally:
            scene_updates.apply_update = original
        assert "error" not in seen, REPORTS
        assert seen[0] == "submitted" and "progress" in seen and seen[-1] == "fetched", seen
        assert entry.state == "done", entry.state
        assert "40/40" in scene.diffrec.status or scene.diffrec.status.startswith("done"), (
            scene.diffrec.status
        )
        preview = bpy.data.images[scene_updates.PREVIEW_IMAGE]
        assert tuple(preview.size) == (32, 16)  # render | target, 16 px each
        files = sorted(path.name for path in follow.results_dir(job).iterdir())
        assert files == ["manifest.json", "metrics.json", "render.npy", "texture.npy"], files
        texture = np.load(follow.results_dir(job) / "texture.npy")
        assert texture.shape == (8, 8, 4)
        manifest = (follow.results_dir(job) / "manifest.json").read_text()
        # a reopened file re-attaches by the job id kept in the scene and fetches again what
        # the add-on imports (the mesh and light roles): of a fit_texture result, its manifest
        for path in follow.results_dir(job).iterdir():
            path.unlink()
        assert bpy.ops.diffrec.attach(job_id=job) == {"FINISHED"}
        files = sorted(path.name for path in follow.results_dir(job).iterdir())
        assert files == ["manifest.json"], files
        assert (follow.results_dir(job) / "manifest.json").read_text() == manifest
    finally:
        _disable()


def _scene_for_optimize():
    """A UV sphere (selected, active), four cameras around it, a small HDRI world."""
    scene = bpy.context.scene
    scene.render.engine = "CYCLES"
    scene.cycles.device = "CPU"
    scene.cycles.samples = 8
    bpy.ops.mesh.primitive_uv_sphere_add(segments=16, ring_count=8, radius=1.0)
    sphere = bpy.context.active_object
    sphere.name = "ball"
    material = bpy.data.materials.new("ball")
    material.use_nodes = True
    material.node_tree.nodes["Principled BSDF"].inputs["Base Color"].default_value = (
        0.7, 0.2, 0.1, 1.0)
    sphere.data.materials.append(material)
    scenes.cameras_around(scene, 4, radius=4.0, height=1.0)
    scenes.sky_world(scene, np.linspace(1.5, 0.3, 16), width=32)
    sphere.select_set(True)
    bpy.context.view_layer.objects.active = sphere
    return scene


def check_optimize_materials_round_trip():
    """Optimize in background mode: export, backend pipeline, import."""
    _enable_with_endpoint()
    try:
        scene = _scene_for_optimize()
        settings = scene.diffrec
        settings.mode, settings.preset, settings.light = "materials", "PREVIEW", "KEEP"
        settings.iterations, settings.train_resolution = 20, 32
        bpy.context.preferences.addons["addon"].preferences.timeout = 30.0
        assert bpy.ops.diffrec.optimize() == {"FINISHED"}, settings.status
        entry = settings.jobs[-1]
        assert entry.state == "done" and entry.imported, (entry.state, settings.status)
        result = bpy.data.objects["ball optimised"]
        # triangulated, still welded: 2 * 16 * 6 quad halves + 2 * 16 cap triangles
        counts = len(result.data.polygons), len(result.data.vertices)
        assert counts == (224, 16 * 7 + 2), counts
        # the ball shades flat (a new sphere's default), and so does the result: each corner's
        # normal is its face's, the mesh welded all the same
        corners = np.empty(len(result.data.loops) * 3, np.float32)
        result.data.corner_normals.foreach_get("vector", corners)
        face_of_corner = np.empty(len(result.data.loops), int)
        for polygon in result.data.polygons:
            face_of_corner[polygon.loop_start : polygon.loop_start + polygon.loop_total] = (
                polygon.index)
        faces = np.array([polygon.normal for polygon in result.data.polygons])
        assert np.allclose(corners.reshape(-1, 3), faces[face_of_corner], atol=1e-3)
        assert result.data.uv_layers.active is not None
        nodes = result.active_material.node_tree.nodes
        kinds = {n.bl_idname for n in nodes}
        assert "ShaderNodeTexImage" in kinds
        assert "ShaderNodeNormalMap" not in kinds, "materials mode trains no normal map"
        files = {path.name for path in follow.results_dir(entry.job_id).iterdir()}
        assert files == {"manifest.json", "mesh.glb", "probe.hdr"}, files  # what it imports
        assert scene.world.name == "sky", "Keep HDRI: the scene's own world stays"
    finally:
        _disable()


def check_refine_shows_the_live_mesh_and_saves_a_glb():
    """Refine sends the moving mesh with its previews; the result is also saved as GLB."""
    import tempfile

    _enable_with_endpoint()
    folder = Path(tempfile.mkdtemp())
    live = []
    original = scene_updates.update_live_mesh

    def recording(context, vertices, faces):
        live.append(len(faces))
        return original(context, vertices, faces)

    scene_updates.update_live_mesh = recording
    try:
        scene = _scene_for_optimize()
        bpy.ops.wm.save_as_mainfile(filepath=str(folder / "scene.blend"))
        settings = scene.diffrec
        settings.mode, settings.preset, settings.light = "refine", "PREVIEW", "KEEP"
        settings.iterations, settings.train_resolution, settings.save_glb = 20, 32, True
        bpy.context.preferences.addons["addon"].preferences.timeout = 30.0
        assert bpy.ops.diffrec.optimize() == {"FINISHED"}, settings.status
        assert live == [224, 224], live  # previews at iterations 10 and 20
        assert scene_updates.LIVE_MESH not in bpy.data.objects, "removed once the result is in"
        assert (folder / "ball_optimised.glb").stat().st_size > 1000  # bpy.path.clean_name
    finally:
        scene_updates.update_live_mesh = original
        _disable()


harness.main(globals())
