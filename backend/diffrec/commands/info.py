"""``diffrec info``: what this installation can run on (versions, devices, engines)."""

from __future__ import annotations

import json
import platform

from diffrec import __version__

NAME = "info"
HELP = "show versions, devices and the engines that will be used (--check: test the CUDA path)"


def add_arguments(parser) -> None:
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")
    parser.add_argument("--check", action="store_true",
                        help="run the CUDA fast path (nvdiffrast, tiny-cuda-nn) once, each part "
                             "in a child process, and say what fails and how to fix it; exit "
                             "status 1 when anything fails")


def collect() -> dict:
    """Versions, the device "auto" picks (what ``diffrec optimize`` runs on) and the engines
    chosen for it."""
    import torch

    from diffrec.devices import default_device, mps_available
    from diffrec.engines import NEURAL, RASTER

    device = default_device()
    info = {
        "diffrec": __version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "device": str(device),
        "cuda_device": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "mps": mps_available(),
        "nvdiffrast": RASTER.module() is not None,
        "raster_engine": RASTER.resolve(device),
        "tinycudann": NEURAL.module() is not None,
        "neural_engine": NEURAL.resolve(device),
    }
    return info


def run(args) -> int:
    if args.check:
        from diffrec.fast_path import check_fast_path

        outcomes = check_fast_path()
        for outcome in outcomes:
            print(outcome.line(), flush=True)
        return 0 if all(outcome.ok for outcome in outcomes) else 1
    info = collect()
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        width = max(map(len, info))
        for key, value in info.items():
            print(f"{key:<{width}}  {value}")
    return 0
