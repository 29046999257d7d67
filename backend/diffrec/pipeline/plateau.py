"""The plateau stopping rule: a pass ends once its training PSNR has stopped rising.

Every iteration's batch PSNR is kept (as the device tensor ``step`` returns: nothing waits for
the device here); ``flat`` compares the mean over the last ``window`` iterations with the mean
over the ``window`` before them and says the pass has converged when the gain is below
``min_gain_db``. A mean over a whole window of batches, not one report's batch, so that which
views a batch drew does not decide (a batch's PSNR wobbles by about 1 dB, a 100-batch mean by
about 0.1). On by default (``window`` 100 and 0.3 dB in the settings' default and the
``preview`` and ``standard`` presets, which ends the demo's and the quality suite's
800-iteration CPU passes at 320 to 420, where their curves have levelled off; docs/
BENCHMARKS.md); off when ``window`` is 0 (``high``, and nvdiffrec's configs). A resumed pass
starts its windows afresh.
"""

from __future__ import annotations

from collections import deque

import torch


class Plateau:
    """Training PSNR over the last ``2 * window`` iterations; ``flat()`` once the newer
    window's mean gains less than ``min_gain_db`` (dB) on the older one's."""

    def __init__(self, window: int, min_gain_db: float):
        self.window, self.min_gain_db = window, min_gain_db
        self.values: deque[torch.Tensor] = deque(maxlen=2 * window)
        self.gain_db: float | None = None  # the last comparison's gain

    def add(self, psnr: torch.Tensor) -> None:
        """Record one iteration's batch PSNR (a 0-d tensor, on any device)."""
        if self.window:
            self.values.append(psnr)

    def flat(self) -> bool:
        """Whether the last ``window`` iterations gained less than ``min_gain_db`` on the
        ``window`` before (False until two windows are in; reads from the device)."""
        if not self.window or len(self.values) < 2 * self.window:
            return False
        values = torch.stack(list(self.values)).double().cpu()
        self.gain_db = float(values[self.window:].mean() - values[:self.window].mean())
        return self.gain_db < self.min_gain_db

    def why(self) -> str:
        """The last comparison in words, for the log line of a pass that stopped."""
        return (f"training PSNR rose {self.gain_db:.3f} dB over its last {self.window} "
                f"iterations (plateau_db {self.min_gain_db})")
