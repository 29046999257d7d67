"""Run ``check_*`` functions of a script inside Blender, one fresh factory scene each.

A check script ends with ``harness.main(globals())`` and runs either way:

    blender --background --python tests/addon/checks_export.py
    python tests/addon/checks_export.py [-- --json RESULTS.json] [-- --only NAME]

(``python`` being one with the bpy wheel). Without ``--json`` it prints each result and exits
non-zero if any check failed; with it, it writes {name: null | traceback} for pytest
(``conftest.blender_results``). The repository root goes on ``sys.path`` so ``addon`` imports as
a package, as it does in development.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def _script_args() -> list[str]:
    return sys.argv[sys.argv.index("--") + 1 :] if "--" in sys.argv else []


def _option(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


def main(namespace: dict) -> None:
    import bpy

    args = _script_args()
    only = _option(args, "--only")
    checks = {
        name: function
        for name, function in namespace.items()
        if name.startswith("check_") and callable(function) and (only in (None, name))
    }
    results = {}
    for name, function in checks.items():
        bpy.ops.wm.read_factory_settings(use_empty=True)
        try:
            function()
            results[name] = None
        except Exception:
            results[name] = traceback.format_exc()
    output = _option(args, "--json")
    if output:
        Path(output).write_text(json.dumps(results))
    else:
        for name, error in results.items():
            print(f"{'ok  ' if error is None else 'FAIL'} {name}")
            if error:
                print(error)
    _leave(0 if output or not any(results.values()) else 1)


def _leave(status: int) -> None:
    """End the process now, its output flushed, without the interpreter's teardown: the bpy
    4.2 and 4.5 wheels crash or hang for good there while anything of Python's is still
    registered with Blender, and a check may leave one of its own (a handler that counts
    renders). The add-on's own exit is tested apart (test_extension.py)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
