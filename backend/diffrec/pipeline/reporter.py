"""How a run tells the world what it does: one typed reporter, from the trainer to the user.

The trainer calls one ``Reporter``: ``progress`` every ``log_every`` iterations, ``preview``
every ``preview_every``, ``log`` for sentences (a pass resumed), ``should_stop`` every
iteration and ``save_checkpoint`` / ``load_checkpoint`` for its state. The command line's
progress line and the job server's events are subclasses; this base reports nothing, never
stops and keeps checkpoints in ``checkpoints`` when given one (else none).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from diffrec.pipeline.checkpoints import CheckpointStore


@dataclass(frozen=True)
class Progress:
    """One progress report: ``losses`` {total, color, alpha}, the batch ``psnr`` (dB),
    seconds spent in this pass (``elapsed_s``) and still needed (``eta_s``)."""

    pass_name: str
    pass_index: int
    iteration: int
    iterations: int
    losses: dict[str, float]
    psnr: float
    elapsed_s: float
    eta_s: float

    def fields(self) -> dict[str, Any]:
        """The protocol's ``progress`` event fields (docs/protocol.md)."""
        return {"pass": self.pass_name, "pass_index": self.pass_index,
                "iteration": self.iteration, "iterations": self.iterations,
                "losses": dict(self.losses), "psnr": self.psnr, "elapsed_s": self.elapsed_s,
                "eta_s": self.eta_s}


@dataclass(frozen=True)
class Preview:
    """The first view of the latest batch: ``render`` and ``target`` ``[H, W, 3]`` linear
    (CPU); ``panels`` the ``display`` setting's extra images by name; ``vertices`` ``[V, 3]``
    and ``faces`` ``[F, 3]`` the current mesh when the geometry moves (else None)."""

    pass_name: str
    pass_index: int
    iteration: int
    render: torch.Tensor
    target: torch.Tensor
    panels: dict[str, torch.Tensor] = field(default_factory=dict)
    vertices: torch.Tensor | None = None
    faces: torch.Tensor | None = None

    def fields(self) -> dict[str, Any]:
        """The protocol's ``preview`` event fields (the images travel as arrays)."""
        return {"pass": self.pass_name, "pass_index": self.pass_index,
                "iteration": self.iteration}


class Reporter:
    """Receives a run's reports; override what a front end shows."""

    def __init__(self, checkpoints: CheckpointStore | None = None):
        self.checkpoints = checkpoints

    def progress(self, progress: Progress) -> None:
        """Every ``log_every`` iterations and at the end of each pass."""

    def preview(self, preview: Preview) -> None:
        """Every ``preview_every`` iterations (when set)."""

    def log(self, message: str, level: str = "info", **fields: Any) -> None:
        """A sentence for the user (``fields``: extra event fields such as ``resumed_from``)."""

    def should_stop(self) -> bool:
        """Polled every iteration and between stages; True cancels the run."""
        return False

    def save_checkpoint(self, stage: str, state: dict) -> None:
        """Keep ``state`` (a dict of tensors and plain values) as ``stage``'s checkpoint."""
        if self.checkpoints is not None:
            self.checkpoints.save(stage, state)

    def load_checkpoint(self, stage: str) -> dict | None:
        """``stage``'s last checkpoint, or None."""
        return None if self.checkpoints is None else self.checkpoints.load(stage)
