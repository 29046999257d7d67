"""The benchmarks' and the demo's library (``scripts/bench_*.py``, ``scripts/demo.py``): the
quality suite (``quality``), the peer against Blender's own bake (``bake_peer``), the demo's
scene, judging and report (``demo``). Installed with the backend (``backend/pyproject.toml``);
it drives Blender through the add-on of the same checkout (``checkout``), so it runs from a
checkout's editable install, as ``scripts/lib/venv.sh`` makes it."""
