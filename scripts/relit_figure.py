#!/usr/bin/env python3
"""A before / after figure for the docs from two ``scripts/bench_quality --relight`` runs of
one scene (``diffrec_bench.relit_figure``):

    python scripts/relit_figure.py out/A/materials/critter/relit.png \\
        out/B/materials/critter/relit.png --labels "normal map" "none" \\
        --out docs/images/relit_critter.png
"""

from diffrec_bench.relit_figure import main

if __name__ == "__main__":
    main()
