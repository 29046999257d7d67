"""Servers the artist-side checks (checks_artist_side.py) press Optimize against, each a real
``diffrec.server`` in a thread of the pytest process (``helpers.servers.server_in_process``):
one whose ``optimize`` task hands back a prepared result at once, one whose jobs fail, one
whose disk is full, one that speaks CURVE to keys it allows (Blender's is not), and a port
where nothing listens. The runners live here so that the job processes can unpickle them."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

from diffrec.protocol.events import Progress
from diffrec.server import disk
from diffrec.server.optimize_runner import OptimizeRunner
from diffrec.server.runner import JobFailed

FAILURE = ("the optimisation diverged at iteration 3: lower the learning rate or the "
           "texture resolution, then submit again")
FULL = "full-disk"
"""A data directory under a folder of this name sees its disk full."""


class PreparedResult(OptimizeRunner):
    """``optimize`` that checks its inputs as the real task does, reports one progress event
    and hands back the result in ``folder`` (as the backend's writer made it)."""

    def __init__(self, folder: Path):
        super().__init__("cpu")
        self.folder = Path(folder)

    def run(self, ctx) -> None:
        ctx.emit(Progress("pass1", 1, 1, {"total": 0.5}))
        shutil.copytree(self.folder, ctx.results_dir, dirs_exist_ok=True)


class FailingOptimize(OptimizeRunner):
    """``optimize`` that fails once running, as a diverging optimisation does."""

    def run(self, ctx) -> None:
        raise JobFailed(FAILURE)


def free_bytes_but_full(real):
    """``disk.free_bytes`` that finds no room under a FULL folder, else asks ``real``."""
    return lambda path: 0 if FULL in Path(path).parts else real(path)


@contextlib.contextmanager
def artist_servers(root: Path, result: Path, monkeypatch):
    """{name: endpoint} of the servers (see the module), running until the block ends."""
    from helpers.servers import free_port, server_in_process

    from diffrec import cli

    monkeypatch.setattr(disk, "free_bytes", free_bytes_but_full(disk.free_bytes))
    curve_data = root / "curve" / "data"
    assert cli.main(["keys", "init", "--data-dir", str(curve_data), "--host", "127.0.0.1"]) == 0
    with contextlib.ExitStack() as stack:
        result_server = stack.enter_context(
            server_in_process(root / "result" / "data", [PreparedResult(result)]))
        failing = stack.enter_context(
            server_in_process(root / "failing" / "data", [FailingOptimize()]))
        full = stack.enter_context(server_in_process(root / FULL / "data"))
        curve = stack.enter_context(server_in_process(curve_data, curve=True))
        yield {
            "result": result_server.endpoint,
            "failing": failing.endpoint,
            "full": full.endpoint,
            "refusing": curve.pairing,
            "down": f"tcp://127.0.0.1:{free_port()}",
        }
