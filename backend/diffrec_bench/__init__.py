"""The benchmarks' and the demo's code, run through thin entry points in ``scripts/`` (same
command lines): the quality suite (``quality``), the peer against Blender's own bake
(``bake_peer``), the demo's scene, judging and report (``demo``), and the benchmarks that tests
import (``mips``, ``passes``, ``nvdiffrec_peer``, ``judge_result``, ``gpu_fd_verdict``,
``peak_memory``, ``relit_figure``, ``zmtp_peer``, ``photo_capture``, ``from_photos``).
Installed with the backend (``backend/pyproject.toml``); it drives Blender through the add-on of
the same checkout (``checkout``), so it runs from a checkout's editable install, as
``scripts/lib/venv.sh`` makes it."""
