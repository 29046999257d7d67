"""A job's events, typed (docs/protocol.md, section 7): standard library only.

The trainer builds a ``Progress`` (and the server's tasks a ``Log`` or an ``End``); each hop
forwards it unchanged, as its ``fields()`` (serialised once at the process boundary and once
on the wire); a front end reads it back with ``parse`` and shows it with ``describe``, the
one formatting function that the add-on and the command line share.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

FINAL_KINDS = ("done", "failed", "cancelled")


def _number(value) -> float | None:
    """``value`` as a finite float, else None (a JSON null, NaN or a missing field)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


@dataclass(frozen=True)
class Progress:
    """Where a job is: pass ``pass_number`` of ``passes`` (1-based, counting only the passes
    this job runs), named ``pass_name`` (``pass1``, ``pass2``, ``path``, ``fit``, ``mips``),
    ``pass_index`` the pass's own index (0 for ``pass1``, 1 for ``pass2``), ``iteration`` of
    ``iterations`` (this pass's most), ``expected_iterations`` where the pass is expected to
    end (before ``iterations`` when the stopping rule may end it sooner; None: at
    ``iterations``),
    ``losses`` {name: value}, the batch ``psnr`` (dB), seconds spent in this pass
    (``elapsed_s``), still needed for this pass (``eta_s``, to its expected end) and for the
    whole job (``job_eta_s``; None: unknown)."""

    pass_name: str
    iteration: int
    iterations: int
    losses: dict[str, float] = field(default_factory=dict)
    psnr: float | None = None
    elapsed_s: float = 0.0
    eta_s: float | None = None
    job_eta_s: float | None = None
    pass_number: int = 1
    passes: int = 1
    pass_index: int = 0
    expected_iterations: int | None = None

    kind = "progress"

    def fields(self) -> dict[str, Any]:
        """The ``progress`` event's fields (docs/protocol.md)."""
        return {"pass": self.pass_name, "pass_index": self.pass_index,
                "pass_number": self.pass_number, "passes": self.passes,
                "iteration": self.iteration, "iterations": self.iterations,
                "expected_iterations": self.expected_iterations, "losses": dict(self.losses),
                "psnr": self.psnr, "elapsed_s": self.elapsed_s, "eta_s": self.eta_s,
                "job_eta_s": self.job_eta_s}

    @classmethod
    def from_fields(cls, fields: Mapping) -> Progress:
        """A progress event read back; one from a server that predates ``pass_number``,
        ``passes`` and ``job_eta_s`` reads as one pass whose ETA is the job's, one without
        ``expected_iterations`` as a pass that runs all its iterations."""
        eta = _number(fields.get("eta_s"))
        losses, expected = fields.get("losses"), _number(fields.get("expected_iterations"))
        return cls(
            pass_name=str(fields.get("pass", "")),
            iteration=int(fields.get("iteration", 0)),
            iterations=max(1, int(fields.get("iterations", 1))),
            losses={str(k): float(v) for k, v in losses.items()} if isinstance(losses, Mapping)
            else {},
            psnr=_number(fields.get("psnr")),
            elapsed_s=_number(fields.get("elapsed_s")) or 0.0,
            eta_s=eta,
            job_eta_s=_number(fields.get("job_eta_s", eta)),
            pass_number=max(1, int(fields.get("pass_number", 1))),
            passes=max(1, int(fields.get("passes", 1))),
            pass_index=int(fields.get("pass_index", 0)),
            expected_iterations=None if expected is None else int(expected),
        )

    @property
    def expected_end(self) -> int:
        """The iteration this pass is expected to end at: ``expected_iterations``, else
        ``iterations``; never before the current one."""
        end = self.iterations if self.expected_iterations is None else self.expected_iterations
        return max(end, self.iteration, 1)

    @property
    def fraction(self) -> float:
        """How much of the whole job is done, 0..1, counting each pass as an equal share and
        a pass as done at its expected end."""
        within = min(1.0, self.iteration / self.expected_end)
        return min(1.0, (self.pass_number - 1 + within) / max(1, self.passes))

    @property
    def seconds_per_iteration(self) -> float | None:
        """This pass's measured speed: what its ETA was reckoned at, or at its expected end
        the pass's mean (None when nothing tells)."""
        left = self.expected_end - self.iteration
        if left > 0 and self.eta_s:
            return self.eta_s / left
        return self.elapsed_s / self.iteration if self.iteration and self.elapsed_s else None


@dataclass(frozen=True)
class Preview:
    """A live preview's fields (its images travel as arrays): the pass and iteration."""

    pass_name: str
    iteration: int
    pass_number: int = 1
    passes: int = 1
    pass_index: int = 0

    kind = "preview"

    def fields(self) -> dict[str, Any]:
        return {"pass": self.pass_name, "pass_index": self.pass_index,
                "pass_number": self.pass_number, "passes": self.passes,
                "iteration": self.iteration}

    @classmethod
    def from_fields(cls, fields: Mapping) -> Preview:
        return cls(str(fields.get("pass", "")), int(fields.get("iteration", 0)),
                   max(1, int(fields.get("pass_number", 1))),
                   max(1, int(fields.get("passes", 1))), int(fields.get("pass_index", 0)))


MIP_PASS = "mips"
"""The pass name of the fit of the textures' mip levels after the last pass: its progress
events count its steps, and it has no PSNR."""


@dataclass(frozen=True)
class Log:
    """A sentence for the user. ``stage``: set when the sentence says what the job does now
    between passes ("unwrapping", "baking", "mips", "validating", "writing"): a front end shows it
    as the job's status rather than as a message; ``resumed_from``: the iteration a resumed
    pass starts at."""

    message: str
    level: str = "info"
    stage: str | None = None
    resumed_from: int | None = None

    kind = "log"

    def fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = {"level": self.level, "message": self.message}
        if self.stage is not None:
            fields["stage"] = self.stage
        if self.resumed_from is not None:
            fields["resumed_from"] = self.resumed_from
        return fields

    @classmethod
    def from_fields(cls, fields: Mapping) -> Log:
        stage, resumed = fields.get("stage"), fields.get("resumed_from")
        return cls(str(fields.get("message", "")), str(fields.get("level", "info")),
                   str(stage) if stage is not None else None,
                   int(resumed) if isinstance(resumed, int) else None)


@dataclass(frozen=True)
class End:
    """A job's final event: ``kind`` done, failed or cancelled; ``message`` why (failed,
    cancelled); ``results`` the result files of a done job [{name, size, content_hash}]."""

    kind: str
    message: str = ""
    results: list[dict] = field(default_factory=list)

    def fields(self) -> dict[str, Any]:
        return {"results": list(self.results)} if self.kind == "done" else {
            "message": self.message}

    @classmethod
    def from_fields(cls, kind: str, fields: Mapping) -> End:
        results = fields.get("results")
        return cls(kind, str(fields.get("message", "")),
                   list(results) if isinstance(results, list) else [])


Event = Progress | Preview | Log | End


def parse(kind: str, fields: Mapping) -> Event:
    """The typed event of an ``event`` message's ``kind`` and fields. Raises ValueError for a
    kind this protocol does not know."""
    if kind == "progress":
        return Progress.from_fields(fields)
    if kind == "preview":
        return Preview.from_fields(fields)
    if kind == "log":
        return Log.from_fields(fields)
    if kind in FINAL_KINDS:
        return End.from_fields(kind, fields)
    raise ValueError(f"unknown event kind {kind!r}")


def time_left(seconds: float | None) -> str:
    """``seconds`` still needed, as a person says it: "about 3 min left", "about 1 h 20 min
    left", "less than a minute left"; "" when unknown."""
    if seconds is None:
        return ""
    if seconds < 60:
        return "less than a minute left"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"about {minutes} min left"
    hours, minutes = divmod(minutes, 60)
    return f"about {hours} h {minutes} min left" if minutes else f"about {hours} h left"


def describe(progress: Progress) -> str:
    """One line for a person: "Pass 1 of 2 · 120/300 · 27.4 dB · about 3 min left" (the pass
    only when the job has several; the ETA is the whole job's); "Mip levels · 40/100 · ..."
    for the fit of the textures' mip levels (``MIP_PASS``)."""
    parts = [f"Pass {progress.pass_number} of {progress.passes}"] if progress.passes > 1 else []
    if progress.pass_name == MIP_PASS:
        parts = ["Mip levels"]
    parts.append(f"{progress.iteration}/{progress.iterations}")
    if progress.psnr is not None:
        parts.append(f"{progress.psnr:.1f} dB")
    left = time_left(progress.job_eta_s)
    if left:
        parts.append(left)
    return " · ".join(parts)
