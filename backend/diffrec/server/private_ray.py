"""The Ray that ``diffrec serve --cluster local`` starts for itself, closed to everyone else.

- **Every listener on loopback.** Ray's gRPC servers (the GCS, the raylet's node and object
  managers, each worker's and this driver's own) listen on 127.0.0.1 only when the node's
  address is 127.0.0.1, and on every interface otherwise; the runtime-env agent, the
  dashboard agent and the metrics exporter follow the node's address too. ``ray.init``
  replaces an ``_node_ip_address`` of 127.0.0.1 with the machine's network address, except in
  Ray's single-machine mode (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, its default on macOS and
  Windows), which ``start`` turns on for the processes Ray starts (the variable) and for this
  one (the constant Ray read the variable into when it was imported). No dashboard.
- **A token in no file.** Ray turns token authentication on for a Ray that ``ray.init``
  starts and, lacking a token, writes one to ``~/.ray/auth_token`` with the umask's mode
  (0644: readable by every user). ``start`` gives it a fresh token in ``RAY_AUTH_TOKEN``
  instead (its processes inherit it), so no file is written.
- **Session folders no one else reaches.** Ray makes its temporary folder and every session
  folder world-writable (0777) on purpose; ``start`` puts them in a folder of its own made by
  ``tempfile.mkdtemp`` (mode 0700: no other user can enter it) and takes the write bit for
  others off the folders there once Ray has started; ``stop`` removes it.
- **Nothing left by a gateway that was killed.** A gateway killed with SIGKILL cannot stop its
  Ray: its GCS and raylet end with it, but Ray's dashboard and runtime-env agents live on (one
  listening on loopback, their logs open in the folder) and its folder stays. The folder names
  its gateway (``gateway``: its pid and start time), so the next ``start`` by the same user
  ends the processes holding files open in the folder of every gateway no longer running, and
  removes the folder.

``tighten_token_file`` is for the other case, a cluster the operator started (whose token
``ray get-auth-token --generate`` writes 0644 too).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import stat
import tempfile
from pathlib import Path

import psutil
import ray
from ray._private import ray_constants

log = logging.getLogger(__name__)
SINGLE_MACHINE = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
"""Ray's switch for its single-machine mode, in which a node's address is 127.0.0.1."""
TOKEN = "RAY_AUTH_TOKEN"
TOKEN_PATH = "RAY_AUTH_TOKEN_PATH"
PREFIX = "diffrec-ray-"
GATEWAY = "gateway"
"""The file in a private folder naming its gateway: "PID START_TIME" (psutil's)."""


class PrivateRay:
    """A Ray on this machine alone, this process its driver (see the module docstring)."""

    def __init__(self, namespace: str):
        reap_leftovers(Path(tempfile.gettempdir()))
        self._saved = ({name: os.environ.get(name) for name in (SINGLE_MACHINE, TOKEN)},
                       ray_constants.ENABLE_RAY_CLUSTER)
        self.folder = Path(tempfile.mkdtemp(prefix=PREFIX))
        """Ray's temporary folder's parent (mode 0700); removed by ``stop``."""
        gateway = psutil.Process()
        (self.folder / GATEWAY).write_text(f"{gateway.pid} {gateway.create_time()}")
        os.environ[SINGLE_MACHINE] = "0"
        os.environ[TOKEN] = secrets.token_hex(32)
        ray_constants.ENABLE_RAY_CLUSTER = False
        try:
            ray.init(address="local", namespace=namespace, include_dashboard=False,
                     _temp_dir=str(self.folder / "ray"))
        except BaseException:
            self.stop()
            raise
        _not_world_writable(self.folder)
        log.info("started a Ray of its own on loopback, its session folders in %s", self.folder)

    def stop(self) -> None:
        """Stop the Ray, remove its folders and put the environment back as it was."""
        ray.shutdown()
        shutil.rmtree(self.folder, ignore_errors=True)
        variables, ray_constants.ENABLE_RAY_CLUSTER = self._saved
        for name, value in variables.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def reap_leftovers(temp: Path) -> None:
    """End the processes and remove the private folder (in ``temp``) of every Ray started here
    by this user's gateways that are no longer running."""
    stale = [folder for folder in temp.glob(PREFIX + "*")
             if folder.is_dir() and folder.stat().st_uid == os.getuid()
             and not _gateway_running(folder / GATEWAY)]
    if not stale:
        return
    inside = tuple(f"{folder}{os.sep}" for folder in stale)
    left = [process for process in psutil.process_iter() if _holds_open(process, inside)]
    for process in left:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.terminate()
    _, alive = psutil.wait_procs(left, timeout=5)
    for process in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    for folder in stale:
        shutil.rmtree(folder, ignore_errors=True)
    log.warning("ended %d Ray processes and removed %s, left by a gateway killed earlier",
                len(left), ", ".join(sorted(map(str, stale))))


def _holds_open(process: psutil.Process, inside: tuple[str, ...]) -> bool:
    """Whether ``process``, this user's, has a file open whose path starts with one of
    ``inside``."""
    try:
        return (process.uids().real == os.getuid()
                and any(opened.path.startswith(inside) for opened in process.open_files()))
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False


def _gateway_running(named: Path) -> bool:
    """Whether the gateway a ``gateway`` file names still runs; a folder without one (being
    made, or made by an older diffrec) counts as running."""
    try:
        pid, started = named.read_text().split()
        return psutil.Process(int(pid)).create_time() == float(started)
    except FileNotFoundError:
        return True
    except (ValueError, psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def tighten_token_file() -> None:
    """Make Ray's token file (``RAY_AUTH_TOKEN_PATH``, else ``~/.ray/auth_token``), if it is
    there and this user's, readable by this user alone: anyone who reads it can run code on
    the cluster."""
    path = Path(os.environ.get(TOKEN_PATH) or Path.home() / ".ray" / "auth_token")
    try:
        status = path.stat()
    except OSError:
        return
    if status.st_uid == os.getuid() and status.st_mode & 0o077:
        path.chmod(stat.S_IRUSR | stat.S_IWUSR)
        log.warning("made Ray's token file %s readable by its owner only (it was %o)", path,
                    stat.S_IMODE(status.st_mode))


def _not_world_writable(folder: Path) -> None:
    """Take the write bit for the group and others off every folder under ``folder``."""
    for root, _, _ in os.walk(folder):
        mode = stat.S_IMODE(os.stat(root).st_mode)
        os.chmod(root, mode & ~(stat.S_IWGRP | stat.S_IWOTH))
