"""What the add-on's status says about a cancelled job and a resumed one (issue 56.4), under
bpy (see harness.py): the server's sentences, where the job stopped and where it starts
again, not a promise to continue that no checkpoint backs."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # blender --python does not add it
import harness  # noqa: I001  (puts the repository on sys.path)
import bpy

import addon
from addon import scene_updates
from addon.core.wire import protocol

CANCELLED_KEPT = ("the job was cancelled, its checkpoint kept at iteration 10 of 200: Resume "
                  "continues from there")
CANCELLED_EARLY = "the job was cancelled before its first checkpoint: Resume starts it over"
RESUMING = "resuming from its checkpoint at iteration 10 of 200"


def _apply(kind: str, fields: dict) -> None:
    scene_updates.apply_update(bpy.context, "j", protocol().events.parse(kind, fields),
                               lambda *report: None)


def check_the_status_says_where_a_cancelled_job_stopped_and_where_it_resumes():
    addon.register()
    try:
        settings = bpy.context.scene.diffrec
        entry = settings.jobs.add()
        entry.job_id, entry.state = "j", "running"
        _apply("cancelled", {"message": CANCELLED_EARLY})
        assert settings.status == CANCELLED_EARLY, settings.status
        _apply("cancelled", {"message": CANCELLED_KEPT})
        assert settings.status == CANCELLED_KEPT and entry.message == CANCELLED_KEPT
        _apply("log", {"level": "info", "message": RESUMING, "stage": "resuming"})
        assert settings.status == RESUMING, settings.status
    finally:
        addon.unregister()


harness.main(globals())
