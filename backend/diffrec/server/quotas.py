"""Per-client-key quotas: what one key may hold at once on a server.

Defaults here; ``diffrec serve`` has a flag for each. Going over one is a ``quota_exceeded``
error naming the limit, its value and what to do.
"""

from __future__ import annotations

from dataclasses import dataclass

from diffrec.protocol.errors import ProtocolError
from diffrec.protocol.limits import GIB


@dataclass(frozen=True)
class Quotas:
    """Limits per client key. Bytes are bytes; counts are counts."""

    pending_uploads: int = 32
    """Uploads begun and not finished (their part files), at once."""
    pending_bytes: int = 256 * GIB
    """The declared sizes of those uploads, summed."""
    stored_bytes: int = 512 * GIB
    """Complete blobs held (uploaded, or inline inputs of submitted jobs), summed."""
    queued_jobs: int = 100
    """Jobs queued or running at once."""


DEFAULT_QUOTAS = Quotas()


def exceeded(limit: str, value: int, used: int, adding: int, advice: str) -> ProtocolError:
    """``quota_exceeded`` for ``limit`` (a Quotas field) of ``value``, with ``used`` already
    held and ``adding`` more asked for."""
    return ProtocolError(
        "quota_exceeded",
        f"quota {limit} of {value} per client key exceeded ({used} held, {adding} more asked "
        f"for): {advice}")
