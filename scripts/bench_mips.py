#!/usr/bin/env python3
"""Assets seen from afar (issue 51): mip levels judged against Cycles at 1/2, 1/4 and 1/8 of
the training size. The code and its description are ``diffrec_bench.mips``; ``--help`` lists
the options."""

import sys

from diffrec_bench.mips import main

if __name__ == "__main__":
    sys.exit(main())
