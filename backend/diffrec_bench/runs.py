"""What the suite benchmarks (``bench_quality``, ``bench_bake_peer``) share on their command
line and in their records: a comma-separated name list argument, and the machine a run is on."""

from __future__ import annotations

import argparse
import os
import platform


def names(text: str, known, what: str) -> list[str]:
    """The names of ``text`` ("a,b" or "all"), each one of ``known``; an argparse error
    naming the unknown ones otherwise (``what``: what they name, e.g. "scene")."""
    chosen = list(known) if text == "all" else [n.strip() for n in text.split(",") if n.strip()]
    unknown = [name for name in chosen if name not in known]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"unknown {what} {', '.join(unknown) or text!r}; "
                                         f"choose from {', '.join(known)} or 'all'")
    return chosen


def machine() -> dict:
    """The platform, CPU count, Python and torch versions and the CUDA device (or None)."""
    import torch

    return {"platform": platform.platform(), "cpus": os.cpu_count(),
            "python": platform.python_version(), "torch": torch.__version__,
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
