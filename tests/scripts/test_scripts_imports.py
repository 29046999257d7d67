"""The scripts and their package ``diffrec_bench`` import as any installed code does (issue 53):
none changes ``sys.path`` and none reaches into ``tests/`` (what tests and benchmarks share
lives in ``diffrec_bench``)."""

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def sources() -> list[Path]:
    """The Python files of ``scripts/`` (not its node tools) and of ``diffrec_bench``."""
    return sorted([*(REPO / "scripts").glob("*.py"),
                   *(REPO / "backend" / "diffrec_bench").rglob("*.py")])


def import_problems(source: str) -> list[str]:
    """What in ``source`` edits the import path or names the tests' folder."""
    problems = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Attribute) and node.attr == "path" and
                isinstance(node.value, ast.Name) and node.value.id == "sys"):
            problems.append(f"line {node.lineno}: sys.path")
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str) and
              (node.value == "tests" or node.value.startswith("tests/"))):
            problems.append(f"line {node.lineno}: {node.value!r}")
    return problems


def test_no_script_edits_the_import_path_or_reads_the_tests():
    found = {str(path.relative_to(REPO)): import_problems(path.read_text())
             for path in sources()}
    assert {path: problems for path, problems in found.items() if problems} == {}
    assert "scripts/bench_quality.py" in found and "backend/diffrec_bench/checkout.py" in found


def test_the_check_finds_a_path_edit_and_the_tests_folder():
    source = ('import sys\nfrom pathlib import Path\n'
              'sys.path.insert(0, str(Path(__file__).parents[1] / "tests" / "addon"))\n'
              'HELPER = "tests/helpers/servers.py"\n')
    assert sorted(import_problems(source)) == ["line 3: 'tests'", "line 3: sys.path",
                                               "line 4: 'tests/helpers/servers.py'"]
    assert import_problems('"""Run by the tests; see tests/scripts."""\n') == []
