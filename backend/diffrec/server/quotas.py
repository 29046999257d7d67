"""Per-client-key quotas and per-job bounds: what one key may hold at once on a server, and
how long one job may be.

Defaults here; ``diffrec serve`` has a flag for each. Going over one is a ``quota_exceeded``
error naming the limit, its value and what to do.
"""

from __future__ import annotations

from dataclasses import dataclass

from diffrec.protocol.errors import ProtocolError
from diffrec.protocol.limits import GIB


@dataclass(frozen=True)
class Quotas:
    """Limits per client key, and per job (``iterations``, ``wall_time_s``). Bytes are bytes;
    counts are counts."""

    pending_uploads: int = 32
    """Uploads begun and not finished (their part files), at once."""
    pending_bytes: int = 256 * GIB
    """The declared sizes of those uploads, summed."""
    stored_bytes: int = 512 * GIB
    """Complete blobs held (uploaded, or inline inputs of submitted jobs), summed."""
    queued_jobs: int = 100
    """Jobs queued or running at once."""
    running_jobs: int = 0
    """Jobs handed to the executor at once (running, or next in its queue); a key's other
    jobs wait, and keys take turns (round robin) as jobs end. 0: the executor's own share
    (``Executor.running_per_key``: 1 on the local worker, no limit on a cluster)."""
    iterations: int = 1_000_000
    """Iterations one job may ask for (per pass); more is refused at submit."""
    wall_time_s: float = 24 * 3600.0
    """Seconds one job may run on the local worker before it is stopped, as failed."""


DEFAULT_QUOTAS = Quotas()


def exceeded(limit: str, value: int, used: int, adding: int, advice: str) -> ProtocolError:
    """``quota_exceeded`` for ``limit`` (a Quotas field) of ``value``, with ``used`` already
    held and ``adding`` more asked for."""
    return ProtocolError(
        "quota_exceeded",
        f"quota {limit} of {value} per client key exceeded ({used} held, {adding} more asked "
        f"for): {advice}")


def over_bound(name: str, value, bound, advice: str) -> ProtocolError:
    """``invalid_input`` for a job whose ``name`` of ``value`` is over this server's ``bound``
    (a Quotas field of the same name)."""
    return ProtocolError("invalid_input", f"{name} {value} is over this server's limit of "
                         f"{bound} per job: {advice} (its operator sets the limit with diffrec "
                         f"serve --max-{name.replace('_', '-')})")
