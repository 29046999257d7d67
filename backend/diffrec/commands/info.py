"""``diffrec info``: what this installation can run on (versions, devices, engines)."""

from __future__ import annotations

import json
import platform

import torch

from diffrec import __version__
from diffrec.engines import RASTER

NAME = "info"
HELP = "show versions, devices and the rasterization engine that will be used"


def add_arguments(parser) -> None:
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")


def collect() -> dict:
    """Versions, the default device and the engine chosen for it."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    info = {
        "diffrec": __version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "device": str(device),
        "cuda_device": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "mps": bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()),
        "nvdiffrast": RASTER.module() is not None,
        "raster_engine": RASTER.resolve(device),
    }
    return info


def run(args) -> int:
    info = collect()
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        width = max(map(len, info))
        for key, value in info.items():
            print(f"{key:<{width}}  {value}")
    return 0
