"""The protocol's settings, captures and manifest (and the add-on's panel fields, which read
the presets through them) import without pyzmq; only the client and the keys need it."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

BLOCK_ZMQ = """
import sys
class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "zmq":
            raise ImportError(f"{name} is blocked in this test")
sys.meta_path.insert(0, Blocker())
"""


def run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=REPO, env={"PYTHONPATH": f"{REPO / 'backend'}:{REPO}"})


def test_the_blocker_blocks_zmq():
    result = run(BLOCK_ZMQ + "import zmq")
    assert result.returncode != 0 and "blocked in this test" in result.stderr


def test_settings_captures_and_manifest_import_without_zmq():
    result = run(BLOCK_ZMQ + """
from diffrec.protocol import captures, manifest, settings
assert settings.parse_settings({"preset": "preview", "mode": "reconstruct"}).size.iterations == 300
assert callable(captures.read_capture) and manifest.MANIFEST_NAME
try:
    from diffrec.protocol import Client
except ImportError as error:
    assert "zmq" in str(error), error
else:
    raise AssertionError("the client imported without zmq")
from addon.core import panel_fields
assert panel_fields.preset_values("HIGH", "materials")["iterations"] == 5000
print("ok")
""")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_importing_the_protocol_does_not_import_zmq():
    result = run("import sys, diffrec.protocol; print(sorted(m for m in sys.modules"
                 " if m.split('.')[0] == 'zmq'))")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
