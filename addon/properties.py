"""Per-scene settings (``scene.diffrec``), saved in the .blend, job list included, so a
reopened file can re-attach to its jobs."""

from __future__ import annotations

import bpy
from bpy.props import (
    BoolProperty,
    CollectionProperty,
    EnumProperty,
    FloatProperty,
    IntProperty,
    PointerProperty,
    StringProperty,
)

from .core import panel_fields
from .core.panel_fields import default
from .core.wire import protocol

MODE_TEXT = {
    "materials": ("Materials", "Keep the mesh, bake its appearance into PBR textures"),
    "refine": ("Refine", "Optimise the mesh's vertices and the textures together"),
    "reconstruct": ("Reconstruct", "Find the surface from scratch, then refine"),
}
"""The mode menu's words, per mode of the backend's ``settings.MODES``."""
SHADING_TEXT = {
    "rasterized": ("Fast", "Rasterized with the split-sum light: where the object shades "
                           "itself, the shadow ends up in the textures"),
    "path-traced": ("Path-traced", "Then path-traced by Mitsuba 3 (shadows, one bounce): "
                                   "textures that relight better on matte objects; slower, "
                                   "and the backend needs the pathtracing extra"),
}
"""The shading menu's words, per renderer of the backend's ``settings.RENDERERS``."""
TEXTURE_SIZES = (256, 512, 1024, 2048, 4096)
"""The texture menu's sizes, texels (every preset's among them)."""

# the menus, made once (bpy evaluates the properties' annotations, which must be plain names)
_MODE_ITEMS = [(mode, *MODE_TEXT[mode]) for mode in protocol().settings.MODES]
_SHADING_ITEMS = [(name, *SHADING_TEXT[name]) for name in protocol().settings.RENDERERS]
_PRESET_ITEMS = panel_fields.preset_items()
_TEXTURE_ITEMS = [(str(size), f"{size} px", "") for size in TEXTURE_SIZES]


def _apply_preset(settings, _context) -> None:
    """The ``preset`` update: fill the fields the preset sets."""
    if settings.preset == panel_fields.CUSTOM:
        return
    for name, value in panel_fields.preset_values(settings.preset, settings.mode).items():
        setattr(settings, name, value)


def _follow_mode(settings, _context) -> None:
    """The ``mode`` update: the preset's pass length for the new mode, unless the artist set
    their own (``panel_fields.iterations_for_mode``)."""
    iterations = panel_fields.iterations_for_mode(settings.preset, settings.mode,
                                                  settings.iterations)
    if iterations != settings.iterations:
        settings.iterations = iterations


class DiffrecJob(bpy.types.PropertyGroup):
    """A job submitted from this .blend, or one of the server's listed by Refresh."""

    job_id: StringProperty(name="Job")
    mode: StringProperty(name="Mode")
    state: StringProperty(name="State", default="submitted")
    object_name: StringProperty(name="Object", description="The object the job started from")
    original: PointerProperty(
        name="Original", type=bpy.types.Object,
        description="The object the job started from, followed through renames (files from "
                    "before it: found by Object's name)")
    result: PointerProperty(name="Result", type=bpy.types.Object,
                            description="The object its result was imported as")
    imported: BoolProperty(name="Imported", default=False)
    message: StringProperty(name="Message", description="Why the job failed or stopped")
    progress: FloatProperty(name="Progress", subtype="PERCENTAGE", min=0, max=100)
    created: FloatProperty(name="Created", description="When it was submitted (Unix seconds)")
    megapixels: FloatProperty(
        name="Megapixels",
        description="Pixels one iteration renders (batch x training resolution), in millions: "
                    "what the measured speed is per",
        default=0.0,
    )
    on_server: BoolProperty(
        name="On the server",
        description="The server has the job (a submit that failed never reached it)",
        default=False,
    )
    from_server: BoolProperty(
        name="From the server",
        description="Listed by the server, not submitted from this file",
        default=False,
    )
    light: StringProperty(
        name="Light",
        description="The job's light setting (fixed, learn, learn-from-envmap): whether its "
                    "result brings a learned world",
    )


class DiffrecSceneSettings(bpy.types.PropertyGroup):
    target_source: EnumProperty(
        name="Targets",
        items=[
            ("RENDER", "Render cameras", "Render each camera with the scene's render engine"),
            ("CAMERA_IMAGES", "Camera images", "Use the image attached to each camera"),
            ("DATASET", "Dataset folder", "A NeRF-style folder with transforms_train.json"),
        ],
        default="RENDER",
    )
    dataset_path: StringProperty(name="Dataset", subtype="DIR_PATH")
    cameras: EnumProperty(
        name="Cameras",
        items=[("ALL", "All", "Every camera in the scene"), ("SELECTED", "Selected", "")],
        default="ALL",
    )
    train_resolution: IntProperty(
        name="Resolution",
        description="Longest side of the training images, in pixels",
        default=default("train_resolution"),
        min=16,
        max=4096,
    )
    mode: EnumProperty(
        name="Mode",
        items=_MODE_ITEMS,
        default=default("mode"),
        update=_follow_mode,
    )
    preset: EnumProperty(
        name="Preset",
        items=_PRESET_ITEMS,
        default=default("preset"),
        update=_apply_preset,
    )
    iterations: IntProperty(name="Iterations",
                            description="The most iterations a pass runs: Preview and Standard "
                                        "end a pass sooner once it stops improving",
                            default=default("iterations"), min=1, max=1_000_000)
    batch: IntProperty(name="Batch", description="Views per iteration",
                       default=default("batch"), min=1, max=64)
    light_resolution: IntProperty(
        name="Light",
        description="Side of each face of the learned environment cube, in pixels",
        default=default("light_resolution"),
        min=32,
        max=2048,
    )
    grid: IntProperty(
        name="Grid",
        description="Reconstruct: resolution of the grid the surface is found in",
        default=default("grid"),
        min=8,
        max=256,
        step=2,
    )
    gpus: IntProperty(
        name="GPUs",
        description="GPUs one job trains on together (data-parallel); the backend's machine "
                    "needs that many",
        default=default("gpus"),
        min=1,
        max=64,
    )
    shading: EnumProperty(
        name="Shading",
        description="Materials: how the fit renders the object",
        items=_SHADING_ITEMS,
        default=default("shading"),
    )
    texture_resolution: EnumProperty(
        name="Texture",
        items=_TEXTURE_ITEMS,
        default=default("texture_resolution"),
    )
    light: EnumProperty(
        name="Light",
        items=[
            ("AUTO", "Auto", "Keep the world's light where the targets are renders lit by it "
                             "alone (it is the true light), else learn it (photos, datasets, "
                             "renders lit by lamps too, which are not sent)"),
            ("LEARN", "Learn", "Optimise the environment light, starting from the world"),
            ("KEEP", "Keep HDRI", "Keep the world's light fixed"),
        ],
        default="AUTO",
    )
    triangles: IntProperty(
        name="Triangles",
        description="The result's triangle budget (0: keep the start's count). With Start "
                    "From Auto, a budget starts the fit from the reference decimated to it "
                    "and baked by Cycles",
        default=0,
        min=0,
        max=100_000_000,
    )
    reference: EnumProperty(
        name="Reference",
        description="What the target renders show",
        items=[
            ("SCENE", "Scene", "The scene as it renders"),
            ("OBJECT", "Object Alone", "The reference object rendered alone: every other "
                                       "object with geometry is hidden from the target "
                                       "renders (lights and the world stay)"),
        ],
        default="SCENE",
    )
    reference_object: PointerProperty(
        name="Reference Object",
        description="The object the targets show and the bake reads (empty: the selected "
                    "mesh)",
        type=bpy.types.Object,
        poll=lambda _settings, obj: obj.type == "MESH",
    )
    start_from: EnumProperty(
        name="Start From",
        description="The mesh the fit begins from (Reconstruct finds its own)",
        items=[
            ("AUTO", "Auto", "The selected mesh when it is another object than the "
                             "Reference Object (your own low-poly, the reference baked onto "
                             "it); else the reference decimated and baked when Triangles is "
                             "set, else the selected mesh"),
            ("SELECTED", "Selected Mesh", "The selected mesh, your own low-poly: with a "
                                          "Reference Object other than it, the reference "
                                          "baked by Cycles onto a copy of it, its UVs kept; "
                                          "else sent as it is (decimated by the backend "
                                          "when over the budget)"),
            ("BAKED", "Baked Copy", "A copy of the reference decimated to Triangles, its base "
                                    "colour, roughness, metallic, clear coat and normals baked "
                                    "by Cycles: the fit starts where Blender's own bake ends"),
        ],
        default="AUTO",
    )
    jobs: CollectionProperty(type=DiffrecJob)
    # what the followed job last reported: pass, iteration, loss, PSNR, ETA
    status: StringProperty(name="Status")
    progress: FloatProperty(name="Progress", subtype="PERCENTAGE", min=0, max=100)
    seconds_per_megapixel: FloatProperty(
        name="Measured speed",
        description="Seconds per iteration per million pixels of a batch, as the server last "
                    "measured (0: not measured yet, the estimate uses the documented "
                    "calibration)",
        default=0.0,
        min=0.0,
    )
    live_mesh: BoolProperty(
        name="Live mesh",
        description="Show the mesh being optimised in the viewport while the job runs",
        default=True,
    )
    save_glb: BoolProperty(
        name="Save GLB",
        description="Also save the result as a .glb file beside the .blend",
        default=False,
    )
    # the two worlds Switch Light swaps (worlds.py); pointing at them keeps both in the file
    artist_world: PointerProperty(name="Your World", type=bpy.types.World)
    learned_world: PointerProperty(name="Learned Light", type=bpy.types.World)


CLASSES = (DiffrecJob, DiffrecSceneSettings)


_register_classes, _unregister_classes = bpy.utils.register_classes_factory(CLASSES)


def register() -> None:
    _register_classes()
    bpy.types.Scene.diffrec = PointerProperty(type=DiffrecSceneSettings)


def unregister() -> None:
    del bpy.types.Scene.diffrec
    _unregister_classes()
