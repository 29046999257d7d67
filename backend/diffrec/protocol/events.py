"""A job's events, typed (docs/protocol.md, section 7): standard library only.

One union, ``Event``: ``Progress``, ``Preview`` (its images with it), ``Log``, ``Started`` (the
executor's word to the job table: never on the wire) and ``Finished`` (how a job ended, an
``Outcome``). The trainer and the server's tasks build them; every hop in the server passes the
object itself (pickled as it is across processes); the server's transport writes it with
``to_wire`` and the client's channel reads it back with ``parse``, once each; front ends show
any of them with ``describe``, the one formatting function that the add-on and the command
line share. ``Outcome`` is the one definition of a job's final states.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Outcome(StrEnum):
    """How a job ended: its final state, and the kind of the event that says so."""

    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


FINAL_STATES = tuple(outcome.value for outcome in Outcome)
"""A job's final states as the wire and its state files spell them: ``done``, ``failed``,
``cancelled``."""


def _number(value) -> float | None:
    """``value`` as a finite float, else None (a JSON null, NaN or a missing field)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


class PassName(StrEnum):
    """A pass of a job, named for what it does: the ``pass`` of its progress and preview
    events, its key in ``metrics.json``'s ``time_s`` and ``stopped_early``, its checkpoint.
    Where it stands among the passes a job runs is another matter (``pass_number`` of
    ``passes``). Protocol 5 and before named the first three ``pass1``, ``pass2`` and
    ``path`` (``pipeline.pass_config.PROTOCOL_5_NAMES``)."""

    SURFACE = "surface"
    """reconstruct's first pass: the isosurface (DMTet or FlexiCubes) and a neural material"""
    TEXTURES = "textures"
    """the mesh with its textures: reconstruct's second pass, materials' and refine's one"""
    PATH_TRACED = "path-traced"
    """the path-traced pass after the textures pass (``renderer`` path-traced)"""
    MIPS = "mips"
    """the fit of the textures' mip levels after the last pass: its progress events count its
    steps, and it has no PSNR"""
    FIT = "fit"
    """the ``fit_texture`` task's one pass"""


@dataclass(frozen=True)
class Progress:
    """Where a job is: pass ``pass_number`` of ``passes`` (1-based, counting only the passes
    this job runs), named ``pass_name`` (a ``PassName``),
    ``iteration`` of ``iterations`` (this pass's most), ``expected_iterations`` where the pass
    is expected to end (before ``iterations`` when the stopping rule may end it sooner; None:
    at ``iterations``), ``losses`` {name: value}, the batch ``psnr`` (dB), seconds spent in
    this pass (``elapsed_s``), still needed for this pass (``eta_s``, to its expected end) and
    for the whole job (``job_eta_s``; None: unknown)."""

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
    expected_iterations: int | None = None

    kind = "progress"

    def fields(self) -> dict[str, Any]:
        """The ``progress`` event's fields (docs/protocol.md)."""
        return {"pass": self.pass_name, "pass_number": self.pass_number, "passes": self.passes,
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
    """A live preview: the pass and iteration, and ``images`` its arrays by name (``render``,
    ``target`` and, when the geometry moves, ``vertices`` and ``faces``: docs/protocol.md),
    which travel as the message's arrays; they take no part in comparing two previews."""

    pass_name: str
    iteration: int
    pass_number: int = 1
    passes: int = 1
    images: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    kind = "preview"

    def fields(self) -> dict[str, Any]:
        return {"pass": self.pass_name, "pass_number": self.pass_number, "passes": self.passes,
                "iteration": self.iteration}

    @classmethod
    def from_fields(cls, fields: Mapping, images: Mapping | None = None) -> Preview:
        return cls(str(fields.get("pass", "")), int(fields.get("iteration", 0)),
                   max(1, int(fields.get("pass_number", 1))),
                   max(1, int(fields.get("passes", 1))), dict(images or {}))


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
class Started:
    """A job began running, or began again after a restart (the job table counts an attempt).
    The executor's word to the job table: never sent on the wire."""

    kind = "started"

    def fields(self) -> dict[str, Any]:
        return {}

    @classmethod
    def from_fields(cls, fields: Mapping) -> Started:
        return cls()


@dataclass(frozen=True)
class Finished:
    """A job's final event: its ``outcome``; ``message`` why (failed, cancelled); ``results``
    the result files of a done job [{name, size, content_hash}]."""

    outcome: Outcome
    message: str = ""
    results: list[dict] = field(default_factory=list)

    @property
    def kind(self) -> str:
        """The event's kind on the wire: the outcome's name."""
        return self.outcome.value

    def fields(self) -> dict[str, Any]:
        return ({"results": list(self.results)} if self.outcome is Outcome.DONE
                else {"message": self.message})

    @classmethod
    def from_fields(cls, kind: str, fields: Mapping) -> Finished:
        results = fields.get("results")
        return cls(Outcome(kind), str(fields.get("message", "")),
                   list(results) if isinstance(results, list) else [])


Event = Progress | Preview | Log | Started | Finished
_KINDS = {"progress": Progress, "log": Log, "started": Started}


def parse(kind: str, fields: Mapping, arrays: Mapping | None = None) -> Event:
    """The typed event of an ``event`` message's ``kind``, fields and arrays (a preview's
    images). Raises ValueError for a kind this protocol does not know."""
    if kind == "preview":
        return Preview.from_fields(fields, arrays)
    if kind in FINAL_STATES:
        return Finished.from_fields(kind, fields)
    if kind in _KINDS:
        return _KINDS[kind].from_fields(fields)
    raise ValueError(f"unknown event kind {kind!r}")


def to_wire(event: Event) -> tuple[str, dict[str, Any], Mapping[str, Any] | None]:
    """``event`` as an ``event`` message carries it: (kind, fields, arrays or None); ``parse``
    reads it back."""
    arrays = event.images if isinstance(event, Preview) else None
    return event.kind, event.fields(), arrays or None


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


def describe(event: Event) -> str:
    """One line for a person, for any event: "Pass 1 of 2 · 120/300 · 27.4 dB · about 3 min
    left" for progress (the pass only when the job has several; the ETA is the whole job's;
    "Mip levels · 40/100 · ..." for the fit of the textures' mip levels, ``PassName.MIPS``),
    "preview: 120" (its iteration, after "pass 1 of 2 · " likewise), a log's sentence
    ("warning: " before a warning's), "started", "done: mesh.glb, manifest.json", "failed:
    why", "cancelled: why"."""
    if isinstance(event, Progress):
        return _describe_progress(event)
    if isinstance(event, Preview):
        several = f"pass {event.pass_number} of {event.passes} · " if event.passes > 1 else ""
        return f"preview: {several}{event.iteration}"
    if isinstance(event, Log):
        return f"warning: {event.message}" if event.level == "warning" else event.message
    if isinstance(event, Finished):
        said = (", ".join(str(entry.get("name", "")) for entry in event.results)
                if event.outcome is Outcome.DONE else event.message)
        return f"{event.kind}: {said}" if said else event.kind
    return event.kind


def _describe_progress(progress: Progress) -> str:
    parts = [f"Pass {progress.pass_number} of {progress.passes}"] if progress.passes > 1 else []
    if progress.pass_name == PassName.MIPS:
        parts = ["Mip levels"]
    parts.append(f"{progress.iteration}/{progress.iterations}")
    if progress.psnr is not None:
        parts.append(f"{progress.psnr:.1f} dB")
    left = time_left(progress.job_eta_s)
    if left:
        parts.append(left)
    return " · ".join(parts)
