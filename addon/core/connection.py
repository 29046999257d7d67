"""Where the backend is and how to reach it, without bpy: endpoint parsing, the loopback
rule for ``bpy.app.online_access``, the client key pair on disk, starting a local backend, and
``reach``: a ping within a short budget whose failure says what to do."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from .wire import protocol

LOCAL_ADDRESS = "tcp://127.0.0.1:5557"
KEY_NAME = "client"


@dataclass(frozen=True)
class Endpoint:
    """A ZeroMQ address and, for a paired server, its pinned CURVE public key (Z85)."""

    address: str
    server_key: str | None = None

    @property
    def host(self) -> str:
        return urlsplit(self.address).hostname or ""

    @property
    def port(self) -> int | None:
        return urlsplit(self.address).port

    @property
    def is_loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


def endpoint(text: str) -> Endpoint:
    """An Endpoint from the preferences' text: a pairing string ``diffrec://HOST:PORT?key=HEX``,
    or a plain ``tcp://HOST:PORT`` address (loopback servers need no keys), or "" for local."""
    text = text.strip()
    if not text:
        return Endpoint(LOCAL_ADDRESS)
    if text.startswith("diffrec://"):
        return Endpoint(*protocol().parse_pairing(text))
    if not text.startswith("tcp://") or not urlsplit(text).port:
        raise ValueError(f"{text!r} is neither a pairing string nor tcp://HOST:PORT")
    return Endpoint(text)


def check_online_access(target: Endpoint, online_access: bool) -> None:
    """Refuse a non-loopback endpoint when Blender is set to work offline."""
    if not target.is_loopback and not online_access:
        raise PermissionError(
            f"Blender is set to work offline, so diffrec will not connect to {target.host}: "
            "allow online access in Preferences > System > Network, or use a local backend."
        )


def client_keypair(directory: Path) -> tuple[str, str]:
    """The add-on's CURVE key pair in ``directory``, created on first use."""
    try:
        return protocol().read_keypair(directory, KEY_NAME)
    except FileNotFoundError:
        return protocol().write_keypair(directory, KEY_NAME)


@dataclass(frozen=True)
class _Started:
    """A local backend this session started, and where its output begins in its log."""

    process: subprocess.Popen
    log: Path
    log_offset: int


_started: dict[str, _Started] = {}

STARTUP_CHECK_S = 1.0
"""Seconds a local backend just started is watched for an exit at once (a Python without
diffrec stops in a tenth of that)."""


def start_local_backend(python: str, address: str, data_dir: Path) -> subprocess.Popen:
    """Start ``python -m diffrec serve`` on the loopback ``address``, unless this session
    already started one there that still runs (it may still be loading): that one is returned.
    Raises Unreachable with a sentence (its own last line of the log) where the one started
    before stopped with an error, where the one started now stops within
    ``STARTUP_CHECK_S``, or where ``python`` cannot be run."""
    started = _started.get(address)
    if started is not None and started.process.poll() is None:
        return started.process
    if (failure := local_backend_failure(address)) is not None:
        raise Unreachable(failure)
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    log_path = data_dir / "serve.log"
    # the user's alone, as the server's own files (POSIX modes; Windows ignores them)
    descriptor = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    # where this start's lines begin: taken before the child shares the file's offset, which
    # its writes move (read after, it missed the lines of a child that failed at once)
    offset = os.lseek(descriptor, 0, os.SEEK_END)
    with os.fdopen(descriptor, "ab") as log:  # the child keeps its own handle
        try:
            process = subprocess.Popen(
                [python, "-m", "diffrec", "serve", "--bind", address, "--data-dir",
                 str(data_dir)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        except OSError as error:
            raise Unreachable(f"Backend Python ({python}) cannot be run: {error.strerror}. "
                              "Set it in the add-on's preferences to the Python that has "
                              "diffrec installed.") from None
        _started[address] = _Started(process, log_path, offset)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(STARTUP_CHECK_S)
    if (failure := local_backend_failure(address)) is not None:
        raise Unreachable(failure)
    return process


def local_backend_failure(address: str) -> str | None:
    """The sentence to show where the local backend this session started at ``address``
    stopped with an error (it is then forgotten, so that the next start tries again), else
    None: its own last line of the log, and where that says diffrec is missing, to check
    Backend Python."""
    started = _started.get(address)
    if started is None or started.process.poll() is None or started.process.returncode == 0:
        return None
    del _started[address]
    try:
        with open(started.log, "rb") as log:
            log.seek(started.log_offset)
            lines = log.read().decode(errors="replace").strip().splitlines()
    except OSError:
        lines = []
    said = f": {lines[-1].strip()}" if lines else ""
    python = started.process.args[0]
    advice = (f" Check Backend Python ({python}) in the add-on's preferences: "
              f"'{python} -m diffrec info' must work there." if "No module named" in said else "")
    return (f"The local backend stopped as it started (exit {started.process.returncode})"
            f"{said}.{advice} The whole log: {started.log}.")


class Unreachable(ConnectionError):
    """The backend cannot be reached; the message is a sentence saying what to do."""


def nothing_listening(target: Endpoint) -> str:
    return (f"No diffrec backend answers at {target.address}: start it ('diffrec serve', or "
            "tick 'Start a local backend' in the add-on's preferences) or correct the Backend "
            "address in the add-on's preferences.")


def silent(target: Endpoint) -> str:
    if target.server_key:
        return (f"The server at {target.host}:{target.port} does not answer this computer: ask "
                "its operator to allow this computer's key ('diffrec keys allow', the key is in "
                "the add-on's preferences) and check that the pairing string is the server's "
                "current one.")
    return (f"Something listens at {target.address} but does not answer as a diffrec backend: "
            "check the address, or paste the server's pairing string if it is a remote, "
            "paired server.")


def listening(target: Endpoint, timeout_s: float) -> bool:
    """Whether a TCP connection to the endpoint's port opens within ``timeout_s``."""
    try:
        with socket.create_connection((target.host, target.port), timeout=timeout_s):
            return True
    except OSError:
        return False


def reach(target: Endpoint, keypair: tuple[str, str] | None, budget_s: float = 2.0) -> dict:
    """The backend's ping reply, within about ``budget_s`` seconds. Raises Unreachable with a
    sentence: nothing listening (found at once by a TCP connect), a server silent to this key
    (CURVE answers nothing to a key it does not allow), or an older or newer protocol."""
    start = time.monotonic()
    if not listening(target, budget_s / 2):
        raise Unreachable(nothing_listening(target))
    wait = max(0.2, budget_s - (time.monotonic() - start))
    wire = protocol()
    try:
        with wire.Client(target.address, server_key=target.server_key,
                         client_keypair=keypair, timeout=wait, retry_for=wait) as client:
            reply = client.ping()
    except wire.ServerUnavailable:
        raise Unreachable(silent(target)) from None
    if reply.get("protocol") != wire.PROTOCOL_VERSION:
        raise Unreachable(
            f"The backend speaks protocol {reply.get('protocol')} and this add-on "
            f"{wire.PROTOCOL_VERSION}: update the older of the two."
        )
    return reply
