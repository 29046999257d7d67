#!/usr/bin/env python3
"""A real engine draws a diffrec result (issue 51): three.js in headless Chromium, mesh.glb
(WebGL's own mips) and mesh_ktx2.glb (the exported KTX2 chains) near and far, side by side.
The code and its description are ``diffrec_bench.engine_view``; ``--help`` lists the options."""

import sys

from diffrec_bench.engine_view import main

if __name__ == "__main__":
    sys.exit(main())
