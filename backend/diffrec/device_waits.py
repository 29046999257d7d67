"""Counting the calls that make the host wait for a tensor's device, on any device.

On a GPU, reading values back (``bool(t)``, ``t.item()``, ``t.tolist()``, ``int(t)``...) and
ops whose output size depends on the values (``nonzero``, ``unique``, indexing with a boolean
mask...) make the host wait for the device; ``torch.cuda.set_sync_debug_mode`` reports them,
on CUDA only. ``DeviceWaits`` counts the same calls on any device, each with the code that
asked, so the host's waits can be found and held to a number on a CPU (the tests;
``scripts/bench_passes.py --profile``). Counting slows every torch call a little: a tool for
tests and profiles, not for runs.
"""

from __future__ import annotations

import collections
import sys
from pathlib import Path
from typing import NamedTuple

import torch
from torch.overrides import TorchFunctionMode

__all__ = ["DeviceWaits", "Wait"]

READS = frozenset({"__bool__", "item", "tolist", "__int__", "__float__", "__index__"})
VALUE_SIZED = frozenset({"nonzero", "unique", "unique_consecutive", "masked_select"})
_TORCH = str(Path(torch.__file__).parent)


class Wait(NamedTuple):
    """One call that waits: its name, and the nearest Python function outside torch that made
    it, with its ``file:line``."""

    call: str
    function: str
    where: str


def _boolean_index(args) -> bool:
    index = args[1] if len(args) > 1 else None
    parts = index if isinstance(index, tuple) else (index,)
    return any(torch.is_tensor(part) and part.dtype == torch.bool for part in parts)


def _asker():
    frame = sys._getframe(2)
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_TORCH):
        frame = frame.f_back
    return frame


class DeviceWaits(TorchFunctionMode):
    """Within ``with DeviceWaits() as waits:``, ``waits.calls`` lists each ``Wait`` in order;
    ``by_line`` (a Counter, given or new) counts them by ``where``."""

    def __init__(self, by_line: collections.Counter | None = None):
        super().__init__()
        self.calls: list[Wait] = []
        self.by_line = collections.Counter() if by_line is None else by_line

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in READS or name in VALUE_SIZED or (name == "__getitem__"
                                                    and _boolean_index(args)):
            frame = _asker()
            wait = Wait(name, frame.f_code.co_name,
                        f"{frame.f_code.co_filename}:{frame.f_lineno}")
            self.calls.append(wait)
            self.by_line[wait.where] += 1
        return func(*args, **(kwargs or {}))
