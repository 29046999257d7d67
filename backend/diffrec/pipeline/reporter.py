"""How a run tells the world what it does: one typed reporter, from the trainer to the user.

The trainer calls one ``Reporter``: ``progress`` every ``log_every`` iterations (a
``diffrec.protocol.events.Progress``, the event every hop forwards unchanged), ``preview``
every ``preview_every``, ``log`` for sentences (a pass resumed; with ``stage``, what the run
does between passes), ``should_stop`` every iteration and ``stop_takes`` when the time a
stop would take grows. The command line's progress line
and the job server's events are subclasses; this base reports nothing and never stops.
Checkpoints are no report: a run keeps them in the ``CheckpointStore`` it is given
(``pipeline.checkpoints``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from diffrec.protocol import events
from diffrec.protocol.events import Progress

__all__ = ["PreviewFrame", "Progress", "Reporter"]

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class PreviewFrame:
    """The first view of the latest batch: ``event`` its fields (pass and iteration),
    ``render`` and ``target`` ``[H, W, 3]`` linear (CPU); ``panels`` the ``display``
    setting's extra images by name; ``vertices`` ``[V, 3]`` and ``faces`` ``[F, 3]`` the
    current mesh when the geometry moves (else None)."""

    event: events.Preview
    render: torch.Tensor
    target: torch.Tensor
    panels: dict[str, torch.Tensor] = field(default_factory=dict)
    vertices: torch.Tensor | None = None
    faces: torch.Tensor | None = None

    @property
    def pass_name(self) -> str:
        return self.event.pass_name

    @property
    def iteration(self) -> int:
        return self.event.iteration


class Reporter:
    """Receives a run's reports; override what a front end shows."""

    def progress(self, progress: Progress) -> None:
        """Every ``log_every`` iterations and at the end of each pass."""

    def preview(self, preview: PreviewFrame) -> None:
        """Every ``preview_every`` iterations (when set)."""

    def log(self, message: str, level: str = "info", **fields: Any) -> None:
        """A sentence for the user (``fields``: extra event fields such as ``resumed_from``)."""

    def should_stop(self) -> bool:
        """Polled every iteration and between stages; True cancels the run."""
        return False

    def stop_takes(self, seconds: float) -> None:
        """The longest a stop asked now would take, its checkpoint written (measured by the
        trainer, ``trainer.StopCost``); a job server waits that long before killing a job."""
