"""Which torch device work runs on: one rule for every command, the server and the libraries.

``"auto"`` (or None) is CUDA when torch sees a GPU, else Apple's MPS when torch can use it,
else the CPU. ``diffrec optimize``, ``diffrec serve``, ``diffrec info``, the memory bounds, a
``RasterContext`` and a ``NeuralMaterial`` made without a device all follow it, so what
``diffrec info`` shows is what a run uses. torch is imported on first call (the command line
parses without it).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from diffrec.errors import UserError

if TYPE_CHECKING:
    import torch

__all__ = ["default_device", "mps_available", "peak_memory_mb", "ranks_device_type",
           "resolve_device"]


def mps_available() -> bool:
    """True when this torch build has Apple's Metal backend and the machine can run it."""
    import torch

    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def default_device() -> torch.device:
    """The device "auto" means here: ``cuda`` (the current GPU), else ``mps``, else ``cpu``."""
    import torch

    if torch.cuda.is_available():
        return torch.device("cuda")
    if mps_available():
        return torch.device("mps")
    return torch.device("cpu")


def resolve_device(name: str | torch.device | None = "auto") -> torch.device:
    """The torch device ``name`` asks for ("auto" or None: ``default_device``). Raises
    UserError, in one sentence, for a name torch does not know and for CUDA or MPS asked for
    where torch cannot use it."""
    import torch

    if name is None or name == "auto":
        return default_device()
    try:
        device = torch.device(name)
    except RuntimeError as error:
        raise UserError(f"unknown device {name!r} (try auto, cpu, cuda, cuda:1 or mps): "
                        f"{error}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"device {str(name)!r} asked for, but torch sees no CUDA device here")
    if device.type == "mps" and not mps_available():
        raise UserError(f"device {str(name)!r} asked for, but torch cannot use MPS here")
    return device


def ranks_device_type(name: str | torch.device | None = "auto") -> str:
    """The device type a run on several processes trains on when its device is ``name``
    (resolved as ``resolve_device`` does): "cuda" (NCCL, one GPU per rank) or "cpu" (gloo, one
    process per core). The one rule for ``--gpus``/``--ranks``, launched ranks and the server's
    ranked jobs. Raises UserError for MPS: its processes cannot join one group, so a ranked run
    there goes on the CPU only when asked (``device cpu``)."""
    device = resolve_device(name)
    if device.type == "mps":
        raise UserError("a run on several processes trains on CUDA GPUs (NCCL) or on the CPU "
                        "(gloo), not on MPS: give device cpu to train the ranks on the CPU, "
                        "or ranks 1 to train on MPS")
    return device.type


def peak_memory_mb(device: torch.device) -> float | None:
    """Peak GPU memory allocated by torch on ``device``, or the process's peak resident memory
    elsewhere (None where the platform cannot say)."""
    import torch

    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    try:
        import resource  # Unix only
    except ImportError:
        return None
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 2**20 if sys.platform == "darwin" else rss / 1024  # bytes on macOS, else KiB
