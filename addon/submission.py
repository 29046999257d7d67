"""The Optimize job's submission, built from the scene on the main thread.

``SubmissionBuilder`` works in steps so that the interface can stay responsive between them:
with rendered targets, one camera view per step (rendered and exported together, so an image
and its pose always agree), then one step exporting the selected mesh and the world light.
Camera images and dataset folders are read in one step. No step leaves the scene changed: a
builder dropped half-way (cancelled) leaves nothing behind.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import bpy
import numpy as np

from . import export_scene, job_session, panel_fields, validate
from .wire import protocol

CHOICES = (*panel_fields.FIELD_SETTINGS, "light")
"""The panel's choices a job is made of, read once when Optimize is pressed."""


def training_size(scene, longest_side: int) -> tuple[int, int]:
    """The scene's render aspect with its longest side ``longest_side`` pixels (the rule the
    backend resizes targets by, ``diffrec.protocol.images.longest_side_size``)."""
    return protocol().images.longest_side_size(*export_scene.render_size(scene), longest_side)


def dataset_targets(folder: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(images [N,H,W,4], cameras [N,4,4], intrinsics [N,6]) from a dataset folder (a
    Blender path), NeRF-style or LLFF (masks become the images' alpha), read with
    ``diffrec.protocol.captures``, the reader the backend uses."""
    capture = protocol().captures.read_capture(Path(bpy.path.abspath(folder)))
    images = []
    for frame in capture.frames:
        image = export_scene.load_image_array(frame.image)
        if frame.mask is not None:
            image[..., 3] = export_scene.load_image_array(frame.mask, data=True)[..., 0]
        images.append(image)
    images = np.stack(images)
    height, width = images.shape[1:3]
    depths = [(frame.near, frame.far) for frame in capture.frames]
    intrinsics = np.concatenate([capture.intrinsics(width, height), depths], -1)
    return images, capture.camera_to_world().astype(np.float32), intrinsics.astype(np.float32)


class SubmissionBuilder:
    """Builds one Optimize submission in ``steps`` calls of ``step`` (main thread only).

    Created when Optimize is pressed: the panel's choices, the target cameras and the subject
    (the active object when it is a selected mesh; ``object_name`` names the active object in
    any case) are fixed then. ``done`` counts the steps taken; the last sets ``submission``.
    """

    def __init__(self, context, settings):
        self.scene = context.scene
        self.choices = SimpleNamespace(**{name: getattr(settings, name) for name in CHOICES})
        self.source = settings.target_source
        self.dataset_path = settings.dataset_path
        self.cameras = [] if self.source == "DATASET" else validate.target_cameras(context,
                                                                                   settings)
        subject = context.active_object
        self.object_name = subject.name if subject is not None else ""
        self.subject = (subject if subject is not None and subject.type == "MESH"
                        and subject.select_get() else None)
        self.done = 0
        self.submission: job_session.Submission | None = None
        self._views: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._targets: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    @property
    def steps(self) -> int:
        """How many steps the whole submission takes."""
        return (len(self.cameras) if self.source == "RENDER" else 1) + 1

    @property
    def text(self) -> str:
        """What the next step does, for the status line: e.g. 'rendering targets 3/24'."""
        if self.source == "RENDER" and self.done < len(self.cameras):
            return f"rendering targets {self.done + 1}/{len(self.cameras)}"
        if self._targets is None:
            return "reading targets"
        return "exporting mesh and light"

    def step(self, context) -> bool:
        """Do the next step; whether the submission is complete (``submission`` is set)."""
        if self.submission is not None:
            return True
        if self._targets is None:
            self._targets = self._next_targets()
        else:
            self.submission = self._finish(context)
        self.done += 1
        return self.submission is not None

    def _next_targets(self):
        """All the targets, (images, poses, intrinsics); with rendered targets, one more view
        per call and None until the last."""
        if self.source == "DATASET":
            return dataset_targets(self.dataset_path)
        if self.source == "CAMERA_IMAGES":
            images = export_scene.camera_images(self.cameras)
            size = (images.shape[2], images.shape[1])
            return (images, *export_scene.export_cameras(self.cameras, self.scene, size))
        size = training_size(self.scene, self.choices.train_resolution)
        camera = self.cameras[len(self._views)]
        image = export_scene.render_view(self.scene, camera, size)
        self._views.append((image, *export_scene.export_camera(camera, self.scene, size)))
        if len(self._views) < len(self.cameras):
            return None
        images, poses, intrinsics = (np.stack(column) for column in zip(*self._views,
                                                                          strict=True))
        return images, poses.astype(np.float32), intrinsics.astype(np.float32)

    def _finish(self, context) -> job_session.Submission:
        images, poses, intrinsics = self._targets
        arrays = {"images": images, "cameras": poses, "intrinsics": intrinsics}
        if self.subject is not None:
            mesh = export_scene.export_mesh(self.subject, context.evaluated_depsgraph_get())
            arrays.update(vertices=mesh.vertices, faces=mesh.faces, normals=mesh.normals,
                          normal_faces=mesh.normal_faces)
            if mesh.uvs is not None:
                arrays.update(uvs=mesh.uvs, uv_faces=mesh.uv_faces)
        if self.scene.world is not None:
            arrays["envmap"] = export_scene.export_world(self.scene)
        settings = panel_fields.optimize_settings(self.choices, "envmap" in arrays)
        return job_session.Submission({"task": "optimize", "settings": settings,
                                "label": self.object_name}, arrays)
