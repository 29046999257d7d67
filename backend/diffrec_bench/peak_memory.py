"""What holds the GPU's memory at a run's peak: torch's allocator history, replayed to the
moment the most memory was allocated, with the tensors alive then grouped by the line of
diffrec that allocated them (``scripts/bench_passes.py --memory``).

``recorded()`` turns the history on (CUDA only; Python stacks for every allocation, which slows
a run: time such a run for nothing else); ``holders_at_peak(trace)`` replays a trace (the
events of ``torch.cuda.memory._snapshot()["device_traces"]``: ``action``, ``addr``, ``size``,
``frames`` innermost first) and ``write_report`` writes the table.
"""

from __future__ import annotations

import collections
import contextlib
from pathlib import Path

import torch

FREES = ("free_requested", "free_completed")  # a block counts as freed at the first of these
MAX_ENTRIES = 2_000_000  # events kept: past it the oldest are dropped (the report says so)


@contextlib.contextmanager
def recorded(enabled: bool, device: torch.device):
    """Record the allocator's history on ``device`` while the context runs (when ``enabled``
    and on CUDA); yields a callable that returns the trace recorded so far."""
    if not (enabled and device.type == "cuda"):
        yield lambda: []
        return
    torch.cuda.memory._record_memory_history(context="alloc", stacks="python",
                                             max_entries=MAX_ENTRIES)
    try:
        yield lambda: torch.cuda.memory._snapshot()["device_traces"][device.index or 0]
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)


def allocation_site(frames: list[dict]) -> str:
    """The innermost frame in diffrec's backend (else in the benchmarks' package or a script,
    else the innermost of all) as ``path:line (function)``, the path from ``diffrec/``,
    ``diffrec_bench/`` or ``scripts/`` on."""
    for marker in ("/diffrec/", "/diffrec_bench/", "/scripts/"):
        for frame in frames:
            name = frame.get("filename", "")
            if marker in name and "/site-packages/" not in name:
                short = name[name.rindex(marker) + 1:]
                return f"{short}:{frame.get('line')} ({frame.get('name')})"
    if frames:
        return f"{frames[0].get('filename')}:{frames[0].get('line')} ({frames[0].get('name')})"
    return "(no stack recorded)"


def holders_at_peak(trace: list[dict]) -> tuple[int, int, list[tuple[str, int, int]]]:
    """Replay ``trace``: returns (the peak bytes allocated, the index of the event that reached
    it, and the blocks alive then as ``(site, bytes, count)``, most bytes first). Frees of
    blocks allocated before the trace began are left out."""
    allocated = peak = 0
    peak_index = -1
    sizes: dict[int, int] = {}
    for index, event in enumerate(trace):
        if event["action"] == "alloc":
            sizes[event["addr"]] = event["size"]
            allocated += event["size"]
            if allocated > peak:
                peak, peak_index = allocated, index
        elif event["action"] in FREES and event["addr"] in sizes:
            allocated -= sizes.pop(event["addr"])
    live: dict[int, tuple[int, str]] = {}
    for event in trace[:peak_index + 1]:
        if event["action"] == "alloc":
            live[event["addr"]] = (event["size"], allocation_site(event.get("frames", [])))
        elif event["action"] in FREES:
            live.pop(event["addr"], None)
    totals: collections.Counter = collections.Counter()
    counts: collections.Counter = collections.Counter()
    for size, site in live.values():
        totals[site] += size
        counts[site] += 1
    return peak, peak_index, [(site, size, counts[site]) for site, size in totals.most_common()]


def write_report(path: Path, trace: list[dict], top: int = 25) -> None:
    """Append the peak and its ``top`` holders to ``path`` (markdown)."""
    peak, index, holders = holders_at_peak(trace)
    with path.open("a") as out:
        if not trace:
            out.write("## GPU memory at the peak: nothing recorded (CUDA only)\n\n")
            return
        out.write(f"## GPU memory at the peak: {peak / 2**20:,.1f} MiB allocated "
                  f"(event {index + 1} of {len(trace)})\n\n")
        if len(trace) >= MAX_ENTRIES:
            out.write("(the trace is full: its oldest events were dropped, and blocks "
                      "allocated then are missing below)\n\n")
        out.write("| MiB | tensors | allocated at |\n| --- | --- | --- |\n")
        for site, size, count in holders[:top]:
            out.write(f"| {size / 2**20:,.1f} | {count} | {site} |\n")
        rest = holders[top:]
        if rest:
            out.write(f"| {sum(s for _, s, _ in rest) / 2**20:,.1f} | "
                      f"{sum(c for _, _, c in rest)} | {len(rest)} other lines |\n")
        out.write("\n")
