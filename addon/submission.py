"""The Optimize job's submission, built from the scene on the main thread.

``SubmissionBuilder`` works in steps so that the interface can stay responsive between them:
with rendered targets, one camera view per step (rendered and exported together, so an image
and its pose always agree; what ``subjects.hidden_from_targets`` names hidden), then, where
the reference is baked onto the start (``subjects.bakes_reference``), one step making the copy
it is baked onto (the reference decimated, or the selected low-poly with its UVs) and one per
map Cycles bakes onto it (``bake_start``), then, with rendered targets and a baked start, one
step per camera rendering the baked copy alone as the targets were rendered (the start
renders: the backend corrects the targets by how this renderer shows the start,
``diffrec.pipeline.renderer_gap``; ``subjects.renders_start``), then one step exporting the
start mesh (with its baked maps). The world light is read (or baked) first, so that a world
rendering black where it is all the light refuses the job before any render. Camera images
and dataset folders are read in one step. No step leaves the scene changed: the decimated
copy and its baked material are removed once exported, and a builder dropped half-way
(``close``) leaves nothing behind.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import bpy
import numpy as np

from . import bake_start, export_scene, subjects, temporaries, validate
from .core import job_session, panel_fields
from .core.wire import protocol
from .export_scene import _temporarily

CHOICES = (*panel_fields.FIELD_SETTINGS, "light", "target_source", "triangles")
"""The panel's choices a job is made of, read once when Optimize is pressed."""


def training_size(scene, longest_side: int) -> tuple[int, int]:
    """The scene's render aspect with its longest side ``longest_side`` pixels (the rule the
    backend resizes targets by, ``diffrec.protocol.images.longest_side_size``)."""
    return protocol().images.longest_side_size(*export_scene.render_size(scene), longest_side)


def dataset_targets(folder: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(images [N,H,W,4], cameras [N,4,4], intrinsics [N,6]) from a dataset folder (a
    Blender path), NeRF-style or LLFF (masks become the images' alpha; without masks, those
    the backend made for the capture, ``Capture.auto_masks``, where it made them all), read
    with ``diffrec.protocol.captures``, the reader the backend uses."""
    capture = protocol().captures.read_capture(Path(bpy.path.abspath(folder)))
    made = capture.auto_masks()
    if any(frame.mask for frame in capture.frames) or not all(p.is_file() for p in made):
        made = [None] * len(made)
    images = []
    for frame, made_mask in zip(capture.frames, made, strict=True):
        image = export_scene.load_image_array(frame.image)
        mask = frame.mask or made_mask
        if mask is not None:
            image[..., 3] = export_scene.load_image_array(mask, data=True)[..., 0]
        images.append(image)
    images = np.stack(images)
    height, width = images.shape[1:3]
    depths = [(frame.near, frame.far) for frame in capture.frames]
    intrinsics = np.concatenate([capture.intrinsics(width, height), depths], -1)
    return images, capture.camera_to_world().astype(np.float32), intrinsics.astype(np.float32)


def poses_found(folder: str) -> bool:
    """Whether a dataset folder's (a Blender path) poses were found from its photos (a
    capture tool's ``transforms.json``, LLFF: ``FOUND_POSE_LAYOUTS``), so that the job
    corrects them (``refine_poses``)."""
    captures = protocol().captures
    return captures.detect_layout(Path(bpy.path.abspath(folder))) in captures.FOUND_POSE_LAYOUTS


def start_textures(maps: dict[str, np.ndarray], coat: tuple[float, float] | None = None,
                   ior: float | None = None) -> dict[str, np.ndarray]:
    """The baked maps (``bake_start.MapBaker.maps``) as the job's starting textures
    (docs/protocol.md, section 8): ``start_kd`` linear base colour, ``start_ks`` glTF-packed
    (no occlusion, the roughness ``bake_start.start_maps`` gives, metallic), ``start_normal``
    tangent-space in [0, 1]; each float32 [H, W, 3], rows top-down; and ``start_coat``
    float32 [2] for a uniform clear coat ``coat`` (``MapBaker.coat_layer``), which the job
    keeps; ``start_ior`` float32 [1] for an IOR ``ior`` (``MapBaker.ior``), which it starts
    from."""
    maps = bake_start.start_maps(maps)
    occlusion = np.zeros_like(maps["roughness"])
    arrays = {"start_kd": np.ascontiguousarray(maps["base_color"], np.float32),
              "start_ks": np.stack([occlusion, maps["roughness"], maps["metallic"]],
                                   -1).astype(np.float32),
              "start_normal": np.ascontiguousarray(maps["normal"], np.float32)}
    if coat is not None:
        arrays["start_coat"] = np.asarray(coat, np.float32)
    if ior is not None:
        arrays["start_ior"] = np.asarray([ior], np.float32)
    return arrays


class SubmissionBuilder:
    """Builds one Optimize submission in ``steps`` calls of ``step`` (main thread only).

    Created when Optimize is pressed: the panel's choices, the target cameras, the reference
    and the start are fixed then (``subjects``): ``reference`` the object the targets show
    (None: not one object's), ``start`` ``SELECTED`` (``subject``, the active selected mesh,
    or its original when it is a result), ``BAKED`` (the reference's decimated, baked copy)
    or None (reconstruct). ``original`` is the object the result stands beside, ``object_name``
    its name. ``bakes``: the reference is baked onto a copy of the start, which the job is
    sent with its maps (``subjects.bakes_reference``); ``renders_start``: that copy is
    rendered from the target cameras too (``subjects.renders_start``). ``done`` counts the
    steps taken; the last sets ``submission``.
    """

    def __init__(self, context, settings):
        self.scene = context.scene
        self.choices = SimpleNamespace(**{name: getattr(settings, name) for name in CHOICES})
        self.source = settings.target_source
        self.dataset_path = settings.dataset_path
        self.size = training_size(self.scene, self.choices.train_resolution)
        """The renders' size (pixels, width x height), fixed when Optimize is pressed."""
        self.cameras = [] if self.source == "DATASET" else validate.target_cameras(context,
                                                                                   settings)
        subject = subjects.subject(context)
        self.subject = subject if subject is not None and subject.type == "MESH" else None
        self.reference = subjects.reference_object(context, settings)
        self.alone = settings.reference == "OBJECT" and self.source == "RENDER"
        self.start = (None if settings.mode == "reconstruct" else
                      subjects.start_kind(context, settings))
        if self.start == "SELECTED" and self.subject is None:
            self.start = None
        named = self.reference if self.start == "BAKED" else self.subject or context.active_object
        self.bakes = subjects.bakes_reference(self.start, self.subject, self.reference,
                                              self.source)
        self.renders_start = subjects.renders_start(self.source, self.bakes)
        # the mesh the reference is baked onto a copy of; whether that copy is decimated
        self._baked_onto = (None if not self.bakes else
                            self.reference if self.start == "BAKED" else self.subject)
        evaluated = (self._baked_onto.evaluated_get(context.evaluated_depsgraph_get())
                     if self._baked_onto is not None else None)
        self._decimates = evaluated is not None and (
            0 < self.choices.triangles < bake_start.triangle_count(evaluated.data))
        self._own_whole = self.start == "SELECTED" and self.bakes and not self._decimates
        self.unfit_uvs = (bake_start.unfit_uvs(self.subject, context.evaluated_depsgraph_get())
                          if self._own_whole else [])
        """Why the artist's own low-poly's UVs are not baked into (the copy baked onto is
        unwrapped anew: ``bake_start.unfit_uvs``); empty where they are or it is decimated."""
        self._notes = self._unfit_uvs_notes()
        self.original = named
        self.object_name = named.name if named is not None else ""
        self.done = 0
        self.submission: job_session.Submission | None = None
        self._views: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._world_read = False
        self._envmap: np.ndarray | None = None  # the world light, None where it is black
        self._targets: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._copy: bpy.types.Object | None = None  # the start baked onto, until exported
        self._baker: bake_start.MapBaker | None = None
        self._start_renders: list[np.ndarray] = []
        self._baked_material: bpy.types.Material | None = None  # the copy's, for its renders
        self._made = temporaries.Made()  # the copy, its mesh, its baked material and images
        self._render_data = export_scene.KeptRenderData(self.scene)  # through each run of renders

    def take_notes(self) -> list[str]:
        """What the artist is to be told and has not been yet, one sentence each (told once:
        Optimize tells those known when it is pressed, the run those a step finds)."""
        notes, self._notes = self._notes, []
        return notes

    def _unfit_uvs_notes(self) -> list[str]:
        if not self.unfit_uvs:
            return []
        name = self.subject.name
        if self.unfit_uvs == [bake_start.NO_UV_MAP]:
            return [f"{name!r} has no UV map: the start is a copy of it unwrapped by Smart UV "
                    "Project, and the result has those UVs."]
        return [f"The UVs of {name!r} are not baked into ({'; '.join(self.unfit_uvs)}): the "
                "start is a copy of it unwrapped anew by Smart UV Project, and the result has "
                "those UVs."]

    @property
    def steps(self) -> int:
        """How many steps the whole submission takes."""
        targets = len(self.cameras) if self.source == "RENDER" else 1
        baking = 1 + (self._baker.steps if self._baker else len(bake_start.MAPS))
        start_renders = len(self.cameras) if self.renders_start else 0
        return 1 + targets + (baking if self.bakes else 0) + start_renders + 1

    @property
    def text(self) -> str:
        """What the next step does, for the status line: e.g. 'rendering targets 3/24'."""
        if not self._world_read:
            return "reading the world light"
        if self.source == "RENDER" and len(self._views) < len(self.cameras):
            return f"rendering targets {len(self._views) + 1}/{len(self.cameras)}"
        if self._targets is None:
            return "reading targets"
        if self.bakes and self._copy is None:
            what = "the reference" if self.start == "BAKED" else "the selected mesh"
            if self._decimates:
                return f"decimating {what}"
            if self.start == "BAKED" or self.unfit_uvs:
                return f"copying {what} and unwrapping the copy (Smart UV Project)"
            return f"copying {what}: its UVs and shading kept"
        if self._baker is not None and not self._baker.finished:
            return self._baker.text
        if self._start_renders_left:
            return (f"rendering the start {len(self._start_renders) + 1}/"
                    f"{len(self.cameras)}")
        return "exporting the mesh" if self.start is not None else "packing the job"

    @property
    def _start_renders_left(self) -> bool:
        return self.renders_start and len(self._start_renders) < len(self.cameras)

    def step(self, context) -> bool:
        """Do the next step; whether the submission is complete (``submission`` is set)."""
        if self.submission is not None:
            return True
        if not self._world_read:
            self._envmap = self._world_light(context)
            self._world_read = True
        elif self._targets is None:
            self._targets = self._next_targets()
        elif self.bakes and self._copy is None:
            self._copy = self._start_copy()
            self._baker = bake_start.MapBaker(self.scene, self.reference, self._copy,
                                              int(self.choices.texture_resolution))
        elif self._baker is not None and not self._baker.finished:
            self._baker.step()
        elif self._start_renders_left:
            self._start_renders.append(self._render_start())
        else:
            self.submission = self._finish(context)
        self.done += 1
        return self.submission is not None

    def close(self) -> None:
        """Remove what the builder added to the scene (the baked copy, the bake's own
        leftovers) and put its Persistent Data setting back; safe to call at any point, and
        more than once."""
        self._render_data.release()
        if self._baker is not None:
            self._baker.close()
        self._made.remove_all()
        self._baked_material = self._copy = None

    def _world_light(self, context) -> np.ndarray | None:
        """The world light (``export_scene.export_world``), or None where the scene has none
        or it renders black (lamps light the scene: no light to start from); a ValueError
        where it renders black and is all the light (``validate.world_is_all_light``)."""
        world = self.scene.world
        if world is None:
            return None
        envmap = export_scene.export_world(self.scene)
        if np.any(envmap > 0):
            return envmap
        lamps = subjects.render_lamps(self.scene, context.view_layer)
        if validate.world_is_all_light(self.choices.light, self.source, lamps):
            raise ValueError(validate.black_world(world.name))
        return None

    def _hidden(self) -> list:
        start = self.subject if self.start == "SELECTED" else None
        return subjects.hidden_from_targets(self.scene, self.reference, self.alone, start)

    def _next_targets(self):
        """All the targets, (images, poses, intrinsics); with rendered targets, one more view
        per call and None until the last."""
        if self.source == "DATASET":
            return dataset_targets(self.dataset_path)
        if self.source == "CAMERA_IMAGES":
            images = export_scene.camera_images(self.cameras)
            size = (images.shape[2], images.shape[1])
            return (images, *export_scene.export_cameras(self.cameras, self.scene, size))
        camera = self.cameras[len(self._views)]
        self._render_data.keep()
        with subjects.hidden_from_render(self._hidden()):
            image = export_scene.render_view(self.scene, camera, self.size)
        self._views.append((image, *export_scene.export_camera(camera, self.scene, self.size)))
        if len(self._views) < len(self.cameras):
            return None
        self._render_data.release()  # before the bake, which renders its own way
        images, poses, intrinsics = (np.stack(column) for column in zip(*self._views,
                                                                          strict=True))
        return images, poses.astype(np.float32), intrinsics.astype(np.float32)

    def _render_start(self) -> np.ndarray:
        """The baked copy alone (every other object hidden from the render, the reference
        too), wearing its baked maps as the fit starts from them (``bake_start.start_maps`` in
        ``bake_start.baked_material``, under its uniform coat, at the IOR it starts from,
        ``_start_ior``), from the next target camera, at the targets' size, with the scene's
        engine and seed as the targets: float32 [H, W, 4] as ``export_scene.render_view``
        returns it."""
        start = self._copy
        if self._baked_material is None:
            self._baked_material = self._made.keep(bake_start.baked_material(
                f"{start.name} baked", bake_start.start_maps(self._baker.maps),
                self._baker.coat_layer, self._start_ior()))
            for node in self._baked_material.node_tree.nodes:
                if node.bl_idname == "ShaderNodeTexImage" and node.image is not None:
                    self._made.keep(node.image)
            start.data.materials.append(self._baked_material)
        others = [obj for obj in self.scene.objects
                  if subjects.draws_in_render(obj) and obj != start]
        camera = self.cameras[len(self._start_renders)]
        self._render_data.keep()
        with subjects.hidden_from_render(others), _temporarily(start, hide_render=False):
            return export_scene.render_view(self.scene, camera, self.size)

    def _start_copy(self) -> bpy.types.Object:
        """The mesh the reference is baked onto: the reference, or the selected mesh with its
        own shading, and its own UVs unless they are unfit (``unfit_uvs``), decimated to the
        panel's Triangles (copied as it is without a budget or under it), hidden in the
        viewport and from renders while it exists."""
        source = self._baked_onto
        budget = self.choices.triangles or subjects.triangle_count(
            source, bpy.context.evaluated_depsgraph_get())
        own = self.start == "SELECTED"
        copy = self._made.keep(bake_start.decimated_copy(
            source, budget, f"{source.name} diffrec start", keep_shading=own,
            keep_uvs=own and not self.unfit_uvs))
        self._made.keep(copy.data)
        if self._own_whole and not self.unfit_uvs:  # triangulated anew: checked as it is sent
            self.unfit_uvs = bake_start.unfit_uvs(copy, bpy.context.evaluated_depsgraph_get())
            if self.unfit_uvs:
                bake_start.unwrap_anew(copy)
                self._notes = self._unfit_uvs_notes()
        copy.hide_render = copy.hide_viewport = True
        return copy

    def _start_ior(self) -> float | None:
        """The reference's IOR the baked start carries (``MapBaker.ior``), where the job
        rasterizes: None under path-traced shading, which shades 1.5 and would refuse another
        (an old file's 1.45 is then read as 1.5, as before)."""
        return self._baker.ior if self.choices.shading != "path-traced" else None

    def _start_arrays(self, depsgraph) -> dict[str, np.ndarray]:
        """The start mesh's arrays (``export_scene.export_mesh``), and with a baked start its
        maps as the job's starting textures (docs/protocol.md, section 8)."""
        start = self._copy if self.bakes else self.subject
        if start is None:
            return {}
        mesh = export_scene.export_mesh(start, depsgraph)
        arrays = {"vertices": mesh.vertices, "faces": mesh.faces, "normals": mesh.normals,
                  "normal_faces": mesh.normal_faces}
        if mesh.uvs is not None:
            arrays.update(uvs=mesh.uvs, uv_faces=mesh.uv_faces)
        if self._baker is not None:
            arrays.update(start_textures(self._baker.maps, self._baker.coat_layer,
                                         self._start_ior()))
        return arrays

    def _finish(self, context) -> job_session.Submission:
        images, poses, intrinsics = self._targets
        arrays = {"images": images, "cameras": poses, "intrinsics": intrinsics}
        if self.renders_start:
            arrays["start_images"] = np.stack(self._start_renders)
        try:
            arrays.update(self._start_arrays(context.evaluated_depsgraph_get()))
        finally:
            self.close()
        if self._envmap is not None:
            arrays["envmap"] = self._envmap
        lamps = subjects.render_lamps(self.scene, context.view_layer)
        settings = panel_fields.optimize_settings(self.choices, "envmap" in arrays, lamps)
        if self.source == "DATASET" and poses_found(self.dataset_path):
            settings["refine_poses"] = "on"  # the server sees arrays, not the capture
        return job_session.Submission({"task": "optimize", "settings": settings,
                                       "label": self.object_name}, arrays)
