#!/usr/bin/env python3
"""Assets seen from afar (issue 51): the quality suite's results drawn at 1/2, 1/4 and 1/8 of
their training size by diffrec's rasterizer at one sample per pixel, as an engine draws them,
with the mip levels an engine builds (2x2 box averages, base colour averaged in its sRGB
encoding or in linear) and with the levels diffrec fitted and exported (read back from the
KTX2 files), each judged against Cycles rendering the full-resolution asset at that size with
many samples and a one-pixel box filter: the ground truth of how the asset should look from
that far.

The code is ``diffrec_bench.mips``; ``--help`` lists the options."""

import sys

from diffrec_bench.mips import main

if __name__ == "__main__":
    sys.exit(main())
