#!/usr/bin/env python3
"""Finite-difference verdicts for the rows where the torch engine and nvdiffrast disagree
(issue 28, item 3): each engine's gradient is checked against central differences of its own
forward pass, on the same inputs, so the table says which engine is right rather than only
that they differ.

The code is ``diffrec_bench.gpu_fd_verdict``; ``--help`` lists the options."""

import sys

from diffrec_bench.gpu_fd_verdict import main

if __name__ == "__main__":
    sys.exit(main())
