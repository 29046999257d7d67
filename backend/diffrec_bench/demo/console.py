"""Console output around Blender: its own prints silenced where they would drown ours."""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading

# Blender's line per render: "01:05.223  render           | Saved: '/tmp/.../view.exr'"
RENDER_SAVED = re.compile(rb"\| Saved: '")


@contextlib.contextmanager
def quiet_stdout():
    """Silence Blender's own prints (one 'Saved: ...' line per render) at the file level."""
    sys.stdout.flush()
    saved = os.dup(1)
    with open(os.devnull, "w") as devnull:
        os.dup2(devnull.fileno(), 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


@contextlib.contextmanager
def without_lines(pattern: re.Pattern[bytes] = RENDER_SAVED):
    """Pass stdout through, at the file level, except the lines that match ``pattern``
    (Blender's per-render 'Saved:' lines while the add-on renders its targets)."""
    sys.stdout.flush()
    saved = os.dup(1)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 1)
    os.close(write_end)

    def copy() -> None:
        with os.fdopen(read_end, "rb") as lines:
            for line in lines:
                if not pattern.search(line):
                    os.write(saved, line)

    copier = threading.Thread(target=copy, daemon=True)
    copier.start()
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)  # closes the pipe's last write end: the copier reads to the end
        copier.join()
        os.close(saved)
