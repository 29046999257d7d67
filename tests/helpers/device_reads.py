"""Counting the places code makes the host wait for a tensor's device.

On a GPU, reading values back (``bool(t)``, ``t.item()``, ``t.tolist()``, ``int(t)``...) and
ops whose output size depends on the values (``nonzero``, ``unique``, indexing with a boolean
mask...) make the host wait for the device; ``torch.cuda.set_sync_debug_mode`` lists them
there. This mode counts the same calls on any device, so CPU tests can hold hot code to a
number of waits.
"""

import sys

import torch
from torch.overrides import TorchFunctionMode

READS = frozenset({"__bool__", "item", "tolist", "__int__", "__float__", "__index__"})
VALUE_SIZED = frozenset({"nonzero", "unique", "unique_consecutive", "masked_select"})


def _boolean_index(args) -> bool:
    index = args[1] if len(args) > 1 else None
    parts = index if isinstance(index, tuple) else (index,)
    return any(torch.is_tensor(part) and part.dtype == torch.bool for part in parts)


class DeviceReads(TorchFunctionMode):
    """Within ``with DeviceReads() as reads:``, ``reads.waits`` lists each wait as ``(call,
    Python function that made it)``."""

    def __init__(self):
        super().__init__()
        self.waits: list[tuple[str, str]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in READS or name in VALUE_SIZED or (name == "__getitem__"
                                                    and _boolean_index(args)):
            self.waits.append((name, sys._getframe(1).f_code.co_name))
        return func(*args, **(kwargs or {}))
