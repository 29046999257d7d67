#!/usr/bin/env python3
"""How long the artist waits after pressing Optimize (the bpy wheel, headless):

    .venv/bin/python scripts/bench_addon_latency.py [--repeat 5]

1. Server down (nothing listens on a free loopback port): from pressing Optimize to the
   error sentence (the operator returns with it). Issue 24's target: 2 s at most.
2. A local server (``diffrec serve --device cpu`` in a child process, started and answering
   before the clock starts): from pressing Optimize on a small scene (a UV sphere, four
   cameras, 64 px targets, Light = Learn, Materials, Preview) to the first progress event
   applied to the scene; the job is then cancelled. The first run includes the server's first
   job process (it imports the pipeline); the following ones reuse its fork server.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import bpy

from diffrec_bench.checkout import addon_module, enable_addon
from diffrec_bench.demo import scene as demo_scene
from diffrec_bench.demo.backend import LocalBackend, free_port

follow = addon_module("follow")
scene_updates = addon_module("scene_updates")


def small_scene(endpoint: str) -> None:
    """A fresh scene: the selected sphere 'ball', four cameras, the demo's HDRI world; the
    add-on on."""
    bpy.ops.wm.read_factory_settings(use_empty=True)
    enable_addon()
    bpy.context.preferences.addons["addon"].preferences.endpoint = endpoint
    scene = bpy.context.scene
    scene.render.engine = "CYCLES"
    scene.cycles.device, scene.cycles.samples = "CPU", 4
    scene.render.resolution_x = scene.render.resolution_y = 64
    bpy.ops.mesh.primitive_uv_sphere_add(segments=16, ring_count=8, radius=1.0)
    demo_scene.orbit_cameras(4, 0.0, "cam")
    demo_scene.set_world(scene, demo_scene.bundled_hdri())
    settings = scene.diffrec
    settings.preset, settings.train_resolution = "PREVIEW", 64


def press_optimize() -> tuple[float, str]:
    """(seconds until the operator returned, its error text or '')."""
    start = time.monotonic()
    try:
        bpy.ops.diffrec.optimize()
        return time.monotonic() - start, ""
    except RuntimeError as error:
        return time.monotonic() - start, str(error).strip()


def until_first_progress() -> tuple[float, float]:
    """Seconds from pressing Optimize to the job's submission (targets rendered, mesh and light
    exported, arrays uploaded) and to its first progress event; the job is then cancelled."""
    seen: dict[str, float] = {}
    apply = scene_updates.apply_update

    def recording(context, job, update, report):
        apply(context, job, update, report)
        if update.kind in ("submitted", "progress") and update.kind not in seen:
            seen[update.kind] = time.monotonic()
            if update.kind == "progress":
                follow.jobs.cancel(job)

    scene_updates.apply_update = recording
    try:
        start = time.monotonic()
        press_optimize()
    finally:
        scene_updates.apply_update = apply
    if "progress" not in seen:
        raise SystemExit(f"no progress event: {bpy.context.scene.diffrec.status}")
    return seen["submitted"] - start, seen["progress"] - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    down = []
    for _ in range(args.repeat):
        small_scene(f"tcp://127.0.0.1:{free_port()}")
        seconds, text = press_optimize()
        down.append(seconds)
    print(f"server down: to the error sentence {statistics.median(down):.3f} s median, "
          f"{max(down):.3f} s max ({args.repeat} runs)\n  {text}")
    with tempfile.TemporaryDirectory() as folder, LocalBackend(
            Path(folder) / "data", Path(folder) / "serve.log", device="cpu") as server:
        runs = []
        for _ in range(args.repeat):
            small_scene(server.endpoint)
            runs.append(until_first_progress())
    for name, column in (("submitted", 0), ("first progress event", 1)):
        times = [run[column] for run in runs]
        print(f"local server: to {name} " + ", ".join(f"{t:.2f}" for t in times)
              + f" s (first run, then the others; median {statistics.median(times):.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
