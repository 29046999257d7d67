"""Know before you press: what an Optimize job will send and about how long it will take.

``estimate`` is pure arithmetic on the job's sizes; ``for_scene`` reads them from the panel's
settings and the scene (main thread, cheap enough for a panel's ``draw``). Time per iteration
grows with the pixels an iteration renders (batch x training width x height); the seconds
per iteration per megapixel are the server's own, measured on the artist's last job
(``scene.diffrec.seconds_per_megapixel``), else CALIBRATION_S_PER_MEGAPIXEL
(docs/BENCHMARKS.md, "Pre-submit estimate": scripts/bench_estimate.py shows the time's
proportion to the pixels). A path-traced pass (Shading: Path-traced) costs the backend's
``settings.PATH_TRACED_COST`` rasterized iterations per iteration, and the fit of the
textures' mip levels after the last pass (``mip_iterations`` steps, at most the textured
pass's iterations) ``MIP_STEP_COST`` each, as the job's own ETA counts them. A pass the
stopping rule may end (the preset's ``plateau_window``) counts to its typical end
(``settings.expected_iterations``), as the job's own ETA does; the most it may take is said
beside it. What Blender does here before the job starts (the target renders, a bake, the
start renders) is named, not timed: Cycles' time per render is the scene's own.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import export_scene, subjects, submission, validate
from .core import panel_fields
from .core.wire import protocol

CALIBRATION_S_PER_MEGAPIXEL = 3.0
"""Seconds per iteration per megapixel of a batch on an idle 2-core CPU: 80 ms per iteration
at 128 x 128, batch 2 (docs/BENCHMARKS.md, "Pre-submit estimate"), rounded up for a learned
light. A GPU server is one to two orders of magnitude faster: its own measured speed
replaces this after the first job."""
CALIBRATION_S_PER_TRIANGLE = 0.5e-6
"""Seconds per iteration per triangle of the start, for each view of a batch, on the same
CPU: the torch rasterizer took 0.05 s an iteration at 9.5k triangles and 0.97 s at 1M (128 px,
batch 2; docs/BENCHMARKS.md, "Heavy objects"), where the pixels alone
say 0.1 s. Counted with the calibration only: a measured speed holds the artist's own."""
MANY_TRIANGLES = 1_000_000
"""Past this many triangles the panel warns: the upload and each iteration grow with them."""
MANY_TO_UNWRAP = 100_000
"""Past this many triangles without a UV map the panel warns: the server unwraps them itself,
and a 1M-triangle sculpt ran out the unwrap's time limit and got a grid of 0.4 texels a
triangle (docs/BENCHMARKS.md, "Heavy objects")."""
LONG_JOB_S = 3600.0
"""Past this estimated time the panel warns."""
DEFAULT_ENVMAP = (512, 256)
"""The light sent when the world has no image of its own: baked at this size."""
MIP_STEP_COST = 0.3
"""A step of the backend's fit of the mip levels in rasterized training iterations: a copy
of ``STEP_COST`` in backend/diffrec/pipeline/mip_fit.py (a module that imports torch, which
the add-on never does); tests/addon/test_panel_fields.py checks that the two agree."""


@dataclass(frozen=True)
class Estimate:
    """An Optimize job's sizes: ``triangles`` of the starting mesh (None: none sent),
    ``views`` target images of ``width`` x ``height`` pixels (the training size),
    ``upload_bytes`` all the arrays together, ``seconds`` the whole job's training time
    (``measured``: from the server's own speed, else the calibration), ``longest_seconds``
    if every pass runs all its iterations (the stopping rule ends most sooner), ``baked``
    the reference's triangles Blender bakes from here first (None: no baked start), and
    decimates too with ``bake_decimates`` (a copy of the reference under Triangles),
    ``fitted_triangles`` those the backend decimates the mesh sent to (None: it fits that),
    ``without_uvs``: the mesh sent has no UV map (the server unwraps it), ``target_renders``:
    Blender renders the ``views`` targets here first, ``start_renders``: and the start from
    the same cameras."""

    triangles: int | None
    views: int
    width: int
    height: int
    upload_bytes: int
    seconds: float
    measured: bool
    longest_seconds: float
    baked: int | None = None
    without_uvs: bool = False
    target_renders: bool = False
    start_renders: bool = False
    bake_decimates: bool = False
    fitted_triangles: int | None = None

    def lines(self) -> list[str]:
        """What the panel shows, one short line each."""
        mesh = f"{self.triangles:,} triangles" if self.triangles is not None else "no mesh"
        source = "at the server's speed" if self.measured else "calibrated on a 2-core CPU"
        lines = [f"{mesh} · {self.views} views at {self.width}×{self.height}",
                 f"upload {_size(self.upload_bytes)} · {_duration(self.seconds)} ({source})"]
        if _duration(self.longest_seconds) != _duration(self.seconds):
            lines.append(f"up to {_duration(self.longest_seconds)} if no pass stops early")
        local = self.local_work()
        if local:
            lines.append(f"first, in Blender: {local} (Cycles, not counted above)")
        return lines

    def local_work(self) -> str:
        """What Blender renders and bakes before the job is sent, in words ("" for none)."""
        steps = [f"{self.views} target renders"] if self.target_renders else []
        if self.baked is not None:
            steps.append("a bake")
        if self.start_renders:
            steps.append(f"{self.views} start renders")
        return " and ".join(", ".join(steps).rsplit(", ", 1))

    def warnings(self) -> list[str]:
        """Sentences for what makes the job heavy (empty: nothing to warn of)."""
        warnings = []
        if self.baked is not None and self.baked > MANY_TRIANGLES:
            work = "decimate and bake" if self.bake_decimates else "bake from"
            warnings.append(f"{self.baked:,} triangles to {work} here first: Blender "
                            "pauses for seconds to minutes at each of those steps")
        fitted = self.fitted_triangles or self.triangles  # what the server unwraps and fits
        if self.without_uvs and fitted is not None and fitted > MANY_TO_UNWRAP:
            warnings.append(f"{fitted:,} triangles without a UV map: the server "
                            "unwraps them itself, slowly and with few texels each; set "
                            "Triangles to start from a baked copy, or unwrap the mesh first")
        if self.triangles is not None and self.triangles > MANY_TRIANGLES:
            warnings.append(
                f"{self.triangles:,} triangles: decimate the mesh first, or expect a long "
                "upload and slow iterations" if self.fitted_triangles is None else
                f"{self.triangles:,} triangles to upload (the server decimates them to "
                f"{self.fitted_triangles:,}): decimate the mesh first for a shorter upload")
        if self.seconds > LONG_JOB_S:
            warnings.append(f"{_duration(self.seconds)}: lower the iterations, batch or "
                            "resolution, or choose a faster preset")
        return warnings


def _size(count: int) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{count} B"


def _duration(seconds: float) -> str:
    minutes = round(seconds / 60)
    if minutes < 1:
        return "under a minute"
    if minutes < 60:
        return f"about {minutes} min"
    return f"about {minutes // 60} h {minutes % 60:02d} min"


def estimate(*, triangles: int | None, vertices: int, views: int, width: int, height: int,
             envmap: tuple[int, int] | None, batch: int, iterations: int, passes: int,
             plateau_window: int = 0, path_iterations: int = 0,
             seconds_per_megapixel: float = 0.0, start_renders: bool = False,
             baked: int | None = None, start_texture: int = 0,
             without_uvs: bool = False, mip_iterations: int = 0,
             target_renders: bool = False, bake_decimates: bool = False,
             fitted_triangles: int | None = None) -> Estimate:
    """The estimate of a job of these sizes (``envmap`` (width, height) or None: no light
    sent; ``passes`` rasterized passes of at most ``iterations``, which the stopping rule's
    ``plateau_window`` (0: off) may end sooner, then ``path_iterations`` of the path-traced
    pass, then ``mip_iterations`` steps of the mip levels' fit; ``seconds_per_megapixel`` the
    measured rasterized speed, 0: use the calibration, which counts the triangles too;
    ``baked``: the reference's triangles a baked start is made from (``bake_decimates``: and
    decimated to), ``start_texture`` its maps' side in texels; ``without_uvs``: the mesh sent
    has no UV map; ``target_renders``: Blender renders the targets; ``fitted_triangles``:
    the backend decimates the mesh sent to these, None: it fits the mesh sent). The upload
    counts float32 RGBA images (twice with ``start_renders``: the start's renders from the
    same cameras), the mesh (float32 positions, normals and UVs, int32 corners of each), a
    baked start's three float32 RGB maps, a float32 RGB light."""
    images = views * (2 if start_renders else 1)
    upload = (images * width * height * 16 + vertices * (12 + 12 + 8) + (triangles or 0) * 36
              + start_texture ** 2 * 36)
    if envmap is not None:
        upload += envmap[0] * envmap[1] * 12
    wire = protocol().settings
    per_iteration = ((seconds_per_megapixel or CALIBRATION_S_PER_MEGAPIXEL)
                     * batch * width * height / 1e6)
    if not seconds_per_megapixel:
        fitted = triangles if fitted_triangles is None else fitted_triangles
        per_iteration += CALIBRATION_S_PER_TRIANGLE * batch * (fitted or 0)
    after = path_iterations * wire.PATH_TRACED_COST + mip_iterations * MIP_STEP_COST
    expected = wire.expected_iterations(iterations, plateau_window)
    return Estimate(triangles, views, width, height, upload,
                    (expected * passes + after) * per_iteration, seconds_per_megapixel > 0,
                    (iterations * passes + after) * per_iteration, baked, without_uvs,
                    target_renders, start_renders, bake_decimates, fitted_triangles)


def _triangles(context, obj) -> tuple[int, int]:
    """(triangles, vertices) of a mesh object as evaluated (modifiers applied), counting each
    n-gon as n - 2 triangles, as the export triangulates it."""
    mesh = obj.evaluated_get(context.evaluated_depsgraph_get()).data
    return len(mesh.loops) - 2 * len(mesh.polygons), len(mesh.vertices)  # sum of (n - 2)


def _envmap_size(scene) -> tuple[int, int] | None:
    if scene.world is None:
        return None
    node, _background = export_scene.environment_node(scene.world)
    image = node.image if node is not None else None
    return tuple(image.size) if image is not None and image.size[0] else DEFAULT_ENVMAP


def for_scene(context, settings) -> Estimate | None:
    """The estimate of pressing Optimize now; None when the targets are a dataset folder (its
    size is known once read)."""
    if settings.target_source == "DATASET":
        return None
    start = None if settings.mode == "reconstruct" else subjects.start_kind(context, settings)
    reference, selected = subjects.reference_object(context, settings), subjects.subject(context)
    subject = reference if start == "BAKED" else selected
    sent = subject is not None and subject.type == "MESH" and start is not None
    bakes = sent and subjects.bakes_reference(start, selected, reference,
                                              settings.target_source)
    triangles, vertices = _triangles(context, subject) if sent else (None, 0)
    baked = None  # the reference's triangles Blender bakes (and decimates) here first
    if bakes:
        baked = triangles if start == "BAKED" else _triangles(context, reference)[0]
    decimates = triangles is not None and 0 < settings.triangles < triangles
    fitted = settings.triangles if decimates else None  # the backend's, of a mesh sent whole
    if decimates and bakes:  # Blender's copy, sent decimated: about 2 : 1
        triangles, vertices, fitted = settings.triangles, settings.triangles // 2 + 2, None
    width, height = submission.training_size(context.scene, settings.train_resolution)
    traced = settings.mode == "materials" and settings.shading == "path-traced"
    iterations = _pass_iterations(settings, bakes)
    return estimate(triangles=triangles, vertices=vertices,
                    views=len(validate.target_cameras(context, settings)), width=width,
                    height=height, envmap=_envmap_size(context.scene), batch=settings.batch,
                    iterations=iterations,
                    passes=2 if settings.mode == "reconstruct" else 1,
                    plateau_window=panel_fields.plateau_window(settings.preset, settings.mode),
                    path_iterations=_default("path_iterations") if traced else 0,
                    seconds_per_megapixel=settings.seconds_per_megapixel,
                    start_renders=subjects.renders_start(settings.target_source, bakes),
                    baked=baked, start_texture=int(settings.texture_resolution) if bakes else 0,
                    without_uvs=sent and not bakes and not subject.data.uv_layers,
                    mip_iterations=min(_default("mip_iterations"), iterations),
                    target_renders=settings.target_source == "RENDER",
                    bake_decimates=bakes and start == "BAKED" and decimates,
                    fitted_triangles=fitted)


def _pass_iterations(settings, bakes: bool) -> int:
    """The panel's Iterations, or fewer where the job starts from a bake (``bakes``; in
    materials or refine): the backend's ``given_start_iterations`` (the panel does not set
    it)."""
    cap = _default("given_start_iterations")
    if settings.mode != "reconstruct" and bakes and cap:
        return min(settings.iterations, cap)
    return settings.iterations


def _default(setting: str):
    """The backend's default of ``setting``, one the panel does not set (nor a preset)."""
    return protocol().settings.FIELDS[setting].default
