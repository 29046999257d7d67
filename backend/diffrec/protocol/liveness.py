"""Whether the server a client follows is alive, by the wall clock: the silence clock.

A server is *silent* from the first request it has not answered (nothing at all heard since)
until it says anything. The clock lives as long as the connection, not one poll: a follower
that polls in short slices still sees the silence add up. The server names its run with a
``session`` (in ``ping`` replies and heartbeats, docs/protocol.md); a new session means it
restarted and has forgotten its subscribers, so its jobs must be attached again.

``Liveness.change`` says what a follower should tell the person waiting, once per change:
``stopped`` (silent for ``stopped_after_s``), then ``back`` (the same session answers again) or
``restarted`` (another session answers); ``SAID`` words each.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from .limits import STOPPED_AFTER_S

SAID = {
    "stopped": "the server stopped: following again when it is back",
    "back": "the server answers again; following again",
    "restarted": "the server restarted; following again",
}
"""What a follower says of each change, in the status line or on the console."""


class Liveness:
    """The silence clock of one client's connection (see the module). ``clock``: monotonic
    seconds (``time.monotonic``; a test passes its own)."""

    def __init__(self, stopped_after_s: float = STOPPED_AFTER_S,
                 clock: Callable[[], float] = time.monotonic):
        self.stopped_after_s = stopped_after_s
        self.clock = clock
        self.session: str | None = None
        """The server session last named (None until one is)."""
        self.stopped = False
        """Reported stopped, and not heard naming its session since."""
        self._waiting_since: float | None = None
        self._restarted = False
        self._back = False

    def asked(self) -> None:
        """A request went out: the silence starts now unless it already runs."""
        if self._waiting_since is None:
            self._waiting_since = self.clock()

    def heard(self, session: str | None = None) -> None:
        """The server said something; ``session`` when it named its session. Only a message
        naming the session ends a ``stopped`` spell (it tells a restart from a return)."""
        self._waiting_since = None
        if session is None:
            return
        if self.session is not None and session != self.session:
            self._restarted = True
        elif self.stopped:
            self._back = True
        self.session = session

    def silence_s(self) -> float:
        """Seconds since the oldest request not followed by any word of the server (0 when
        nothing is awaited)."""
        return 0.0 if self._waiting_since is None else self.clock() - self._waiting_since

    def silent_at(self, seconds: float) -> float | None:
        """When (``clock`` time) the silence reaches ``seconds``; None when nothing is
        awaited."""
        return None if self._waiting_since is None else self._waiting_since + seconds

    def change(self) -> str | None:
        """The change since the last call, each reported once: "restarted", "back",
        "stopped" (see the module), or None."""
        if self._restarted or self._back:
            change = "restarted" if self._restarted else "back"
            self._restarted = self._back = self.stopped = False
            return change
        if not self.stopped and self.silence_s() > self.stopped_after_s:
            self.stopped = True
            return "stopped"
        return None
