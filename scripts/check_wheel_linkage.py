"""Check the linkage of a CUDA extension wheel before GPU time is spent on it.

For every shared library in each wheel: the libraries it needs (``objdump -p``), where they
resolve on this machine (``ldd``), the newest GLIBCXX, CXXABI and GLIBC versions it asks for,
the functions it defines itself (``nm -D``) that libstdc++ also exports, and the CUDA driver
functions it calls. A strong definition of a libstdc++ function means C++ runtime code was
linked into the extension (a static libstdc++, or a toolchain's non-shared part of it) and
conflicts with the runtime the process loads: the cause of tiny-cuda-nn's crash on the GPU
machine (docs/BENCHMARKS.md, "GPU machine"); weak ones are inline template code every C++
library carries. Exit status 1 when a library defines a strong one, asks for a version the
runtime lacks, or calls the driver without needing libcuda.so.1 (its import would fail).

    python scripts/check_wheel_linkage.py WHEEL... [--libstdcxx PATH]

--libstdcxx: the libstdc++ to check against; by default the one a Python process on this
machine loads (so on the GPU machine, the one the extension will meet there).
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

STRONG_TYPES = set("TDBR")
VERSION = re.compile(r"\b(GLIBCXX|CXXABI|GLIBC)_(\d+(?:\.\d+)*)\b")


def run(*command: str, env: dict | None = None) -> str:
    """A tool's standard output (errors included for ldd's 'not found' lines)."""
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    return done.stdout + done.stderr


def loaded_libstdcxx() -> Path:
    """The libstdc++ a Python process here loads, as the dynamic loader finds it."""
    ctypes.CDLL("libstdc++.so.6")
    for line in Path("/proc/self/maps").read_text().splitlines():
        if "libstdc++.so" in line:
            return Path(line.split()[-1])
    raise SystemExit("check_wheel_linkage: no libstdc++ found on this machine.")


def newest_versions(text: str) -> dict[str, tuple[int, ...]]:
    """The highest version per family (GLIBCXX, CXXABI, GLIBC) named in objdump output."""
    newest: dict[str, tuple[int, ...]] = {}
    for family, number in VERSION.findall(text):
        version = tuple(int(part) for part in number.split("."))
        newest[family] = max(newest.get(family, version), version)
    return newest


def version_section(objdump_p: str, heading: str) -> str:
    """The lines of one section ('Version References', 'Version definitions') of objdump -p."""
    part = objdump_p.split(heading, 1)
    return part[1].split("\n\n", 1)[0] if len(part) == 2 else ""


def defined_symbols(library: Path) -> dict[str, str]:
    """Dynamic symbols the library defines, by name (version suffix dropped), with nm's type."""
    symbols = {}
    for line in run("nm", "-D", "--defined-only", str(library)).splitlines():
        fields = line.split()
        if len(fields) == 3:
            symbols[fields[2].split("@")[0]] = fields[1]
    return symbols


def search_path() -> dict:
    """The environment for ldd: torch's and NVIDIA's wheel libraries on the search path."""
    folders = []
    for package, sub in (("torch", "lib"), ("nvidia", "cu13/lib")):
        spec = importlib.util.find_spec(package)
        if spec and spec.submodule_search_locations:
            folders.append(os.path.join(next(iter(spec.submodule_search_locations)), sub))
    return {**os.environ, "LD_LIBRARY_PATH": ":".join(folders)}


def fmt(versions: dict[str, tuple[int, ...]]) -> str:
    return ", ".join(f"{family}_{'.'.join(map(str, v))}" for family, v in sorted(versions.items()))


def check_library(library: Path, name: str, runtime: Path, runtime_symbols: dict,
                  provided: dict) -> list[str]:
    """Print the checks for one shared library; return its problems as sentences."""
    header = run("objdump", "-p", str(library))
    needed = re.findall(r"NEEDED\s+(\S+)", header)
    asked = newest_versions(version_section(header, "Version References"))
    resolved = dict(re.findall(r"^\s*(\S+) => (.+?)(?: \(0x[0-9a-f]+\))?$",
                               run("ldd", str(library), env=search_path()), re.M))
    inside = {symbol: kind for symbol, kind in defined_symbols(library).items()
              if symbol in runtime_symbols}
    strong = sorted(symbol for symbol, kind in inside.items() if kind in STRONG_TYPES)
    driver_calls = re.findall(r"^\s+U (cu[A-Z]\w*)$",
                              run("nm", "-D", "--undefined-only", str(library)), re.M)
    print(f"{name} ({library.stat().st_size / 1e6:.1f} MB)")
    print(f"  NEEDED: {' '.join(needed)}")
    for lib in ("libstdc++.so.6", "libgcc_s.so.1"):
        print(f"  ldd: {lib} => {resolved.get(lib, 'not needed')}")
    missing = sorted(lib for lib, path in resolved.items() if path == "not found")
    if missing:
        print(f"  ldd: not found here (the GPU machine provides them): {' '.join(missing)}")
    print(f"  asks for {fmt(asked) or 'no versions'}; {runtime} provides up to {fmt(provided)}")
    print(f"  libstdc++ functions defined inside: {len(strong)} strong, "
          f"{len(inside) - len(strong)} weak (inline template code)")
    problems = []
    if strong:
        shown = ", ".join(strong[:5])
        problems.append(f"{name} carries {len(strong)} libstdc++ functions of its own ({shown}).")
    if "libstdc++.so.6" not in needed and inside:
        problems.append(f"{name} uses C++ without loading libstdc++.so.6: it is linked in.")
    if driver_calls and "libcuda.so.1" not in needed:
        problems.append(f"{name} calls the CUDA driver ({driver_calls[0]} and "
                        f"{len(driver_calls) - 1} more) without needing libcuda.so.1, so its "
                        "import fails; link it against a libcuda stub.")
    for family, version in asked.items():
        if family in provided and version > provided[family]:
            problems.append(f"{name} needs {fmt({family: version})}, newer than {runtime} has.")
    return problems


def check_wheel(wheel: Path, runtime: Path) -> list[str]:
    """Check every shared library in a wheel; return the problems found."""
    runtime_symbols = defined_symbols(runtime)
    provided = newest_versions(version_section(run("objdump", "-p", str(runtime)),
                                               "Version definitions"))
    problems = []
    with tempfile.TemporaryDirectory() as folder, zipfile.ZipFile(wheel) as archive:
        libraries = [member for member in archive.namelist() if re.search(r"\.so(\.|$)", member)]
        if not libraries:
            return [f"{wheel.name} holds no shared library."]
        for member in libraries:
            problems += check_library(Path(archive.extract(member, folder)), member, runtime,
                                      runtime_symbols, provided)
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("wheels", nargs="+", type=Path)
    parser.add_argument("--libstdcxx", type=Path, help="the C++ runtime to check against")
    args = parser.parse_args()
    missing = [tool for tool in ("objdump", "nm", "ldd") if not shutil.which(tool)]
    if missing:
        print(f"check_wheel_linkage: {', '.join(missing)} not found; install binutils.",
              file=sys.stderr)
        return 2
    runtime = (args.libstdcxx or loaded_libstdcxx()).resolve()
    problems = []
    for wheel in args.wheels:
        print(f"== {wheel.name} ({wheel.stat().st_size / 1e6:.1f} MB)")
        problems += check_wheel(wheel, runtime)
    for problem in problems:
        print(f"check_wheel_linkage: {problem}", file=sys.stderr)
    verdict = "PROBLEMS" if problems else "ok, the process's libstdc++ serves every wheel"
    print(f"linkage: {verdict}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
