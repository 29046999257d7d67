"""Running a bench_quality truth script (``*_truth.py``, bpy) in a child process, as the
bench_quality tests do: the script writes into ``out`` and prints its figures as JSON on its
last line."""

import json
import subprocess
import sys
from pathlib import Path


def run_truth_script(script: Path, out: Path, timeout_s: float) -> dict:
    """Run ``script out`` with this interpreter; its last stdout line as JSON (asserts a clean
    exit, showing the end of its output otherwise)."""
    done = subprocess.run([sys.executable, str(script), str(out)], capture_output=True,
                          text=True, timeout=timeout_s)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
