#!/usr/bin/env python3
"""Photos in, asset out (issue 52): ``diffrec optimize`` on the photo-like capture with true
masks and cameras, with made masks, and with cameras found by ``diffrec poses``, scored on the
object. The code and its description are ``diffrec_bench.from_photos``; ``--help`` lists the
options."""

import sys

from diffrec_bench.from_photos import main

if __name__ == "__main__":
    sys.exit(main())
