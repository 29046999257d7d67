"""Whether Mitsuba's CPU backend can path-trace on this machine, asked of a child process.

Dr.Jit's LLVM backend compiles every kernel with the system's ``libLLVM`` for the CPU it runs
on. Where that LLVM cannot compile for this CPU (a processor newer than the LLVM, an LLVM
release Dr.Jit does not support), it aborts the whole process: a backend server with it, and
every job it held. ``cpu_backend_problem()`` path-traces a tiny scene, forward and backward
(the kernels a path-traced pass compiles), in a child process, once per process, and answers
what went wrong in a phrase, or None.

The child runs ``python -m diffrec.render.mitsuba_test_image``.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys

__all__ = ["CHECK_TIMEOUT_S", "cpu_backend_problem"]

CHECK_TIMEOUT_S = 600
"""How long the child may take (seconds): compiling the kernels takes a few on a laptop."""
_CHILD = "DIFFREC_MITSUBA_CHECK_CHILD"
"""Set in the child's environment: the child loads Mitsuba without asking again."""


@functools.cache
def cpu_backend_problem(command: tuple[str, ...] | None = None) -> str | None:
    """None when ``command`` (default: ``mitsuba_test_image`` run by this Python) exits 0;
    otherwise what happened, as a phrase naming the signal or exit status and the child's
    last line of error output. None inside the child itself."""
    if os.environ.get(_CHILD):
        return None
    command = command or (sys.executable, "-m", "diffrec.render.mitsuba_test_image")
    try:
        child = subprocess.run(command, env={**os.environ, _CHILD: "1"}, capture_output=True,
                               text=True, timeout=CHECK_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return f"Mitsuba's CPU backend did not finish a 16-pixel test render in {CHECK_TIMEOUT_S} s"
    if child.returncode == 0:
        return None
    status = (signal.Signals(-child.returncode).name if child.returncode < 0
              else f"exit status {child.returncode}")
    said = [line.strip() for line in child.stderr.splitlines() if line.strip()]
    return ("Mitsuba's CPU backend crashed path-tracing a 16-pixel test image on this machine "
            f"({status}{': ' + said[-1] if said else ''})")
