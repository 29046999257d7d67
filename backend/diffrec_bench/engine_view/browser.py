"""Headless Chromium with WebGL on the CPU (SwiftShader through ANGLE), kept off the network,
opening one page until the page's server says it ended."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from .server import PageServer

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu-sandbox", "--use-angle=swiftshader",
         "--enable-unsafe-swiftshader", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync")


def chromium_command(binary: str, url: str, profile: Path) -> list[str]:
    """The command line that opens ``url`` with a new, empty profile folder ``profile``."""
    return [binary, *FLAGS, f"--user-data-dir={profile}", url]


def run_page(binary: str, url: str, server: PageServer, timeout: float, log: Path) -> str | None:
    """Opens ``url`` in Chromium until ``server`` has the page's end, Chromium exits or
    ``timeout`` seconds pass; Chromium's output goes to ``log``. Returns None when the page
    finished, else the sentence saying why not."""
    with tempfile.TemporaryDirectory(prefix="engine_view_profile_") as profile, \
            log.open("wb") as output:
        browser = subprocess.Popen(chromium_command(binary, url, Path(profile)),
                                   stdout=output, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        try:
            deadline = time.monotonic() + timeout
            while not server.wait(0.5):
                if browser.poll() is not None:
                    return (f"Chromium exited (status {browser.returncode}) before the page "
                            f"finished; its output is in {log}")
                if time.monotonic() > deadline:
                    return (f"the page did not finish in {timeout:g} s; Chromium's output "
                            f"is in {log}")
        finally:
            _stop(browser)
    if server.failure is not None:
        return f"the page failed: {server.failure.strip().splitlines()[0]} (whole error below)"
    return None


def _stop(browser: subprocess.Popen) -> None:
    """Kills Chromium and the processes it started (its session's group; a throwaway profile
    needs no orderly shutdown). The leader is reaped only after, so the group id is still
    ours when the signal goes."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(browser.pid, signal.SIGKILL)
    browser.wait()
