"""Failures as sentences, without bpy (addon/core/messages.py, addon/core/connection.py): each
protocol failure an artist can meet says what to do with no class name, and reaching the backend
fails fast: at once when nothing listens, within the budget when a server stays silent."""

import re
import socket
import time

import pytest

from addon.core import connection, messages
from addon.core.wire import protocol

CLASS_NAME = re.compile(r"\b[A-Z]\w*(Error|Exception|Unavailable)\b")
WIRE = protocol()


def _said(exc) -> str:
    text = messages.sentence(exc)
    assert not CLASS_NAME.search(text) and "Traceback" not in text, text
    assert text[0].isupper() and text.endswith("."), text
    return text


@pytest.mark.parametrize("exc, expected", [
    (WIRE.ProtocolError("bad_pairing", "a pairing string looks like ..."), messages.BAD_PAIRING),
    (WIRE.ServerError("internal", "internal error (KeyError)"), messages.INTERNAL),
    (WIRE.ServerError("disk_full", "the server's disk is full: 0 bytes free, 9 needed; free "
                      "space"), "The server cannot store the job: the server's disk is full"),
    (WIRE.ServerError("quota_exceeded", "pending_bytes of 64 MiB"), "refused the job: pending"),
    (WIRE.ServerError("not_found", "no job x"), "The server does not know this job"),
    (WIRE.ServerUnavailable("no answer from tcp://h:1 for 30 s"), "The backend stopped answering"),
    (FileNotFoundError(2, "No such file or directory", "/x/y.json"),
     "A file could not be used (/x/y.json): no such file or directory."),
    (ValueError("the images attached to the cameras differ in size"), "The images attached"),
    (RuntimeError("Error: Cannot read file"), "Cannot read file."),
    (KeyError("vertices"), "The diffrec add-on met an unexpected problem ('vertices')"),
    (ReferenceError("StructRNA of type Object has been removed"), messages.GONE),
])
def test_each_failure_is_a_sentence_without_class_names(exc, expected):
    assert expected in _said(exc)


@pytest.mark.parametrize("text", [
    "diffrec://127.0.0.1:5557?key=" + "zz" * 32, "diffrec://127.0.0.1:5557?key=" + "ab" * 16,
    "diffrec://127.0.0.1?key=" + "ab" * 32, "diffrec://127.0.0.1:5557",
    "diffrec://127.0.0.1:5557?key=" + "ab" * 31 + "a",
])
def test_malformed_pairing_strings_say_what_a_pairing_string_is(text):
    with pytest.raises(WIRE.ProtocolError) as info:
        connection.endpoint(text)
    assert _said(info.value) == messages.BAD_PAIRING


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_nothing_listening_is_said_at_once():
    target = connection.endpoint(f"tcp://127.0.0.1:{_free_port()}")
    start = time.monotonic()
    with pytest.raises(connection.Unreachable) as info:
        connection.reach(target, None, budget_s=2.0)
    assert time.monotonic() - start < 0.5
    assert _said(info.value) == connection.nothing_listening(target)


def test_a_silent_listener_is_said_within_the_budget():
    """A port that accepts connections but never answers (a CURVE server to a key it does not
    allow looks the same): the sentence comes within the budget."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        target = connection.endpoint(f"tcp://127.0.0.1:{listener.getsockname()[1]}")
        start = time.monotonic()
        with pytest.raises(connection.Unreachable) as info:
            connection.reach(target, None, budget_s=1.0)
        assert time.monotonic() - start < 1.5
    assert _said(info.value) == connection.silent(target)
