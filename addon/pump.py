"""Operators whose work is done one piece per timer tick, so Blender stays responsive.

An operator mixing in ``Pumped`` defines ``step`` (one piece of work; whether all is done),
``stop`` (ESC: end at the next step) and ``finish`` (the operator's result once over). ``pump``
runs it modally on a timer in the interface, or steps it to its end at once where no event
loop runs (``blender --background``, the bpy module). Whatever a step raises ends the operator
with the exception's sentence (``messages``), after ``abandon`` cleans up; ``abandon`` also
runs where Blender ends a running operator itself (``cancel``: a file loaded meanwhile).
"""

from __future__ import annotations

import bpy

from .core import messages

TICK_S = 0.1


def blocking(context) -> bool:
    """Whether no timer nor modal operator can tick here (no event loop or no window)."""
    return bpy.app.background or context.window_manager is None or not context.window


class Pumped:
    """Mixin of a ``bpy.types.Operator`` working in steps (see the module)."""

    _timer = None

    def step(self, context) -> bool:
        raise NotImplementedError

    def stop(self, context) -> None:
        raise NotImplementedError

    def finish(self, context) -> set:
        raise NotImplementedError

    def abandon(self, context) -> None:
        """Clean up after a step raised (nothing by default)."""

    def cancel(self, context) -> None:
        """Blender's call where it ends the operator itself: a file loaded while it runs (clean
        up as after a failed step), or its file browser cancelled before it ran (nothing)."""
        if self._timer is None:
            return
        timer, self._timer = self._timer, None
        self.abandon(context)
        context.window_manager.event_timer_remove(timer)

    def run_blocking(self, context) -> None:
        """Step to the end here (the background path)."""
        while not self.step(context):
            pass

    def pump(self, context) -> set:
        if blocking(context):
            self.run_blocking(context)
            return self.finish(context)
        self._timer = context.window_manager.event_timer_add(TICK_S, window=context.window)
        context.window_manager.modal_handler_add(self)
        return {"RUNNING_MODAL"}

    def modal(self, context, event):
        if event.type == "ESC":
            self.stop(context)
        if event.type == "TIMER":
            try:
                over = self.step(context)
            except Exception as exc:
                messages.log(exc)
                self.report({"ERROR"}, messages.sentence(exc))
                context.window_manager.event_timer_remove(self._timer)
                self.abandon(context)
                return {"CANCELLED"}
            if over:
                context.window_manager.event_timer_remove(self._timer)
                return self.finish(context)
        if context.area:
            context.area.tag_redraw()
        return {"PASS_THROUGH"}
