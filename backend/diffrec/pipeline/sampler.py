"""Reproducible, resumable training batches of views."""

from __future__ import annotations

import torch

from diffrec.camera import Cameras
from diffrec.errors import UserError
from diffrec.pipeline.views import Views

__all__ = ["ViewSampler", "rank_share"]


def rank_share(batch_size: int, ranks: int) -> int:
    """Views per rank when ``ranks`` ranks split a batch of ``batch_size``; a batch that does
    not split evenly is refused (UserError), so that every rank renders as many views."""
    if batch_size < 1:
        raise UserError(f"batch size must be at least 1, got {batch_size}")
    if batch_size % ranks:
        raise UserError(f"a batch of {batch_size} views does not split evenly over {ranks} "
                        f"ranks: choose a batch that is a multiple of {ranks}")
    return batch_size // ranks


class ViewSampler:
    """Random training batches of ``batch_size`` view indices, reproducible from ``seed``.

    Views are drawn in shuffled epochs (every view once per epoch, a fresh permutation from
    a ``torch.Generator`` after each); a batch may straddle two epochs. ``state_dict()`` /
    ``load_state_dict()`` save and restore the position, so a resumed run draws the same
    batches as an uninterrupted one. Iterating yields ``views.batch(next_indices())``.

    Data-parallel training (``pipeline.distributed``): ``rank`` of ``ranks`` draws the same
    batches as a single sampler of the same seed and keeps its ``rows`` of each, so the
    ranks' shares together are the single-process batch, in order. The state is the whole
    batch's, the same on every rank: a checkpoint resumes with any number of ranks.
    """

    def __init__(self, views: Views, batch_size: int, seed: int = 0, rank: int = 0,
                 ranks: int = 1):
        share = rank_share(batch_size, ranks)
        if not 0 <= rank < ranks:
            raise ValueError(f"rank {rank} is not among {ranks} ranks")
        self.views, self.batch_size, self.seed = views, int(batch_size), int(seed)
        self.rows = slice(rank * share, (rank + 1) * share)  # this rank's rows of a batch
        self._generator = torch.Generator().manual_seed(self.seed)
        self._order = torch.randperm(len(views), generator=self._generator)
        self._position = 0

    def next_indices(self) -> torch.Tensor:
        """This rank's share of the next batch: int64 view indices (CPU), ``batch_size`` of
        them for a single rank."""
        return self._next_batch()[self.rows]

    def _next_batch(self) -> torch.Tensor:
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
