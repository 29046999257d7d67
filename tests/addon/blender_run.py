"""The pytest side of the add-on tests: each ``checks_*.py`` script runs once in a child Python
with the bpy wheel (torch and bpy stay in separate processes), and each of its ``check_*``
functions becomes one pytest test through ``assert_check``."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
_cache: dict[str, dict] = {}


def check_names(script: str) -> list[str]:
    """The ``check_*`` function names defined in ``script`` (read without running it)."""
    tree = ast.parse((HERE / script).read_text())
    return [
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name.startswith("check_")
    ]


def check_params(script: str, slow_when: str) -> list:
    """``check_names(script)`` as pytest parameters, those whose name holds ``slow_when``
    marked slow."""
    return [pytest.param(name, marks=pytest.mark.slow) if slow_when in name else name
            for name in check_names(script)]


def blender_results(script: str, tmp_dir: Path, timeout: float = 600) -> dict:
    """{check name: None or traceback} from running ``script`` once under bpy."""
    if script not in _cache:
        output = tmp_dir / f"{script}.json"
        process = subprocess.run(
            [sys.executable, str(HERE / script), "--", "--json", str(output)],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if not output.exists():
            raise AssertionError(f"{script} crashed:\n{process.stdout}\n{process.stderr}")
        _cache[script] = json.loads(output.read_text())
    return _cache[script]


def assert_check(script: str, name: str, tmp_dir: Path) -> None:
    error = blender_results(script, tmp_dir)[name]
    if error is not None:
        pytest.fail(f"{script}::{name}\n{error}", pytrace=False)


def assert_check_alone(script: str, name: str, tmp_dir: Path, timeout: float = 600) -> None:
    """Run the one check ``name`` of ``script`` under bpy in a Python of its own (``--only``),
    so that selecting a fast check never runs the slow ones; fail with its traceback."""
    output = tmp_dir / f"{script}.{name}.json"
    process = subprocess.run(
        [sys.executable, str(HERE / script), "--", "--json", str(output), "--only", name],
        capture_output=True, text=True, timeout=timeout)
    if not output.exists():
        raise AssertionError(f"{script} crashed:\n{process.stdout}\n{process.stderr}")
    error = json.loads(output.read_text())[name]
    if error is not None:
        pytest.fail(f"{script}::{name}\n{error}", pytrace=False)



def results_beside_server(script: str, root: Path, servers, timeout: float = 600) -> dict:
    """{check name: None or traceback} from running ``script`` once under bpy beside a real
    ``diffrec serve`` child process (``servers.ServerProcess``, on a free loopback port)
    whose address is in DIFFREC_SERVER, with a Blender user folder of its own under ``root``."""
    import os

    server = servers.ServerProcess(root / "data").start()
    try:
        user = root / "blender-user"
        user.mkdir()
        env = {**os.environ, "DIFFREC_SERVER": server.address,
               "BLENDER_USER_RESOURCES": str(user)}
        output = root / f"{script}.json"
        run = subprocess.run([sys.executable, str(HERE / script), "--", "--json", str(output)],
                             capture_output=True, text=True, timeout=timeout, env=env)
        if not output.exists():
            raise AssertionError(f"{script} crashed:\n{run.stdout}\n{run.stderr}")
        return json.loads(output.read_text())
    finally:
        server.stop()
