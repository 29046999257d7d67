"""The runners a server offers, by task name (kept apart from ``runner``, the interface they
implement, so that the runners can import the interface without an import loop)."""

from __future__ import annotations

from .optimize_runner import OptimizeRunner
from .runner import Runner
from .texture_fit import TextureFitRunner


def runners(device: str = "cpu") -> dict[str, Runner]:
    """The runners a server on ``device`` offers, by task name."""
    return {runner.task: runner for runner in (OptimizeRunner(device), TextureFitRunner())}
