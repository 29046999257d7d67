"""The unwrap's child process: ``python -m diffrec.pipeline.unwrap_child REQUEST RESULT``.

A plain process (``subprocess``), not a ``multiprocessing`` child, so that it starts from any
process: the command line, a job's process (which ``multiprocessing`` makes a daemon, and a
daemon may not have ``multiprocessing`` children) or a Ray worker. It imports numpy alone
(never torch), so it starts in a fraction of a second.

``REQUEST``: a pickle of ``(worker, positions, triangles, options)`` written by the parent
(``unwrap.run_in_child``), never anything received from the network. ``RESULT``: an ``.npz``
written atomically (temporary name, then rename) holding ``vmapping``, ``indices``, ``uvs``, or
``error`` (one sentence). The child ends itself as soon as its parent is gone.
"""

from __future__ import annotations

import os
import pickle
import sys
import threading
import time

import numpy as np

PARENT_POLL_S = 0.5


class UnwrapFailed(RuntimeError):
    """xatlas gave no usable layout (the message says why); ``unwrap`` falls back on it."""


def xatlas_worker(positions: np.ndarray, triangles: np.ndarray, options: dict):
    """Run xatlas on one mesh, one atlas of about ``options["resolution"]`` texels a side with
    ``options["padding"]`` texels around each chart. Meant for the child."""
    import xatlas  # imported here: a missing package is one more failure the parent survives

    atlas = xatlas.Atlas()
    atlas.add_mesh(positions, triangles)
    pack = xatlas.PackOptions()
    pack.resolution = int(options["resolution"])
    pack.padding = int(options["padding"])
    pack.bilinear = True
    atlas.generate(pack_options=pack)
    if atlas.atlas_count != 1:
        raise UnwrapFailed(f"xatlas made {atlas.atlas_count} atlases, expected one")
    return atlas[0]


def _end_with_parent(parent: int) -> None:
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="end-with-parent", daemon=True).start()


def main(request_path: str, result_path: str, parent: int) -> None:
    _end_with_parent(parent)
    with open(request_path, "rb") as request:
        worker, positions, triangles, options = pickle.load(request)
    try:
        vmapping, indices, uvs = (np.asarray(a) for a in worker(positions, triangles, options))
        arrays = {"vmapping": vmapping, "indices": indices, "uvs": uvs}
    except BaseException as exc:  # everything goes back to the parent as text
        arrays = {"error": np.array(f"{type(exc).__name__}: {exc}")}
    partial = result_path + ".partial"
    with open(partial, "wb") as result:
        np.savez(result, **arrays)
    os.replace(partial, result_path)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
