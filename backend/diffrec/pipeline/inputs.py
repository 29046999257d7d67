"""A run's inputs in memory, and the command line's way of loading them from files.

``optimize`` only ever takes ``Inputs``: the job server builds them from submitted arrays
(``pipeline.job_arrays``), the command line from its ``Sources`` (``load_inputs``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from diffrec import raster
from diffrec.camera import orbit_cameras
from diffrec.errors import UserError
from diffrec.io import Material, read_gltf, read_image, read_mtl, read_obj
from diffrec.light.equirect import from_nvdiffrec_layout
from diffrec.mesh import Mesh
from diffrec.mesh.box import fit_to_box
from diffrec.pipeline.captures import capture_layout
from diffrec.pipeline.config import RunConfig, Sources
from diffrec.pipeline.loading import load_dataset
from diffrec.pipeline.reference_cameras import (
    REFERENCE_CAMERA_RADIUS,
    REFERENCE_ELEVATIONS_DEGREES,
    REFERENCE_FOV_DEGREES,
)
from diffrec.pipeline.reference_views import render_reference_views
from diffrec.pipeline.renderer_gap import matching_start_renders
from diffrec.pipeline.views import HELD_OUT_SHARE, Views, hold_out_views
from diffrec.protocol.capture_tools import SPLIT_KEYS
from diffrec.protocol.captures import CAPTURE_TOOLS_FILE, FOUND_POSE_LAYOUTS
from diffrec.protocol.file_checks import FileCheckError, read_json
from diffrec.protocol.settings import Settings

log = logging.getLogger(__name__)


@dataclass
class Inputs:
    """What a run optimises against. ``envmap``: equirect [H, W, 3] linear (None: learn).
    ``test`` is None only for inputs loaded to be sent to a server, which holds out its own.
    ``base_material``: the base mesh's own material (``init_textures`` "base_mesh").
    ``start_renders``: the base mesh rendered by the targets' renderer, a view per training
    view, matched by name (``pipeline.renderer_gap``; None: none). ``poses_found``: the
    training views' poses were found from photos (``protocol.captures.FOUND_POSE_LAYOUTS``), so
    ``refine_poses`` "auto" corrects them."""

    train: Views
    test: Views | None
    base_mesh: Mesh | None = None
    envmap: torch.Tensor | None = None
    base_material: Material | None = None
    start_renders: Views | None = None
    poses_found: bool = False


def read_mesh(path: str | Path):
    """An Asset from an OBJ, GLB or glTF file."""
    path = Path(path)
    if path.suffix.lower() == ".obj":
        return read_obj(path)
    if path.suffix.lower() in (".glb", ".gltf"):
        return read_gltf(path)
    raise UserError(f"cannot read mesh {path}: use .obj, .glb or .gltf")


def target_folder(sources: Sources) -> str | None:
    """The capture folder whose images are the targets: ``dataset``, or a ``ref_mesh`` that
    names a folder; None where the targets are renders of a mesh."""
    if sources.dataset:
        return sources.dataset
    return sources.ref_mesh if sources.ref_mesh and Path(sources.ref_mesh).is_dir() else None


def has_test_split(folder: str | Path) -> bool:
    """Whether the capture in ``folder`` has a test split of its own: a NeRF-style folder's
    ``transforms_test.json``, or a capture tool's ``transforms.json`` that lists one
    (``test_filenames`` or ``val_filenames``); an LLFF capture or a COLMAP model has none,
    nor has a ``transforms.json`` that cannot be parsed (reading its train split says why)."""
    layout = capture_layout(folder)
    if layout == "nerf":
        return (Path(folder) / "transforms_test.json").exists()
    if layout != "nerfstudio":
        return False
    try:
        transforms = read_json(Path(folder) / CAPTURE_TOOLS_FILE)
    except FileCheckError:
        return False
    return isinstance(transforms, dict) and any(key in transforms for key in SPLIT_KEYS["test"])


def _held_out(dataset: str, views: Views, settings: Settings) -> tuple[Views, Views]:
    """``(train, test)`` of the views of a capture without a test split, logged."""
    train, test = hold_out_views(views, settings.size.test_views, settings.run.seed)
    log.info("%s has no test split: %d of its %d views held out for validation (test_views "
             "%d, at most one in %d, chosen at random from seed %d): %s", dataset, len(test),
             len(views), settings.size.test_views, HELD_OUT_SHARE, settings.run.seed,
             ", ".join(test.names))
    return train, test


def load_inputs(config: RunConfig, ctx: raster.RasterContext, hold_out: bool = True) -> Inputs:
    """Targets and starting mesh from the config's sources: a capture folder
    (``target_folder``) or a reference mesh rendered under ``envmap`` (scaled by
    ``env_scale``; its material replaced by ``ref_material``'s first), at the settings'
    ``train_res``. ``envmap`` is returned in Blender's layout whatever ``envmap_layout`` it
    was read in.

    ``hold_out=False`` (what ``diffrec submit`` sends; the server holds out views itself):
    ``train`` has all the target views (a dataset's ``transforms_train.json`` whole, or
    ``views`` renders of a reference mesh), ``test`` is None, and a dataset's
    ``transforms_test.json`` is not read. Otherwise a capture's own test split
    (``has_test_split``) is read as any split is, its errors raised; only a capture without
    one has training views held out (``views.hold_out_views``).
    """
    sources, settings = config.sources, config.settings
    envmap = None
    if sources.envmap:
        envmap = torch.from_numpy(read_image(sources.envmap)[..., :3].copy()) * sources.env_scale
        if sources.envmap_layout == "nvdiffrec":
            envmap = from_nvdiffrec_layout(envmap)
    base_asset = read_mesh(sources.base_mesh) if sources.base_mesh else None
    base = base_asset.mesh if base_asset else None
    base_material = base_asset.materials[0] if base_asset and base_asset.materials else None
    dataset = target_folder(sources)
    if sources.start_renders and not dataset:
        raise UserError("start renders go with a dataset: the targets they correct")
    if dataset:
        train = load_dataset(dataset, "train", settings.size.train_res, near_far=sources.near_far,
                             mask_maker=sources.mask_maker)
        given = (load_dataset(sources.start_renders, "train", settings.size.train_res,
                              near_far=sources.near_far, auto_masks=False)
                 if sources.start_renders else None)
        test = None
        if hold_out and has_test_split(dataset):
            test = load_dataset(dataset, "test", settings.size.train_res,
                                near_far=sources.near_far, mask_maker=sources.mask_maker)
        elif hold_out:
            train, test = _held_out(dataset, train, settings)
        start = None if given is None else matching_start_renders(given, train)
        return Inputs(train, test, base, envmap, base_material, start,
                      poses_found=capture_layout(dataset) in FOUND_POSE_LAYOUTS)
    if sources.ref_mesh:
        if envmap is None:
            raise UserError("rendering a reference mesh needs an envmap (an HDRI) to light it")
        asset = read_mesh(sources.ref_mesh)
        if sources.ref_material:
            asset.materials = read_mtl(sources.ref_material)[:1]
        fitted, transform = fit_to_box(asset.mesh, size=2.0)
        asset.mesh = fitted
        if base is not None:
            base = base.replace(positions=transform.apply(base.positions))
        near, far = sources.near_far or (0.1, 1000.0)

        def views(count, seed):
            cameras = orbit_cameras(count, REFERENCE_CAMERA_RADIUS, settings.size.train_res,
                                    fov_degrees=REFERENCE_FOV_DEGREES, seed=seed,
                                    elevations_degrees=REFERENCE_ELEVATIONS_DEGREES,
                                    near=near, far=far)
            return render_reference_views(ctx, asset, envmap, cameras.to(ctx.device), spp=2,
                                          layered=settings.layered_bsdf())

        test = views(settings.size.test_views, settings.run.seed + 1) if hold_out else None
        train = views(settings.size.views, settings.run.seed)
        return Inputs(train, test, base, envmap, base_material)
    raise UserError("no targets: give a dataset folder (dataset) or a reference mesh (ref_mesh)")
