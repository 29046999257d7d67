#!/usr/bin/env python3
"""Time diffrec's two passes on one config: milliseconds per iteration of pass 1 (the surface)
and pass 2 (mesh + textures), peak memory, whole-run wall time and held-out PSNR.

The code is ``diffrec_bench.passes``; ``--help`` lists the options."""

import sys

from diffrec_bench.passes import main

if __name__ == "__main__":
    sys.exit(main())
