"""The demo's output folder: made (or emptied) only when it is the demo's own.

The demo marks each folder it makes with ``MARKER``; it empties a folder for a new run only
when the marker is there, takes an empty folder, and refuses anything else, so that
``--out ~/Documents`` deletes nothing.
"""

from __future__ import annotations

import shutil
from pathlib import Path

MARKER = ".diffrec-demo"
"""The file that says a folder was made by the demo and may be emptied by it."""


def prepare(out: Path) -> None:
    """Make ``out`` an empty folder holding only ``MARKER``. A missing or empty folder is
    taken; one holding the marker is emptied; anything else raises SystemExit with a sentence
    and is left as it was."""
    if out.exists() and not out.is_dir():
        raise SystemExit(f"scripts/demo: --out {out} is not a folder; give a new or empty "
                         f"folder")
    if out.is_dir() and any(out.iterdir()):
        if not (out / MARKER).is_file():
            raise SystemExit(f"scripts/demo: --out {out} is not empty and was not made by the "
                             f"demo, so it is left alone; give a new or empty folder")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text("made by scripts/demo; emptied by its next run into this folder\n")
