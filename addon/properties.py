"""Per-scene settings (``scene.diffrec``), saved in the .blend, job list included, so a
reopened file can re-attach to its jobs."""

from __future__ import annotations

import sys

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

from .wire import protocol

# the panel's fields a preset fills -> the backend's setting names
PRESET_FIELDS = {"iterations": "iterations", "texture_resolution": "texture_res",
                 "train_resolution": "train_res", "batch": "batch", "light_resolution": "light_res",
                 "grid": "dmtet_grid"}


def preset_values(preset: str) -> dict:
    """The panel's values for ``preset`` (an enum identifier of ``preset``, not CUSTOM), read
    from the backend's own table, ``diffrec.protocol.settings.PRESETS``. Raises ImportError
    when the protocol package cannot load (it needs pyzmq)."""
    table = protocol().settings.PRESETS[preset.lower()]
    values = {name: table[key] for name, key in PRESET_FIELDS.items()}
    values["texture_resolution"] = str(values["texture_resolution"])  # an enum identifier
    return values


def _apply_preset(settings, _context) -> None:
    """The ``preset`` update: fill the fields the preset sets. An update callback cannot
    report to the user, so a failure to read the table is put in the status line."""
    if settings.preset == "CUSTOM":
        return
    try:
        values = preset_values(settings.preset)
    except ImportError as exc:
        settings.status = f"preset not applied, the diffrec protocol did not load: {exc}"
        print(f"diffrec: {settings.status}", file=sys.stderr)
        return
    for name, value in values.items():
        setattr(settings, name, value)


class DiffrecJob(bpy.types.PropertyGroup):
    """A job submitted from this .blend, or one of the server's listed by Refresh."""

    job_id: StringProperty(name="Job")
    mode: StringProperty(name="Mode")
    state: StringProperty(name="State", default="submitted")
    object_name: StringProperty(name="Object", description="The object the job started from")
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
        default=512,
        min=16,
        max=4096,
    )
    mode: EnumProperty(
        name="Mode",
        items=[
            ("materials", "Materials", "Keep the mesh, bake its appearance into PBR textures"),
            ("refine", "Refine", "Optimise the mesh's vertices and the textures together"),
            ("reconstruct", "Reconstruct", "Find the surface from scratch, then refine"),
        ],
        default="materials",
    )
    preset: EnumProperty(
        name="Preset",
        items=[
            ("PREVIEW", "Preview", "Few iterations, small textures: minutes on a CPU"),
            ("STANDARD", "Standard", ""),
            ("HIGH", "High", "As the published results"),
            ("CUSTOM", "Custom", "Your own settings"),
        ],
        default="STANDARD",
        update=_apply_preset,
    )
    iterations: IntProperty(name="Iterations", description="Iterations per pass", default=2000,
                            min=1, max=1_000_000)
    batch: IntProperty(name="Batch", description="Views per iteration", default=4, min=1,
                       max=64)
    light_resolution: IntProperty(
        name="Light",
        description="Side of each face of the learned environment cube, in pixels",
        default=256,
        min=32,
        max=2048,
    )
    grid: IntProperty(
        name="Grid",
        description="Reconstruct: resolution of the grid the surface is found in",
        default=64,
        min=8,
        max=256,
        step=2,
    )
    gpus: IntProperty(
        name="GPUs",
        description="GPUs one job trains on together (data-parallel); the backend's machine "
                    "needs that many",
        default=1,
        min=1,
        max=64,
    )
    texture_resolution: EnumProperty(
        name="Texture",
        items=[(str(s), f"{s} px", "") for s in (256, 512, 1024, 2048, 4096)],
        default="1024",
    )
    light: EnumProperty(
        name="Light",
        items=[
            ("LEARN", "Learn", "Optimise the environment light, starting from the world"),
            ("KEEP", "Keep HDRI", "Keep the world's light fixed"),
        ],
        default="LEARN",
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
