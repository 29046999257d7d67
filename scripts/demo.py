"""diffrec's demo, end to end (``diffrec_bench.demo.command``): build a scene in Blender, render
its targets with Cycles, run Optimize on a local backend, import the result and judge it with
Cycles on held-out views. Run through ``scripts/demo``, or ``python scripts/demo.py --out
out/demo``; ``--help`` lists the options."""

import sys

from diffrec_bench.demo.command import main

if __name__ == "__main__":
    sys.exit(main())
