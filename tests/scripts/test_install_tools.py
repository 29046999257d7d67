"""scripts/install_tools: a no-op (no npm needed) when the installed tools match the lock
file, a clear failure without npm when they do not, and the stamp that says which lock the
tree in the checkout was installed from."""

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "install_tools"
LOCK = REPO / "scripts" / "tools" / "package-lock.json"


def copy_of_the_script(tmp_path: Path, stamp: str | None) -> Path:
    """The script in ``tmp_path/scripts`` with the helper it sources, beside a copy of the
    lock file and, unless None, a node_modules stamp holding ``stamp``."""
    tools = tmp_path / "scripts" / "tools"
    (tools / "node_modules").mkdir(parents=True)
    shutil.copy(SCRIPT, tmp_path / "scripts" / "install_tools")
    (tmp_path / "scripts" / "lib").mkdir()
    shutil.copy(REPO / "scripts" / "lib" / "help.sh", tmp_path / "scripts" / "lib" / "help.sh")
    shutil.copy(LOCK, tools / "package-lock.json")
    if stamp is not None:
        (tools / "node_modules" / ".diffrec-lock-sha256").write_text(stamp + "\n")
    return tmp_path / "scripts" / "install_tools"


def run_without_npm(script: Path) -> subprocess.CompletedProcess:
    bash = shutil.which("bash")
    tools = {name: shutil.which(name) for name in ("sha256sum", "cut", "cat", "dirname")}
    bin_dir = script.parent.parent / "bin"  # only what the script needs besides npm
    bin_dir.mkdir()
    for name, path in tools.items():
        (bin_dir / name).symlink_to(path)
    return subprocess.run([bash, str(script)], capture_output=True, text=True, timeout=60,
                          env={"PATH": str(bin_dir)})


def test_matching_tools_are_left_alone_without_npm(tmp_path):
    lock_hash = hashlib.sha256(LOCK.read_bytes()).hexdigest()
    done = run_without_npm(copy_of_the_script(tmp_path, lock_hash))
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


@pytest.mark.parametrize("stamp", [None, "0" * 64])
def test_missing_or_stale_tools_without_npm_fail_with_a_sentence(tmp_path, stamp):
    done = run_without_npm(copy_of_the_script(tmp_path, stamp))
    assert done.returncode == 1
    assert "npm not found; install Node.js (with npm)" in done.stderr


def test_the_checkout_tools_match_the_lock_when_installed():
    stamp = LOCK.parent / "node_modules" / ".diffrec-lock-sha256"
    if not stamp.is_file():
        pytest.skip("the node tools are not installed here (scripts/install_tools)")
    assert stamp.read_text().strip() == hashlib.sha256(LOCK.read_bytes()).hexdigest()
