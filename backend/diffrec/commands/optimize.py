"""``diffrec optimize``: run the reconstruction pipeline from a config file and flags."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from diffrec.pipeline.bounds import check_bounds, device_memory_bytes
from diffrec.pipeline.config import (
    GEOMETRIES,
    LIGHT_MODES,
    MODES,
    PRESETS,
    build_config,
    read_config_file,
)

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
    parser.add_argument("--seed", type=int)


SETTINGS_FLAGS = ("mode", "preset", "base_mesh", "envmap", "light", "geometry", "iterations",
                  "batch", "train_res", "texture_res", "seed")


def settings_flags(args, extra: tuple[str, ...] = ()) -> dict:
    """The values of the settings flags (None where not given), for ``build_config``."""
    return {key: getattr(args, key) for key in (*SETTINGS_FLAGS, *extra)}


def add_arguments(parser) -> None:
    parser.add_argument("--config", help="JSON or TOML settings (nvdiffrec configs work too)")
    parser.add_argument("--device", help="auto (default), cpu, cuda, cuda:1, mps")
    parser.add_argument("--out-dir", dest="out_dir", help="where the outputs go")
    parser.add_argument("--dataset", help="a NeRF-style folder (transforms_train.json)")
    parser.add_argument("--ref-mesh", dest="ref_mesh", help="reference mesh to render targets")
    add_settings_arguments(parser)
    parser.add_argument("--preview-every", dest="preview_every", type=int, metavar="N",
                        help="write previews/PASS_ITERATION.png (render | target) every N "
                             "iterations")
    parser.add_argument("--quiet", action="store_true", help="no progress line")


class ProgressLine:
    """One self-updating line: pass, iteration, loss, PSNR, ETA (plain lines when piped)."""

    def __init__(self, stream=sys.stderr):
        self.stream = stream
        self.live = stream.isatty()

    def __call__(self, event: dict) -> None:
        done, total = event["iteration"], event["iterations"]
        width = 24
        filled = int(width * done / total)
        eta = time.strftime("%M:%S", time.gmtime(event["eta_s"]))
        line = (f"{event['pass']} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} "
                f"loss {event['losses']['total']:.4f} psnr {event['psnr']:.2f} dB eta {eta}")
        if self.live:
            self.stream.write("\r" + line + ("\n" if done == total else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


class PreviewWriter:
    """Writes each preview event as ``out_dir/previews/<pass>_<iteration>.png``."""

    def __init__(self, out_dir: str):
        self.folder = Path(out_dir) / "previews"

    def __call__(self, event: dict) -> None:
        import torch

        from diffrec.io import write_image
        from diffrec.render.metrics import display

        self.folder.mkdir(parents=True, exist_ok=True)
        pair = display(torch.cat([event["render"], event["target"]], dim=1)[None])[0]
        path = self.folder / f"{event['pass']}_{event['iteration']:06d}.png"
        write_image(path, pair.numpy(), data=True)


def run(args) -> int:
    from diffrec.pipeline.run import optimize  # imports torch-heavy modules only when used

    file_values = read_config_file(args.config) if args.config else {}
    flags = settings_flags(args, ("device", "out_dir", "dataset", "ref_mesh", "preview_every"))
    config = build_config(file_values, flags)
    check_bounds(config, device_memory_bytes(config.device))
    line = None if args.quiet else ProgressLine()
    previews = PreviewWriter(config.out_dir)

    def progress(event: dict) -> None:
        if event["type"] == "preview":
            previews(event)
        elif event["type"] == "progress" and line is not None:
            line(event)  # log events reach the terminal through logging

    metrics = optimize(config, progress=progress)
    summary = {key: metrics[key] for key in ("psnr_mean", "ssim_mean", "time_s")}
    print(json.dumps({"out_dir": config.out_dir, **summary}, indent=2))
    return 0
