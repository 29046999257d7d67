"""A smoke run of scripts/bench_server_soak.py: a few clients for a few seconds, one SIGKILL
and restart of the server; nothing lost, every result byte-identical to its reference; the
well-behaved clients served without an error beside a few hostile ones."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_server_soak.py"


def test_soak_smoke_run_loses_nothing(tmp_path):
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--clients", "3", "--seconds", "3", "--kills", "1",
         "--tmp", str(tmp_path), "--misbehaving", "1", "--misbehaving-seconds", "2",
         "--long-jobs", "2", "--wall-time", "5", "--hostile-clients", "2",
         "--hostile-seconds", "2", "--declared", "10", "--small-frames", "2", "--unread", "1",
         "--idle", "10"],
        capture_output=True, text=True, timeout=180, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 SIGKILL + restart" in done.stdout and "errors 0" in done.stdout
    assert "lost 0, problems 0" in done.stdout
    assert "misbehaving: 1 connections" in done.stdout and "fairness: key B's" in done.stdout
    assert done.stdout.count("errors 0 of") == 2 and "DEAD" not in done.stdout
