"""Errors of the wire protocol. Their ``code`` is what travels in an ``error`` reply."""

from __future__ import annotations


class ProtocolError(Exception):
    """A message broke the protocol or a request cannot be honoured.

    ``code`` is one of the error codes in docs/protocol.md ("Errors"); ``message`` is a sentence
    a user can act on.
    """

    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class ServerError(ProtocolError):
    """The server answered a request with an ``error`` reply."""


class ServerUnavailable(Exception):
    """No answer from the server within the client's retry budget."""


class JobLost(ServerError):
    """A server that answers again after a silence (a restart) no longer knows a job its
    client followed: the job was lost."""

    def __init__(self, job: str):
        super().__init__("not_found", f"the server came back without job {job}: the job was "
                                      "lost; submit it again")
        self.job = job
