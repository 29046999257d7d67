"""docs/architecture.md names modules that exist: every backticked ``*.py`` path in it is a
file of the repository (``addon/``, ``tests/`` and ``scripts/`` paths from its root, the others
from ``backend/diffrec/``), so a module renamed or removed without the page fails here."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "architecture.md"
ROOT_FOLDERS = ("addon/", "tests/", "scripts/")


def named_modules(text: str) -> list[str]:
    """The backticked ``.py`` paths of ``text``, in order, without repeats."""
    return list(dict.fromkeys(re.findall(r"`([\w/]+\.py)`", text)))


def missing_modules(text: str, repo: Path) -> list[str]:
    """The modules ``text`` names that are not files under ``repo``."""
    return [name for name in named_modules(text)
            if not (repo / (name if name.startswith(ROOT_FOLDERS) else
                            f"backend/diffrec/{name}")).is_file()]


def test_every_module_the_page_names_exists():
    text = DOC.read_text()
    assert len(named_modules(text)) > 20  # the page walks the job's whole path
    assert missing_modules(text, REPO) == []


def test_the_check_finds_a_missing_module(tmp_path):
    for name in ("addon/follow.py", "backend/diffrec/server/app.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    text = ("`addon/follow.py` hands it to `server/app.py`, then `server/jobs.py`, "
            "`addon/gone.py`, `app.py` and `server/app.py` again; `server` is a folder.")
    assert missing_modules(text, tmp_path) == ["server/jobs.py", "addon/gone.py", "app.py"]
