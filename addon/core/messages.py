"""Every failure the artist can meet as one sentence saying what to do: no class names, no
tracebacks (those go to the system console, for a bug report).

``sentence(exc)`` words an exception; ``reported`` wraps an operator method so that whatever
it raises ends as an ERROR report and ``{'CANCELLED'}``. Without bpy: the job worker thread
(``job_session.JobSession``) words its failures here too.
"""

from __future__ import annotations

import functools
import sys
import traceback

from .wire import protocol

# the protocol's error codes (docs/protocol.md, "Errors") whose server message needs a lead-in
_LEAD_INS = {
    "not_found": "The server does not know this job (it was deleted, or it belongs to another "
                 "key)",
    "conflict": "Another computer's key already uses this job id",
    "too_many_jobs": "The server holds too many of your jobs: delete finished ones",
    "invalid_input": "The server cannot make a job of what was sent",
    "read_only": "The server cannot store anything",
    "disk_full": "The server cannot store the job",
    "quota_exceeded": "The server refused the job",
}
BAD_PAIRING = ("The Backend setting is not a valid pairing string: copy the whole line "
               "'diffrec keys init' printed on the server, diffrec://HOST:PORT?key= followed by "
               "64 hexadecimal digits.")
INTERNAL = ("The backend hit an internal error (its log has the details): try again, and report "
            "it with the server's log if it happens again.")
INTERRUPTED = ("Interrupted (Ctrl-C): the job was asked to stop, and kept its checkpoint "
               "where it had one, so Resume (Re-attach, or the protocol's resume) goes on "
               "from there.")
_WORDED = (ValueError, OSError, RuntimeError, ImportError)
"""Exceptions whose message is a sentence for people (the add-on's, bpy's, the protocol's)."""
NO_PROTOCOL = ("The add-on cannot load its network library (pyzmq): reinstall the diffrec "
               "extension from the zip for this platform and Blender version.")
GONE = ("Something this work was using (an object, a camera, a material or the scene) was "
        "deleted meanwhile, so it stopped: start it again.")


def _capitalised(text: str) -> str:
    text = text.strip()
    text = text[:1].upper() + text[1:]
    return text if text.endswith((".", "!", "?")) else f"{text}."


def _protocol_sentence(exc) -> str:
    if exc.code == "bad_pairing":
        return BAD_PAIRING
    if exc.code == "internal":
        return INTERNAL
    lead = _LEAD_INS.get(exc.code)
    return _capitalised(f"{lead}: {exc.message}" if lead else exc.message)


def sentence(exc: BaseException, sent: bool = True) -> str:
    """``exc`` as one sentence an artist can act on; ``sent``: whether the job had reached
    the server (a backend that stopped answering: Re-attach follows a job it has, Resume
    sends again one it never got)."""
    try:
        wire = protocol()
    except ImportError:
        return NO_PROTOCOL
    if isinstance(exc, ImportError):
        return NO_PROTOCOL
    if isinstance(exc, wire.ServerUnavailable):
        then = "Re-attach the job" if sent else "press the job's Resume to send it again"
        return _capitalised(f"The backend stopped answering ({exc}): check that it still runs "
                            f"and that this computer can reach it, then {then}")
    if isinstance(exc, wire.ProtocolError):
        return _protocol_sentence(exc)
    if isinstance(exc, ReferenceError):  # bpy's: a datablock held across a step was removed
        return GONE
    if isinstance(exc, OSError) and exc.strerror and exc.filename:
        return _capitalised(f"A file could not be used ({exc.filename}): "
                            f"{exc.strerror.lower()}")
    if isinstance(exc, OSError) and exc.strerror:
        return _capitalised(exc.strerror)
    text = str(exc).strip().removeprefix("Error: ").strip()
    if isinstance(exc, _WORDED) and text:
        return _capitalised(text)  # the add-on's and bpy's own errors are worded for people
    return _capitalised(f"The diffrec add-on met an unexpected problem ({text or 'no details'})"
                        "; the system console has the details for a bug report")


def log(exc: BaseException) -> None:
    """The traceback of an unexpected ``exc`` on stderr (Blender's system console), for a bug
    report; the failures ``sentence`` words from their own message need none."""
    try:
        worded = (*_WORDED, protocol().ProtocolError, protocol().ServerUnavailable)
    except ImportError:
        worded = _WORDED
    if not isinstance(exc, worded):
        traceback.print_exception(exc, file=sys.stderr)


def reported(execute):
    """Wrap an operator's ``execute(self, context)`` (Blender checks its arguments' count):
    any exception becomes an ERROR report (its sentence) and ``{'CANCELLED'}``."""

    @functools.wraps(execute)
    def wrapper(self, context):
        try:
            return execute(self, context)
        except Exception as exc:
            log(exc)
            self.report({"ERROR"}, sentence(exc))
            return {"CANCELLED"}

    return wrapper
