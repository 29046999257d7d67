#!/usr/bin/env python3
"""Judge a reconstruction's files on a config's own held-out views: one judge for diffrec's
result and the reference system's (nvdiffrec), so that their PSNR compare.

The code is ``diffrec_bench.judge_result``; ``--help`` lists the options."""

import sys

from diffrec_bench.judge_result import main

if __name__ == "__main__":
    sys.exit(main())
