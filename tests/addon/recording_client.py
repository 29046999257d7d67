"""A protocol client for bpy checks of Optimize without a server (no bpy here)."""


class RecordingClient:
    """Records each submission into ``submitted`` as (job, spec, arrays), then ends the
    session: attaching fails, as a server that went away would (the check ends the job
    there)."""

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
