"""DeviceWaits: the calls that make the host wait for a GPU, counted on the CPU."""

import collections

import torch

from diffrec.device_waits import DeviceWaits


def asks_for_values(x):
    flags = x > 0.5
    if flags.any():  # a read: waits
        pass
    first = x[flags]  # a boolean mask: sized by the values, waits
    kept = x[torch.tensor([0, 2])]  # an index list: no wait
    unique = torch.unique(x)  # sized by the values (asked through torch's Python wrapper)
    return first, kept, unique, x.sum().item()  # a read: waits


def test_reads_and_value_sized_calls_are_counted_with_the_line_that_asked():
    x = torch.tensor([0.2, 0.9, 0.7, 0.1])
    with DeviceWaits() as waits:
        asks_for_values(x)
    assert [wait.call for wait in waits.calls] == ["__bool__", "__getitem__", "unique", "item"]
    assert {wait.function for wait in waits.calls} == {"asks_for_values"}
    here = __file__ + ":"
    assert all(wait.where.startswith(here) for wait in waits.calls), waits.calls
    assert sum(waits.by_line.values()) == 4 and len(waits.by_line) == 4


def test_counts_go_into_a_given_counter_and_stop_with_the_context():
    counts = collections.Counter()
    with DeviceWaits(counts):
        torch.ones(3).nonzero()
    torch.ones(3).nonzero()
    assert sum(counts.values()) == 1
