"""Submit, follow, fetch and re-attach against a real ``diffrec serve`` (see harness.py).

Needs DIFFREC_SERVER (tcp://127.0.0.1:PORT of a running server). The server's job runner is,
for now, ``fit_texture`` (a small real optimisation); the add-on's own modes plug into the
same path once the reconstruction pipeline serves them.
"""

import os
import sys
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # blender --python does not add it
import harness  # noqa: I001
import bpy
import numpy as np

import addon
from addon import jobs, operators

REPORTS = []


def _report(kind, message):
    REPORTS.append((sorted(kind), message))


def _enable_with_endpoint():
    import addon_utils

    addon_utils.enable("addon", default_set=True)
    preferences = bpy.context.preferences.addons["addon"].preferences
    preferences.endpoint = os.environ["DIFFREC_SERVER"]
    preferences.timeout = 5.0


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
        session = jobs.JobSession(
            operators.connector(bpy.context), job, operators.results_dir(job),
            jobs.Submission(spec, {"images": images}),
        )
        seen = []
        original = operators._apply

        def recording(context, job_id, update, report):
            seen.append(update.kind)
            original(context, job_id, update, report)

        operators._apply = recording
        try:
            operators.follow_blocking(bpy.context, session, _report)
        finally:
            operators._apply = original
        assert "error" not in seen, REPORTS
        assert seen[0] == "submitted" and "progress" in seen and seen[-1] == "fetched", seen
        assert entry.state == "done", entry.state
        assert "40/40" in scene.diffrec.status or scene.diffrec.status.startswith("done"), (
            scene.diffrec.status
        )
        preview = bpy.data.images[operators.PREVIEW_IMAGE]
        assert tuple(preview.size) == (32, 16)  # render | target, 16 px each
        files = sorted(path.name for path in operators.results_dir(job).iterdir())
        assert {"texture.npy", "render.npy", "metrics.json"} <= set(files), files
        texture = np.load(operators.results_dir(job) / "texture.npy")
        assert texture.shape == (8, 8, 4)
        # a reopened file re-attaches by the job id kept in the scene, and fetches again
        for path in operators.results_dir(job).iterdir():
            path.unlink()
        assert bpy.ops.diffrec.attach(job_id=job) == {"FINISHED"}
        assert (operators.results_dir(job) / "texture.npy").exists()
        assert np.array_equal(np.load(operators.results_dir(job) / "texture.npy"), texture)
    finally:
        addon.unregister()


harness.main(globals())
