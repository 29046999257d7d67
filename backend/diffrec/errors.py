"""Errors a user can act on. The command line prints their message, not a traceback."""


class UserError(Exception):
    """A mistake in the user's input or setup; the message says what is wrong and what to do."""


class Cancelled(Exception):
    """A run was asked to stop (``should_stop``); its last checkpoint holds its state."""
