"""Tiny stand-in captures in each layout diffrec reads: a striped ball rendered by diffrec's own
renderer under a two-tone sky, written as an LLFF capture (images, a downscaled copy, masks,
poses_bounds.npy), a NeRF-style folder, or a mesh + HDRI pair."""

import json
from pathlib import Path

import numpy as np
import torch

from diffrec import raster
from diffrec.camera import Cameras, look_at
from diffrec.io import Asset, Material, write_image, write_obj
from diffrec.light.equirect import equirect_pixel_directions
from diffrec.mesh.primitives import uv_sphere
from diffrec.pipeline.reference_views import render_reference_views
from diffrec.pipeline.views import resize_rgba
from diffrec.protocol.captures import write_llff

RADIUS = 0.8  # the ball's radius; it sits at the origin


def ball_asset() -> Asset:
    """A UV sphere of ``RADIUS`` with four horizontal colour bands."""
    kd = torch.empty(8, 8, 3)
    for band, colour in enumerate(((0.8, 0.2, 0.1), (0.1, 0.6, 0.2), (0.9, 0.8, 0.2),
                                   (0.1, 0.2, 0.7))):
        kd[2 * band : 2 * band + 2] = torch.tensor(colour)
    mesh = uv_sphere(24, 12)
    mesh = mesh.replace(positions=mesh.positions * RADIUS)
    return Asset(mesh, [Material(kd=kd, ks=torch.tensor([0.0, 0.6, 0.0]))],
                 torch.zeros(0, dtype=torch.long))


def sky(height: int = 16, width: int = 32) -> torch.Tensor:
    """A bright upper and a darker, bluish lower hemisphere (equirect, linear)."""
    up = equirect_pixel_directions(height, width)[..., 2:3]
    return (0.4 + 0.6 * up.clamp(min=0) + torch.tensor([0.0, 0.05, 0.2]) * (up < 0)).float()


def ring_cameras(count: int, width: int, height: int, target=(0.0, 0.0, 0.0),
                 distance: float = 3.0) -> Cameras:
    """``count`` cameras around ``target`` at alternating heights, 40 degrees across."""
    angles = torch.arange(count, dtype=torch.float64) * (2 * np.pi / count)
    heights = torch.where(torch.arange(count) % 2 == 0, 0.8, -0.5).double()
    eyes = torch.stack([distance * angles.cos(), distance * angles.sin(), heights], -1)
    eyes = eyes + torch.tensor(target, dtype=torch.float64)
    focal = 0.5 * width / np.tan(np.radians(20.0))
    return Cameras(look_at(eyes, target).float(), focal, focal, width / 2, height / 2, width,
                   height)


def render(cameras: Cameras) -> torch.Tensor:
    """Straight-alpha renders ``[N, H, W, 4]`` of the ball under the sky."""
    ctx = raster.RasterContext("cpu", impl="torch")
    return render_reference_views(ctx, ball_asset(), sky(), cameras, spp=2,
                                  light_resolution=32).images


def write_llff_capture(folder: Path, cameras: Cameras, images: torch.Tensor,
                       downscale: int = 2) -> None:
    """``images/`` (RGB PNG, no alpha), ``images_{downscale}/``, ``masks/`` (grey PNG) and
    ``poses_bounds.npy`` (near / far: the ball's depth range)."""
    for index, image in enumerate(images):
        name = f"IMG_{index:04d}.png"
        write_image(folder / "images" / name, image[..., :3].numpy())
        small = resize_rgba(image[None], image.shape[1] // downscale,
                            image.shape[0] // downscale)[0]
        write_image(folder / f"images_{downscale}" / name, small[..., :3].numpy())
        write_image(folder / "masks" / name, image[..., 3:].expand(-1, -1, 3).numpy(), data=True)
    distance = (cameras.centers().double()).norm(dim=-1).numpy()
    write_llff(folder, cameras.camera_to_world.double().numpy(), cameras.height, cameras.width,
               float(cameras.fx[0]), distance - RADIUS - 0.5, distance + RADIUS + 0.5)


def write_nerf_folder(folder: Path, cameras: Cameras, images: torch.Tensor,
                      split: str = "train") -> None:
    """``{split}/r_N.png`` (RGBA) and ``transforms_{split}.json`` (camera_angle_x)."""
    frames = []
    for index, image in enumerate(images):
        write_image(folder / split / f"r_{index}.png", image.numpy())
        frames.append({"file_path": f"./{split}/r_{index}",
                       "transform_matrix": cameras.camera_to_world[index].tolist()})
    angle = 2 * np.arctan(0.5 * cameras.width / float(cameras.fx[0]))
    (folder / f"transforms_{split}.json").write_text(
        json.dumps({"camera_angle_x": angle, "frames": frames}))


def write_mesh_and_sky(folder: Path) -> tuple[Path, Path]:
    """``ball.obj`` (+ mtl and texture) and ``sky.hdr``."""
    asset = ball_asset()
    write_obj(folder / "ball.obj", asset.mesh, asset.materials[0], texture_stem="ball")
    write_image(folder / "sky.hdr", sky().numpy())
    return folder / "ball.obj", folder / "sky.hdr"
