"""``python -m diffrec.render.mitsuba_test_image``: path-trace a tiny scene forward and
backward through Mitsuba's CPU backend, the child process ``mitsuba_check`` asks whether that
backend runs on this machine. Exit status 0 when the image's gradients came back finite; a
machine whose libLLVM cannot compile for its CPU aborts here, not in the process that asked.
"""

from __future__ import annotations

import sys

import torch

from diffrec.camera import orbit_cameras
from diffrec.light.envmap import EnvironmentLight
from diffrec.mesh.primitives import plane
from diffrec.render.material import TextureMaterial
from diffrec.render.path_tracer import PathTracer
from diffrec.render.texture2d import Texture2D


def render_a_test_image() -> None:
    """A 2x2-quad plane under a uniform light, 16x16 pixels, 4 samples, one bounce; its
    gradients reach the textures and the light. Exits with a message when they are not
    finite."""
    material = TextureMaterial(Texture2D(torch.full((4, 4, 3), 0.5)),
                               Texture2D(torch.tensor([0.0, 0.5, 0.5]).expand(4, 4, 3).clone()))
    light = EnvironmentLight(32)
    cameras = orbit_cameras(1, 3.0, 16, elevations_degrees=(40.0, 40.0))
    out = PathTracer(plane(resolution=2), "cpu").render(material, light, cameras, spp=4)
    out.color.sum().backward()
    gradients = [p.grad for p in (*material.parameters(), *light.parameters())
                 if p.grad is not None]
    if not gradients or not all(torch.isfinite(g).all() for g in gradients):
        sys.exit("the test render's gradients did not come back finite")


if __name__ == "__main__":
    render_a_test_image()
