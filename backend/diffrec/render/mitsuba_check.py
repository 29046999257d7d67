"""Whether Mitsuba's CPU backend can path-trace on this machine, asked of a child process.

Dr.Jit's LLVM backend compiles every kernel with the system's ``libLLVM`` for the CPU it runs
on. Where that LLVM cannot compile for this CPU (a processor newer than the LLVM, an LLVM
release Dr.Jit does not support), it aborts the whole process: a backend server with it, and
every job it held. ``cpu_backend_problem()`` path-traces a tiny scene, forward and backward
(the kernels a path-traced pass compiles), in a child process, once per process, and answers
what went wrong in a phrase, or None.

``python -m diffrec.render.mitsuba_check`` is that child: exit status 0 when the render and
its gradients came back finite.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys

__all__ = ["CHECK_TIMEOUT_S", "cpu_backend_problem"]

CHECK_TIMEOUT_S = 600
"""How long the child may take (seconds): compiling the kernels takes a few on a laptop."""
_CHILD = "DIFFREC_MITSUBA_CHECK_CHILD"
"""Set in the child's environment: the child loads Mitsuba without asking again."""


@functools.cache
def cpu_backend_problem(command: tuple[str, ...] | None = None) -> str | None:
    """None when ``command`` (default: this module run by this Python) exits 0; otherwise
    what happened, as a phrase naming the signal or exit status and the child's last line
    of error output. None inside the child itself."""
    if os.environ.get(_CHILD):
        return None
    command = command or (sys.executable, "-m", __name__)
    try:
        child = subprocess.run(command, env={**os.environ, _CHILD: "1"}, capture_output=True,
                               text=True, timeout=CHECK_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return f"Mitsuba's CPU backend did not finish a 16-pixel test render in {CHECK_TIMEOUT_S} s"
    if child.returncode == 0:
        return None
    status = (signal.Signals(-child.returncode).name if child.returncode < 0
              else f"exit status {child.returncode}")
    said = [line.strip() for line in child.stderr.splitlines() if line.strip()]
    return ("Mitsuba's CPU backend crashed path-tracing a 16-pixel test image on this machine "
            f"({status}{': ' + said[-1] if said else ''})")


def _render_a_test_image() -> None:
    """A 2x2-quad plane under a uniform light, 16x16 pixels, 4 samples, one bounce; its
    gradients reach the textures and the light."""
    import torch

    from diffrec.camera import orbit_cameras
    from diffrec.light.envmap import EnvironmentLight
    from diffrec.mesh.primitives import plane
    from diffrec.render.material import TextureMaterial
    from diffrec.render.path_tracer import PathTracer
    from diffrec.render.texture2d import Texture2D

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
    _render_a_test_image()
