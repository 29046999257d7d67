"""The local backend the add-on starts (Start a local backend): a Python that cannot run
diffrec is said at once, with the log's own words, instead of "test again in a minute" on
every press."""

from __future__ import annotations

import sys

import pytest

from addon.core import connection


@pytest.fixture(autouse=True)
def _forget_started():
    yield
    connection._started.clear()


def test_a_python_without_diffrec_is_said_with_the_logs_last_line(tmp_path):
    """A stand-in "Python" that writes what a Python without diffrec writes and exits 1."""
    python = tmp_path / "python-without-diffrec"
    python.write_text("#!/bin/sh\necho \"$0: No module named diffrec\" >&2\nexit 1\n")
    python.chmod(0o755)
    address = "tcp://127.0.0.1:5999"
    (tmp_path / "backend").mkdir()
    (tmp_path / "backend" / "serve.log").write_text("an earlier run's last line\n")
    with pytest.raises(connection.Unreachable) as raised:
        connection.start_local_backend(str(python), address, tmp_path / "backend")
    said = str(raised.value)
    assert "stopped as it started (exit 1): " in said and "No module named diffrec" in said
    assert f"Backend Python ({python})" in said and "-m diffrec info" in said
    assert address not in connection._started, "forgotten: the next press starts again"


def test_a_backend_still_starting_is_returned_as_it_is(tmp_path):
    """A process that is still running after the start's watch is the one returned, and a
    second press returns it rather than starting another."""
    python = tmp_path / "slow-python"
    python.write_text(f"#!/bin/sh\nexec {sys.executable} -c 'import time; time.sleep(30)'\n")
    python.chmod(0o755)
    address = "tcp://127.0.0.1:5998"
    first = connection.start_local_backend(str(python), address, tmp_path / "backend")
    try:
        assert first.poll() is None
        # its log the user's alone, as the server's own files (it was 0644)
        assert (tmp_path / "backend" / "serve.log").stat().st_mode & 0o777 == 0o600
        assert connection.start_local_backend(str(python), address, tmp_path / "backend") \
            is first
    finally:
        first.kill()
        first.wait()


def test_another_failure_is_said_with_its_own_line_and_no_python_advice(tmp_path):
    """A backend stopping for another reason (its data folder held by another server) is said
    with its own words only; a Python that cannot be run at all is a sentence too."""
    python = tmp_path / "held"
    python.write_text("#!/bin/sh\necho 'diffrec: another diffrec server is using it'\nexit 2\n")
    python.chmod(0o755)
    with pytest.raises(connection.Unreachable) as raised:
        connection.start_local_backend(str(python), "tcp://127.0.0.1:5997", tmp_path / "b")
    said = str(raised.value)
    assert "(exit 2): diffrec: another diffrec server is using it." in said, said
    assert "Backend Python" not in said, said
    with pytest.raises(connection.Unreachable, match=r"Backend Python \(.*nowhere\) cannot be run"):
        connection.start_local_backend(str(tmp_path / "nowhere"), "tcp://127.0.0.1:5996",
                                       tmp_path / "b")
