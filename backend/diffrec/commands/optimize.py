"""``diffrec optimize``: run the reconstruction pipeline from a config file and flags.

One process by default; ``--gpus N`` trains one job on N GPUs of this machine (one process
each, data-parallel, ``pipeline.distributed``), ``--ranks N --device cpu`` the same in N CPU
processes (gloo), and under ``torchrun`` each process it starts is one rank of the job.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from diffrec.errors import UserError
from diffrec.pipeline.bounds import GIB, check_bounds, check_image_size, device_memory_bytes
from diffrec.pipeline.checkpoints import CheckpointStore
from diffrec.pipeline.config import RunConfig, build_config, read_config_reading
from diffrec.pipeline.reference_config import NVDIFFREC_LIGHT_RES, Reading, departures
from diffrec.pipeline.reporter import PreviewFrame, Progress, Reporter
from diffrec.protocol import events
from diffrec.protocol.settings import GEOMETRIES, LIGHT_MODES, MAX_RANKS, MODES, PRESETS

NAME = "optimize"
HELP = "optimise a mesh, PBR textures and light against target images"


def add_settings_arguments(parser) -> None:
    """The settings flags that also make sense for a job on a server (``diffrec submit``)."""
    parser.add_argument("--mode", choices=MODES)
    parser.add_argument("--preset", choices=list(PRESETS))
    parser.add_argument("--base-mesh", dest="base_mesh", help="starting mesh (materials, refine)")
    parser.add_argument("--envmap", help="equirectangular HDRI (.hdr or .exr)")
    parser.add_argument("--light", choices=LIGHT_MODES)
    parser.add_argument("--geometry", choices=GEOMETRIES)
    parser.add_argument("--iterations", type=int, help="iterations per pass")
    parser.add_argument("--batch", type=int)
    parser.add_argument("--train-res", dest="train_res", type=int)
    parser.add_argument("--texture-res", dest="texture_res", type=int)
    parser.add_argument("--grid", type=int, metavar="N",
                        help="reconstruct's surface grid resolution, even (nvdiffrec's "
                             "dmtet_grid): DMTet's tetrahedral lattice, N/2 cubic cells a side; "
                             "FlexiCubes N/2 cubes a side")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--triangles", dest="target_triangles", type=int, metavar="N",
                        help="triangle budget: the result has at most N triangles (the base "
                             "mesh decimated to it; reconstruct's surface simplified to it)")
    parser.add_argument("--schedule", choices=("diffrec", "nvdiffrec"),
                        help="training schedule (nvdiffrec configs: nvdiffrec's)")


SETTINGS_FLAGS = ("mode", "preset", "base_mesh", "envmap", "light", "geometry", "iterations",
                  "batch", "train_res", "texture_res", "grid", "seed", "schedule",
                  "target_triangles")


def settings_flags(args, extra: tuple[str, ...] = ()) -> dict:
    """The values of the settings flags (None where not given), for ``build_config``."""
    return {key: getattr(args, key) for key in (*SETTINGS_FLAGS, *extra)}


def add_arguments(parser) -> None:
    parser.add_argument("--config", help="JSON or TOML settings (nvdiffrec configs work too)")
    parser.add_argument("--device", help="auto (default), cpu, cuda, cuda:1, mps")
    parser.add_argument("--out-dir", dest="out_dir", help="where the outputs go")
    parser.add_argument("--dataset", help="a NeRF-style folder (transforms_train.json), a "
                        "capture tool's folder (transforms.json: nerfstudio, instant-ngp, "
                        "Polycam...), an LLFF capture (poses_bounds.npy) or a COLMAP model "
                        "(sparse/0/ + images/)")
    parser.add_argument("--ref-mesh", dest="ref_mesh", help="reference mesh to render targets")
    parser.add_argument("--start-renders", dest="start_renders", metavar="FOLDER",
                        help="the base mesh rendered by the targets' renderer from the training "
                             "cameras (a capture folder like --dataset, same file names): "
                             "materials and refine then fit only how the targets differ from "
                             "the start, not how that renderer differs from ours")
    add_settings_arguments(parser)
    parser.add_argument("--preview-every", dest="preview_every", type=int, metavar="N",
                        help="write previews/PASS_ITERATION.png (render | target) every N "
                             "iterations")
    parser.add_argument("--quiet", action="store_true", help="no progress line")
    parallel = parser.add_mutually_exclusive_group()
    parallel.add_argument("--gpus", type=int, metavar="N",
                          help="train this job on N GPUs of this machine (cuda:0 .. cuda:N-1), "
                               "one process each (NCCL): each renders batch / N views of every "
                               "batch (--batch stays the whole batch, a multiple of N); same "
                               "results as one process up to rounding. Under torchrun leave "
                               "it out: each process torchrun starts is one rank")
    parallel.add_argument("--ranks", type=int, metavar="N",
                          help="the same data-parallel run in N processes on the CPU (gloo); "
                               "the run's device must be the CPU (--device cpu, or auto without "
                               "CUDA or MPS): to check a multi-GPU setup without GPUs")
    parser.add_argument("--check", action="store_true",
                        help="print how each key of --config was understood and the settings "
                             "that would run, then exit without running (status 1 when a "
                             "file it names is missing, a capture cannot be read, or one of "
                             "its images cannot be decoded or differs in size)")


class TerminalReporter(Reporter):
    """``diffrec optimize``'s reporter: one self-updating progress line on ``stream`` (plain
    lines when piped; none when ``stream`` is None), log lines through ``logging``, each
    preview as ``out_dir/previews/<pass>_<iteration>.png`` (render | target, then the
    display panels in order, each scaled to a longest side of ``preview_size`` pixels; None:
    as rendered). The run's checkpoints go to ``checkpoint_store(out_dir)``."""

    BAR_WIDTH = 24

    def __init__(self, out_dir: str, preview_size: int | None = None, stream=sys.stderr):
        self.previews = Path(out_dir) / "previews"
        self.preview_size = preview_size
        self.stream = stream

    def progress(self, progress: Progress) -> None:
        if self.stream is None:
            return
        filled = int(self.BAR_WIDTH * progress.fraction)
        line = f"[{'#' * filled}{'.' * (self.BAR_WIDTH - filled)}] {events.describe(progress)}"
        if "total" in progress.losses:
            line += f" · loss {progress.losses['total']:.4f}"
        if self.stream.isatty():
            last = progress.iteration == progress.iterations
            self.stream.write("\r\x1b[K" + line + ("\n" if last else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def log(self, message: str, level: str = "info", **fields) -> None:
        logging.getLogger("diffrec").log(logging.getLevelName(level.upper()), message)

    def preview(self, preview: PreviewFrame) -> None:
        import torch
        import torch.nn.functional as F

        from diffrec.io import write_image
        from diffrec.protocol.images import longest_side_size
        from diffrec.render.metrics import display

        images = [display(preview.render[None])[0], display(preview.target[None])[0],
                  *preview.panels.values()]
        render_height = preview.render.shape[0]
        scaled = []
        for image in images:
            height, width = image.shape[:2]
            if self.preview_size:
                width, height = longest_side_size(width, height, self.preview_size)
            else:  # the render's height
                width, height = max(1, round(width * render_height / height)), render_height
            size = (height, width)
            chw = image.permute(2, 0, 1)[None].float()
            scaled.append(F.interpolate(chw, size=size, mode="bilinear", antialias=True,
                                        align_corners=False)[0].permute(1, 2, 0))
        rows = max(image.shape[0] for image in scaled)
        padded = [F.pad(image, (0, 0, 0, 0, 0, rows - image.shape[0])) for image in scaled]
        self.previews.mkdir(parents=True, exist_ok=True)
        path = self.previews / f"{preview.pass_name}_{preview.iteration:06d}.png"
        write_image(path, torch.cat(padded, dim=1).clamp(0, 1).numpy(), data=True)


def checkpoint_store(out_dir: str) -> CheckpointStore:
    """Where ``diffrec optimize`` keeps a run's checkpoints: ``out_dir/checkpoints``."""
    return CheckpointStore(Path(out_dir) / "checkpoints")


def check_out_dir(out_dir: str) -> None:
    """UserError, before any work, where ``out_dir`` or its checkpoints folder cannot be made
    or written (a file in the way, no permission, a read-only disk)."""
    try:
        store = checkpoint_store(out_dir).directory
        store.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=store):
            pass
    except OSError as error:
        raise UserError(f"cannot write into --out-dir {out_dir}: "
                        f"{error.strerror or error}") from None


def check_report(path: str | None, reading: Reading, config: RunConfig,
                 problems: list[str], captures: CapturesRead) -> str:
    """What ``--check`` prints: each key of the file and what it became, where the targets
    come from, ``problems`` (``check_problems``), and the settings that would run (JSON)."""
    from diffrec.pipeline.captures import capture_layout
    from diffrec.pipeline.inputs import target_folder

    lines = []
    if path:
        kind = ("the reference system's config: its defaults apply where it is silent"
                if reading.reference else "diffrec settings")
        lines += [f"{path} ({kind}):", *(f"  {line}" for line in reading.lines),
                  *overridden_lines(reading, config)]
    sources, folder = config.sources, target_folder(config.sources)
    if folder:
        found = {"nerf": "a NeRF-style folder",
                 "nerfstudio": "a nerfstudio / instant-ngp transforms.json",
                 "llff": "an LLFF capture", "colmap": "a COLMAP model",
                 None: "see below"}[capture_layout(folder)]
        lines.append(f"targets: the images of {folder} ({found})")
    elif sources.ref_mesh:
        lines.append(f"targets: {config.settings.size.views} renders of {sources.ref_mesh} "
                     f"under {sources.envmap or 'no envmap (see below)'}")
    lines += problems
    lines.append(validation_line(config, captures))
    if reading.reference or config.settings.schedule.kind == "nvdiffrec":
        lines += ["departures from nvdiffrec's behaviour:",
                  *(f"  - {line}" for line in departures(
                      config.settings, sources,
                      reading.settings.get("light_res", NVDIFFREC_LIGHT_RES)))]
    lines += [memory_line(config), "settings:", json.dumps(config.to_dict(), indent=2)]
    return "\n".join(lines)


def overridden_lines(reading: Reading, config: RunConfig) -> list[str]:
    """A line per value the file gave (or its system's defaults) that the command line
    changed, with a flag or a --preset: the file's lines say what the file meant, these what
    runs."""
    def plain(value):  # as JSON reads it back: numbers compare as numbers (0 == 0.0)
        return json.loads(json.dumps(value))

    final = {key: plain(value) for key, value in config.to_dict().items()}
    return [f"  {key} = {json.dumps(final[key])} from the command line, over the file's "
            f"{json.dumps(value)}" for key, value in reading.values().items()
            if key in final and final[key] != plain(value)]


def check_problems(args, config: RunConfig, captures: CapturesRead) -> list[str]:
    """One line per problem that stops the run before it starts (``--check`` then exits with
    status 1): each file it names that is missing, each capture there that cannot be read
    (or whose images the run would refuse), and what this machine or the mode refuses
    (``run_problems``)."""
    return ([f"NOT FOUND: {problem}" for problem in missing_files(config)]
            + [f"CANNOT READ: {problem}" for problem in captures.problems]
            + [f"CANNOT RUN: {problem}" for problem in run_problems(args, config)])


def run_problems(args, config: RunConfig) -> list[str]:
    """What stops a run before it reads its inputs, one sentence each: a device torch cannot
    use here, ranks this machine cannot start (``ranks_asked``), a mode without the start
    mesh it needs, a reference mesh with no envmap to render it under, path tracing without
    Mitsuba 3 (or the LLVM its CPU backend needs)."""
    from diffrec.devices import resolve_device
    from diffrec.pipeline.inputs import target_folder

    def needs_a_start() -> None:
        if config.settings.run.mode != "reconstruct" and not config.sources.base_mesh:
            raise UserError(f"mode {config.settings.run.mode!r} needs a starting mesh "
                            "(--base-mesh, or base_mesh in the config); to reconstruct "
                            "from the images alone, give --mode reconstruct (materials is "
                            "the default mode)")

    def lights_its_reference() -> None:
        sources = config.sources
        if sources.ref_mesh and not target_folder(sources) and not sources.envmap:
            raise UserError("rendering a reference mesh needs an envmap (an HDRI) to light "
                            "it: --envmap, or envmap in the config")

    def path_tracer() -> None:
        if config.settings.path_tracing.renderer == "path-traced":
            from diffrec.render.mitsuba_bridge import load_mitsuba

            load_mitsuba(resolve_device(config.device))

    problems = []
    for check in (lambda: resolve_device(config.device), lambda: ranks_asked(args, config),
                  needs_a_start, lights_its_reference, path_tracer):
        try:
            check()
        except UserError as error:
            if str(error) not in problems:
                problems.append(str(error))
    return problems


def validation_line(config: RunConfig, captures: CapturesRead) -> str:
    """Which views the run holds out for validation, and how many it trains on."""
    from diffrec.pipeline.inputs import target_folder
    from diffrec.pipeline.views import HELD_OUT_SHARE, held_out_count

    settings = config.settings
    if not settings.reporting.validation:
        return "validation: none (every view trains)"
    if not target_folder(config.sources):
        return (f"validation: {settings.size.test_views} more renders from other cameras; "
                f"training on {settings.size.views}")
    count, test = captures.frames.get("train"), captures.frames.get("test", 0)
    if count is None or test is None:
        return "validation: unknown (the capture cannot be read, as said above)"
    if "test" in captures.frames:
        return f"validation: the {test} views of the test split; training on all {count}"
    held = held_out_count(count, settings.size.test_views)
    return (f"validation: {held} of the capture's {count} views held out (test_views "
            f"{settings.size.test_views}, at most one in {HELD_OUT_SHARE}); training on "
            f"{count - held}")


def missing_files(config: RunConfig) -> list[str]:
    """One sentence per file or folder the run would read and cannot find (relative paths
    from the working directory)."""
    from diffrec.pipeline.captures import capture_layout, poses_hint
    from diffrec.pipeline.inputs import target_folder

    sources, folder, missing = config.sources, target_folder(config.sources), []
    if folder and capture_layout(folder) is None:
        missing.append(f"{'dataset' if sources.dataset else 'ref_mesh'} {folder}: "
                       + ("no transforms_train.json, transforms.json, poses_bounds.npy or "
                          f"COLMAP model there{poses_hint(folder)}"
                          if Path(folder).is_dir() else "no such folder"))
    if sources.start_renders and capture_layout(sources.start_renders) is None:
        missing.append(f"start_renders {sources.start_renders}: no capture there (a folder "
                       "like the dataset's)")
    for key in ("ref_mesh", "base_mesh", "envmap", "ref_material"):
        value = getattr(sources, key)
        if value and not Path(value).exists():
            missing.append(f"{key} {value}: no such file")
    return missing


@dataclass(frozen=True)
class CapturesRead:
    """The captures a run would read, each read once for ``--check``: the targets' frames
    per split read ({"train": N, and "test" where the capture has a test split of its own;
    None where that split cannot be read}) and each capture's own sentence where it cannot be
    read (the targets' splits, the start renders)."""

    frames: dict[str, int | None]
    problems: list[str]


def read_captures(config: RunConfig) -> CapturesRead:
    """``CapturesRead`` of ``config``'s target folder and start renders, where their layout is
    found (``missing_files`` says where it is not)."""
    from diffrec.pipeline.captures import capture_layout, read_any_capture
    from diffrec.pipeline.inputs import has_test_split, target_folder
    from diffrec.pipeline.loading import image_problems
    from diffrec.protocol.captures import CaptureError

    folder, renders = target_folder(config.sources), config.sources.start_renders
    reads = []
    if folder and capture_layout(folder):
        reads += [(folder, "train")] + ([(folder, "test")] if has_test_split(folder) else [])
    if renders and capture_layout(renders):
        reads.append((renders, None))
    frames, problems = {}, []
    for capture, split in reads:
        try:
            read = read_any_capture(capture, split or "train")
            count = len(read.frames)
            problems += image_problems(read, split or "train")
        except CaptureError as error:
            problems.append(str(error))
            count = None
        if split:
            frames[split] = count
    return CapturesRead(frames, problems)


def memory_line(config: RunConfig) -> str:
    """Whether ``config`` fits in this machine's ``config.device`` (``check_bounds``' estimate):
    a config may be checked here and run on a larger GPU elsewhere."""
    memory = device_memory_bytes(config.device)
    try:
        check_bounds(config.settings, memory)
    except UserError as error:
        return f"memory: too much for this machine (device {config.device}): {error}"
    return f"memory: fits this machine (device {config.device}, {memory / GIB:.1f} GiB)"


def ranks_asked(args, config: RunConfig) -> tuple[int, str]:
    """``(ranks, device type)`` that ``--gpus N`` ("cuda") or ``--ranks N`` ("cpu") ask for
    (without either, the ``ranks`` setting, on the device type ``devices.ranks_device_type``
    gives), ``(1, "")`` for one process; refuses (UserError) what cannot run here: fewer CUDA
    devices than ``--gpus``, ``--ranks`` where the device is not the CPU, MPS, a batch that
    does not split evenly."""
    from diffrec.devices import ranks_device_type
    from diffrec.pipeline.sampler import rank_share

    gpus, ranks, asked = args.gpus, args.ranks, config.settings.limits.ranks
    if gpus is None and ranks is None and asked > 1:
        gpus, ranks = ((asked, None) if ranks_device_type(config.device) == "cuda"
                       else (None, asked))
    if gpus is not None:
        count = _rank_count("--gpus", gpus)
        if config.device not in ("auto", "cuda"):
            raise UserError(f"--gpus trains on cuda:0 .. cuda:{count - 1}, one per process: "
                            f"leave out --device {config.device}")
        import torch

        seen = torch.cuda.device_count()
        if seen < count:
            devices = "a CUDA device" if count == 1 else f"{count} CUDA devices"
            raise UserError(f"--gpus {count} needs {devices} and torch sees {seen} "
                            f"here; to try a data-parallel run on the CPU, give --ranks {count} "
                            "--device cpu")
        kind = "cuda"
    elif ranks is not None:
        count = _rank_count("--ranks", ranks)
        if ranks_device_type(config.device) != "cpu":
            raise UserError("--ranks trains in processes on the CPU (gloo): give --device cpu "
                            "too, or --gpus N to train on GPUs")
        kind = "cpu"
    else:
        return 1, ""
    rank_share(config.settings.size.batch, count)
    return count, kind


def _rank_count(flag: str, count: int) -> int:
    if not 1 <= count <= MAX_RANKS:
        raise UserError(f"{flag} must be 1 to {MAX_RANKS}, got {count}")
    return count


def launched_world(args, config: RunConfig):
    """This process's ``distributed.World`` when a launcher (``torchrun``) started it as one
    of several ranks (``WORLD_SIZE`` > 1), joined (NCCL on ``cuda:LOCAL_RANK``, or gloo on
    the CPU: ``devices.ranks_device_type``); None otherwise."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size == 1:
        return None
    if args.gpus is not None or args.ranks is not None:
        raise UserError(f"started by a launcher as one of {size} ranks (WORLD_SIZE): the "
                        "launcher starts the ranks, leave out --gpus / --ranks")
    from diffrec.devices import ranks_device_type
    from diffrec.pipeline import distributed

    return distributed.from_environment(ranks_device_type(config.device))


def optimize_rank(world, config: RunConfig, quiet: bool = False) -> None:
    """One rank's part of ``diffrec optimize`` (``world``: a ``distributed.World``; the whole
    run for ``distributed.SINGLE``): load the inputs, train on ``config.device`` (a rank of
    several: its own device), and on rank 0 alone report to the terminal, keep previews
    and checkpoints in ``out_dir``, write the result there and print its summary (the other
    ranks log errors only)."""
    from diffrec import raster
    from diffrec.devices import resolve_device
    from diffrec.pipeline.inputs import load_inputs
    from diffrec.pipeline.job_arrays import settings_for_start
    from diffrec.pipeline.outputs import write_result
    from diffrec.pipeline.run import optimize

    if not world.is_main:
        logging.getLogger("diffrec").setLevel(logging.ERROR)
    device = config.device if world.size == 1 else str(world.device)
    inputs = load_inputs(config, raster.RasterContext(resolve_device(device)))
    settings = config.settings
    check_image_size(settings, inputs.train.cameras.width, inputs.train.cameras.height)
    if settings.material.init_textures == "base_mesh":  # its normal map trained, as a job's
        settings = settings_for_start(settings, inputs.base_material)
    reporter = TerminalReporter(config.out_dir, settings.reporting.preview_res,
                                None if quiet else sys.stderr)
    result = optimize(settings, inputs, reporter,
                      checkpoints=checkpoint_store(config.out_dir), device=device, world=world)
    if result is None:
        return
    try:
        write_result(Path(config.out_dir), result, export_obj=settings.reporting.export_obj)
    except OSError as error:
        which = f" ({Path(error.filename).name})" if error.filename else ""
        raise UserError(f"cannot write the result files into {config.out_dir}: "
                        f"{error.strerror or error}{which}; the fit is kept in its "
                        "checkpoints, and the same command writes the result once the folder "
                        "can take it") from None
    summary = {key: result.metrics[key] for key in ("psnr_mean", "ssim_mean", "time_s")}
    print(json.dumps({"out_dir": config.out_dir, **summary}, indent=2))


def _spawned_rank(world, config: RunConfig, quiet: bool) -> None:
    """``optimize_rank`` in a process of its own: a UserError is printed as a sentence and
    ends the process with status 2 (``run`` then names the rank)."""
    try:
        optimize_rank(world, config, quiet)
    except UserError as error:
        print(f"diffrec: error: rank {world.rank}: {error}", file=sys.stderr)
        raise SystemExit(2) from None


def run(args) -> int:
    reading = read_config_reading(args.config) if args.config else Reading()
    flags = settings_flags(args, ("device", "out_dir", "dataset", "ref_mesh", "start_renders",
                                  "preview_every"))
    config = build_config(reading.values(PRESETS.get(args.preset), args.schedule), flags)
    if args.check:
        captures = read_captures(config)
        problems = check_problems(args, config, captures)
        print(check_report(args.config, reading, config, problems, captures))
        return 1 if problems else 0
    check_bounds(config.settings, device_memory_bytes(config.device))
    if problems := run_problems(args, config):
        raise UserError(problems[0])
    check_out_dir(config.out_dir)
    # torch-heavy modules are imported only when a run starts
    from diffrec.pipeline import distributed

    world = launched_world(args, config)
    if world is not None:
        try:
            optimize_rank(world, config, args.quiet)
        finally:
            distributed.teardown(world)
        return 0
    ranks, kind = ranks_asked(args, config)
    if ranks == 1:
        optimize_rank(distributed.SINGLE, config, args.quiet)
        return 0
    import torch.multiprocessing as mp

    try:
        distributed.spawn(_spawned_rank, ranks, kind, (config, args.quiet))
    except mp.ProcessExitedException as error:
        if error.exit_code == 2:
            raise UserError(f"rank {error.error_index} stopped on the error above") from None
        raise
    return 0
