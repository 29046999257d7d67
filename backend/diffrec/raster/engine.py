"""Choosing the rasterization engine: nvdiffrast (CUDA) or the pure-torch implementation.

Both engines compute the same functions with the same contracts (see ``diffrec.raster``).
The choice, in order of precedence:

1. an explicit ``impl`` argument (``"torch"`` or ``"nvdiffrast"``);
2. the environment variable ``DIFFREC_RASTER`` (same values, or ``"auto"``);
3. ``"auto"``: nvdiffrast when the tensors live on a CUDA device and nvdiffrast imports,
   torch otherwise.
"""

from __future__ import annotations

import logging
import os

import torch

from diffrec.optional import optional_module

log = logging.getLogger(__name__)

ENGINES = ("torch", "nvdiffrast")
ENV_VAR = "DIFFREC_RASTER"


class EngineUnavailableError(RuntimeError):
    """The requested engine cannot run here (package missing or device not supported)."""


def nvdiffrast_module():
    """``nvdiffrast.torch`` if it imports, else None."""
    return optional_module("nvdiffrast.torch")


def requested_engine(impl: str | None = None) -> str:
    """The engine asked for by ``impl`` or ``$DIFFREC_RASTER``: "auto", "torch" or "nvdiffrast"."""
    choice = impl if impl is not None else os.environ.get(ENV_VAR, "auto")
    choice = choice.strip().lower()
    if choice not in ("auto", *ENGINES):
        source = "impl" if impl is not None else f"${ENV_VAR}"
        raise ValueError(f"{source} must be 'auto', 'torch' or 'nvdiffrast', not {choice!r}")
    return choice


def resolve_engine(device: torch.device, impl: str | None = None) -> str:
    """The engine that runs on ``device``: "torch" or "nvdiffrast".

    Raises EngineUnavailableError when nvdiffrast is requested explicitly but cannot run.
    """
    choice = requested_engine(impl)
    cuda = torch.device(device).type == "cuda"
    if choice == "auto":
        return "nvdiffrast" if cuda and nvdiffrast_module() is not None else "torch"
    if choice == "nvdiffrast":
        if not cuda:
            raise EngineUnavailableError(
                f"the nvdiffrast engine needs a CUDA device, got {torch.device(device)}; "
                "use impl='torch' (or DIFFREC_RASTER=torch) on this device"
            )
        if nvdiffrast_module() is None:
            raise EngineUnavailableError(
                "nvdiffrast is not installed or failed to import; install it with "
                "scripts/install_gpu, or use impl='torch' (DIFFREC_RASTER=torch)"
            )
    return choice
