#!/usr/bin/env python3
"""Run the reference system (nvdiffrec, from its own repository) on a config, side by side
with ``scripts/bench_passes.py``: milliseconds per iteration of each pass, peak GPU memory,
whole-run wall time and held-out PSNR, as one markdown row and one JSON line.

The code is ``diffrec_bench.nvdiffrec_peer``; ``--help`` lists the options."""

import sys

from diffrec_bench.nvdiffrec_peer import main

if __name__ == "__main__":
    sys.exit(main())
