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

``tighten_token_file`` is for the other case, a cluster the operator started (whose token
``ray get-auth-token --generate`` writes 0644 too).
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import stat
import tempfile
from pathlib import Path

import ray
from ray._private import ray_constants

log = logging.getLogger(__name__)
SINGLE_MACHINE = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
"""Ray's switch for its single-machine mode, in which a node's address is 127.0.0.1."""
TOKEN = "RAY_AUTH_TOKEN"
TOKEN_PATH = "RAY_AUTH_TOKEN_PATH"


class PrivateRay:
    """A Ray on this machine alone, this process its driver (see the module docstring)."""

    def __init__(self, namespace: str):
        self._saved = ({name: os.environ.get(name) for name in (SINGLE_MACHINE, TOKEN)},
                       ray_constants.ENABLE_RAY_CLUSTER)
        os.environ[SINGLE_MACHINE] = "0"
        os.environ[TOKEN] = secrets.token_hex(32)
        ray_constants.ENABLE_RAY_CLUSTER = False
        self.folder = Path(tempfile.mkdtemp(prefix="diffrec-ray-"))
        """Ray's temporary folder's parent (mode 0700); removed by ``stop``."""
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
