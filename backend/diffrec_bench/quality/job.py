"""What one scene of the benchmark runs (``SceneJob``) and how its fit is started: the
``diffrec optimize`` command line (or the peer's) and the child process that runs it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from diffrec_bench.checkout import SCRIPTS


@dataclass(frozen=True)
class SceneJob:
    """What to run for one scene. ``iterations`` None: the preset's; ``device`` None: the
    backend's choice; ``threads`` None: torch's default in the optimize child; ``config``: a
    settings file passed to ``diffrec optimize --config`` (None: none); ``relight``: also
    judge the result under other lights and its base colour (``relight``); ``albedo``: judge
    its base colour only; ``peer`` "mitsuba": fit with Mitsuba 3's own inverse rendering
    (``scripts/bench_mitsuba_peer.py``, materials mode) instead of ``diffrec optimize``;
    ``fitted``: the results folder of fits run on another machine (``remote``), judged here
    instead of fitting; ``light`` "fixed": the scene's HDRI given as a fixed light, "learn":
    the fit learns the light (from grey, as for photos; the HDRI is not given)."""

    name: str
    out: Path
    cache: Path
    mode: str
    preset: str
    size: int
    views: int
    holdout: int
    samples: int
    iterations: int | None = None
    device: str | None = None
    threads: int | None = None
    config: Path | None = None
    relight: bool = False
    albedo: bool = False
    peer: str | None = None
    fitted: Path | None = None
    light: str = "fixed"

    def lights(self) -> list[dict] | None:
        """The lights the result is judged under besides its own: None when neither they nor
        the base colour are judged, [] for the base colour alone."""
        from .lights import relight_lights

        if self.relight:
            return relight_lights(self.name)
        return [] if self.albedo else None

    def on_cuda(self) -> bool:
        """Whether the job runs on a CUDA device (then Cycles renders on the GPU too)."""
        return bool(self.device and self.device.startswith("cuda"))


def optimize_command(job: SceneJob, dataset: Path, hdri: Path, asset: Path) -> list[str]:
    """The ``diffrec optimize`` command line: the scene's dataset at its own size, the HDRI
    as a fixed light (as the demo keeps it; with ``job.light`` "learn" no HDRI, the light
    learned), the true mesh as the start in materials mode; with ``job.peer``, the peer's
    command on the same inputs."""
    if job.peer == "mitsuba":
        return [sys.executable, str(SCRIPTS / "bench_mitsuba_peer.py"),
                "--dataset", str(dataset), "--base-mesh", str(dataset / "true_mesh.obj"),
                "--envmap", str(hdri), "--out-dir", str(asset), "--train-res", str(job.size),
                "--quiet", *(["--iterations", str(job.iterations)] if job.iterations else [])]
    given = ["--envmap", str(hdri)] if job.light == "fixed" else []
    command = [sys.executable, "-m", "diffrec", "optimize", "--dataset", str(dataset),
               "--mode", job.mode, "--preset", job.preset, "--train-res", str(job.size),
               *given, "--light", job.light, "--out-dir", str(asset), "--quiet"]
    if job.mode == "materials":
        command += ["--base-mesh", str(dataset / "true_mesh.obj")]
    if job.iterations:
        command += ["--iterations", str(job.iterations)]
    if job.device:
        command += ["--device", job.device]
    if job.config:
        command += ["--config", str(job.config)]
    return command


def run_child(command: list[str], log: Path, threads: int | None) -> dict:
    """Run ``command`` with its output in ``log``: exit status, wall seconds, CPU seconds and
    peak resident memory (MiB) of that child alone (``os.wait4``'s resource usage)."""
    env = dict(os.environ)
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    started = time.monotonic()
    with open(log, "w") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    return {"returncode": process.returncode, "wall_s": round(time.monotonic() - started, 2),
            "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
            "peak_mib": round(usage.ru_maxrss / 1024, 1)}  # ru_maxrss is in KiB on Linux
