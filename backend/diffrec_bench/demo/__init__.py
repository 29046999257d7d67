"""The demo's pieces (``scripts/demo.py``), shared by the benchmarks: the Blender scene, the
local backend, the dataset, judging and the report pictures."""
