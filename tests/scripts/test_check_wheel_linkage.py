"""scripts/check_wheel_linkage.py tells an extension that uses the process's C++ runtime from one
that carries its own (tiny-cuda-nn's crash on the GPU machine), and one calling the CUDA driver
without needing it, on tiny libraries built here with the system g++."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "check_wheel_linkage.py"
SOURCE = """#include <sstream>
#include <string>
extern "C" int describe(double x, char *out) {
    std::ostringstream s; s << x; std::string t = s.str(); t.copy(out, t.size());
    return (int)t.size();
}
"""

pytestmark = pytest.mark.skipif(
    not all(shutil.which(tool) for tool in ("g++", "objdump", "nm", "ldd")),
    reason="needs g++ and binutils")


def wheel_with(tmp_path: Path, name: str, *flags: str, code: str = SOURCE) -> Path:
    """A wheel holding one shared library compiled from code with the given link flags."""
    source = tmp_path / "describe.cpp"
    source.write_text(code)
    library = tmp_path / f"{name}.so"
    subprocess.run(["g++", "-O1", "-shared", "-fPIC", *flags, str(source), "-o", str(library)],
                   check=True)
    wheel = tmp_path / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.write(library, f"pkg/{name}.so")
    return wheel


def check(wheel: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), str(wheel)], capture_output=True,
                          text=True, timeout=60)


def test_dynamic_libstdcxx_passes(tmp_path):
    done = check(wheel_with(tmp_path, "shared"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "NEEDED: libstdc++.so.6" in done.stdout
    assert "0 strong" in done.stdout


def test_static_libstdcxx_is_refused_with_sentences(tmp_path):
    done = check(wheel_with(tmp_path, "static", "-static-libstdc++"))
    assert done.returncode == 1
    assert "carries" in done.stderr and "libstdc++ functions of its own" in done.stderr
    assert "without loading libstdc++.so.6" in done.stderr
    assert "Traceback" not in done.stderr


def test_driver_calls_without_libcuda_are_refused(tmp_path):
    code = SOURCE + 'extern "C" int cuInit(unsigned);\n'
    code += 'extern "C" int start() { return cuInit(0); }\n'
    done = check(wheel_with(tmp_path, "driver", code=code))
    assert done.returncode == 1
    assert "calls the CUDA driver (cuInit and 0 more) without needing libcuda.so.1" in done.stderr
