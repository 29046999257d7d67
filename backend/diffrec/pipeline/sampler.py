"""Reproducible, resumable training batches of views."""

from __future__ import annotations

import torch

from diffrec.camera import Cameras
from diffrec.errors import UserError
from diffrec.pipeline.views import Views

__all__ = ["ViewSampler"]


class ViewSampler:
    """Random training batches of ``batch_size`` view indices, reproducible from ``seed``.

    Views are drawn in shuffled epochs (every view once per epoch, a fresh permutation from
    a ``torch.Generator`` after each); a batch may straddle two epochs. ``state_dict()`` /
    ``load_state_dict()`` save and restore the position, so a resumed run draws the same
    batches as an uninterrupted one. Iterating yields ``views.batch(next_indices())``.
    """

    def __init__(self, views: Views, batch_size: int, seed: int = 0):
        if batch_size < 1:
            raise UserError(f"batch size must be at least 1, got {batch_size}")
        self.views, self.batch_size, self.seed = views, int(batch_size), int(seed)
        self._generator = torch.Generator().manual_seed(self.seed)
        self._order = torch.randperm(len(views), generator=self._generator)
        self._position = 0

    def next_indices(self) -> torch.Tensor:
        """The next batch: int64 ``[batch_size]`` view indices (CPU)."""
        taken = []
        while sum(len(part) for part in taken) < self.batch_size:
            if self._position == len(self._order):
                self._order = torch.randperm(len(self.views), generator=self._generator)
                self._position = 0
            want = self.batch_size - sum(len(part) for part in taken)
            taken.append(self._order[self._position : self._position + want])
            self._position += len(taken[-1])
        return torch.cat(taken)

    def __iter__(self) -> ViewSampler:
        return self

    def __next__(self) -> tuple[Cameras, torch.Tensor]:
        return self.views.batch(self.next_indices())

    def state_dict(self) -> dict:
        return {
            "views": len(self.views),
            "batch_size": self.batch_size,
            "seed": self.seed,
            "generator": self._generator.get_state(),
            "order": self._order.clone(),
            "position": self._position,
        }

    def load_state_dict(self, state: dict) -> None:
        if state["views"] != len(self.views):
            raise UserError(
                f"the checkpoint's sampler was made for {state['views']} views but this dataset "
                f"has {len(self.views)}: resume with the same dataset"
            )
        self.batch_size, self.seed = int(state["batch_size"]), int(state["seed"])
        self._generator.set_state(state["generator"])
        self._order = state["order"].clone()
        self._position = int(state["position"])
