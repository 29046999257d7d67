"""Every job this Blender session follows, owned by one controller, without bpy.

A followed job is a run: in Blender a ``follow.JobRun``, here anything with ``job`` (its id),
``report(kinds, message)``, ``tick(context, block) -> bool`` (one piece of main-thread work;
whether the run is over), ``cancel()`` and ``detach()``. The controller holds the runs by job
id and drives them all from one place: ``tick``, called by one timer on Blender's main thread,
ticks a job started by an operator and one followed again after its file was opened alike.
Operators only hand it runs (``follow``) and ask it to cancel them (``cancel``); the panel asks
it what is followed (``in``, ``len``). Where no timer fires (``blender --background``, the bpy
module) ``run_to_end`` ticks one run to its end instead.
"""

from __future__ import annotations

from collections.abc import Callable

from . import messages


class JobController:
    """The runs followed now, by job id (see the module). ``tick_s`` is the interval ``tick``
    asks for while any run is left; ``on_end(run)`` is called for each run that ``tick`` saw
    end (not one dropped by ``detach_all`` nor one whose tick raised)."""

    def __init__(self, tick_s: float = 0.1, on_end: Callable[[object], None] | None = None):
        self.tick_s = tick_s
        self.on_end = on_end
        self._runs: dict[str, object] = {}

    def __contains__(self, job: str) -> bool:
        return job in self._runs

    def __len__(self) -> int:
        return len(self._runs)

    def run(self, job: str):
        """The run following ``job``, or None."""
        return self._runs.get(job)

    def runs(self) -> list:
        """Every run followed now, in the order they were followed."""
        return list(self._runs.values())

    def follow(self, run) -> bool:
        """Follow ``run`` from the next ``tick``; False (and nothing changes) when its job is
        already followed."""
        if run.job in self._runs:
            return False
        self._runs[run.job] = run
        return True

    def cancel(self, job: str = "") -> list[str]:
        """Cancel the run of ``job`` (every run when empty); the jobs asked. A run ends at a
        later tick, once its job's end is known."""
        asked = [name for name in self._runs if job in ("", name)]
        for name in asked:
            self._runs[name].cancel()
        return asked

    def detach_all(self) -> None:
        """Stop following every run at once (its file is being closed): each job goes on on the
        server and nothing more of it is applied."""
        runs, self._runs = list(self._runs.values()), {}
        for run in runs:
            try:
                run.detach()
            except Exception as exc:  # the others are let go all the same
                messages.log(exc)

    def tick(self, context, block: bool = False) -> float | None:
        """Tick every run once (``block``: each to its end), in the order they were followed;
        the interval until the next tick, None once no run is left (a timer returning it is
        unregistered). A run whose tick raises is cancelled and dropped, its error reported as
        one sentence (``messages``)."""
        for run in list(self._runs.values()):
            try:
                over = run.tick(context, block=block)
            except Exception as exc:
                messages.log(exc)
                run.report({"ERROR"}, messages.sentence(exc))
                run.cancel()
                self._forget(run)
                continue
            if over and self._forget(run) and self.on_end is not None:
                self.on_end(run)
        return self.tick_s if self._runs else None

    def run_to_end(self, context, job: str) -> None:
        """Tick the run of ``job`` to its end here (where no timer fires), then drop it; what
        its tick raises goes to the caller. A Ctrl-C (KeyboardInterrupt) cancels the run and
        ticks on until its job has stopped (a second one stops waiting), then raises
        RuntimeError(``messages.INTERRUPTED``)."""
        run = self._runs[job]
        try:
            try:
                _tick_to_end(run, context)
            except KeyboardInterrupt:
                run.cancel()
                try:
                    _tick_to_end(run, context)
                except KeyboardInterrupt:
                    pass
                raise RuntimeError(messages.INTERRUPTED) from None
        finally:
            self._forget(run)

    def _forget(self, run) -> bool:
        """Drop ``run`` (not another run of its job: one a reopened file follows again);
        whether it was followed."""
        if self._runs.get(run.job) is not run:
            return False
        del self._runs[run.job]
        return True


def _tick_to_end(run, context) -> None:
    while not run.tick(context, block=True):
        pass
