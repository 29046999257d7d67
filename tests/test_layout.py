"""The tests mirror the code (issue 27.5). ``tests/<folder>/`` tests the package
``backend/diffrec/<folder>/``, or is ``addon`` (the add-on), ``scripts`` (the scripts) or
``helpers`` (what several folders share); tests of the modules at the package's root sit at
the top of ``tests/``. Module names are unique (pytest imports them by name), and no module of
the tests imports a test module, a conftest or another folder's helper module."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parent
CODE = TESTS.parent / "backend" / "diffrec"
NOT_PACKAGES = ("addon", "scripts", "helpers")
"""Test folders named after something other than a package of the code."""
SHARED = "helpers"


def python_files(folder: Path) -> list[Path]:
    """The .py files under ``folder``, skipping caches and hidden folders."""
    return sorted(path for path in folder.rglob("*.py")
                  if not any(part.startswith((".", "__pycache__"))
                             for part in path.relative_to(folder).parts))


def packages(code: Path) -> set[str]:
    """The names of the folders of Python modules at the top of ``code``."""
    return {folder.name for folder in code.iterdir()
            if folder.is_dir() and not folder.name.startswith(("_", ".")) and
            any(folder.glob("*.py"))}


def imported_names(source: str) -> set[str]:
    """The top-level names ``source`` imports absolutely: ``import a.b``, ``from a import b``
    and ``pytest.importorskip("a")``, anywhere in the module."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and
              node.func.attr == "importorskip" and node.args and
              isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            names.add(node.args[0].value)
    return {name.split(".")[0] for name in names}


def layout_problems(tests: Path, code: Path) -> list[str]:
    """One sentence per way the test tree ``tests`` fails to mirror the package ``code``."""
    problems = []
    files = python_files(tests)
    folder_of = {path: path.relative_to(tests).parts[:-1] for path in files}
    allowed = packages(code) | set(NOT_PACKAGES)
    for folder in sorted({parts for parts in folder_of.values() if parts}):
        where = "/".join(folder)
        if len(folder) > 1:
            problems.append(f"{where}/ is nested: a test folder sits at the top of tests/")
        elif folder[0] not in allowed:
            problems.append(f"{where}/ is named after no package of {code.name} "
                            f"(nor {', '.join(NOT_PACKAGES)})")
    by_name = {}  # module name -> its folder, for the modules imported by bare name
    names = Counter()
    for path in files:
        if folder_of[path][:1] == (SHARED,):
            if path.name.startswith("test_"):
                problems.append(f"{path.relative_to(tests)} is a test module among the helpers")
        elif path.name not in ("conftest.py", "__init__.py"):
            by_name[path.stem] = folder_of[path]
            names[path.name] += 1
    problems += [f"{name} is the name of {count} modules" for name, count in
                 sorted(names.items()) if count > 1]
    for path in files:
        for name in sorted(imported_names(path.read_text())):
            if name == "conftest" or (name.startswith("test_") and name in by_name):
                problems.append(f"{path.relative_to(tests)} imports the test module {name}")
            elif name in by_name and by_name[name] != folder_of[path]:
                problems.append(f"{path.relative_to(tests)} imports {name} from another folder; "
                                f"what folders share belongs in {SHARED}/")
    return problems


def test_the_tests_mirror_the_code():
    assert layout_problems(TESTS, CODE) == []


def test_the_check_finds_each_kind_of_fault(tmp_path):
    code, tests = tmp_path / "code", tmp_path / "tests"
    files = {
        "code/mesh/__init__.py": "",
        "code/io/obj.py": "",
        "code/camera.py": "",
        "tests/test_camera.py": "import os\nfrom mesh import x\n",
        "tests/mesh/conftest.py": "",
        "tests/mesh/shapes.py": "",
        "tests/mesh/test_mesh.py": "import shapes\nfrom test_obj import fixture\n",
        "tests/io/test_obj.py": "def f():\n    from conftest import helper\n",
        "tests/io/test_gltf.py": "import pytest\nshapes = pytest.importorskip('shapes.x')\n",
        "tests/camera/test_mesh.py": "",
        "tests/io/deeper/test_deep.py": "",
        "tests/helpers/__init__.py": "",
        "tests/helpers/test_helper.py": "from helpers import y\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert layout_problems(tests, code) == [
        "camera/ is named after no package of code (nor addon, scripts, helpers)",
        "io/deeper/ is nested: a test folder sits at the top of tests/",
        "helpers/test_helper.py is a test module among the helpers",
        "test_mesh.py is the name of 2 modules",
        "io/test_gltf.py imports shapes from another folder; what folders share belongs in "
        "helpers/",
        "io/test_obj.py imports the test module conftest",
        "mesh/test_mesh.py imports the test module test_obj",
    ]
