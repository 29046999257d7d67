"""Errors a user can act on. The command line prints their message, not a traceback."""


class UserError(Exception):
    """A mistake in the user's input or setup; the message says what is wrong and what to do."""


class SettingVariableError(UserError, ValueError):
    """One of diffrec's environment variables holds a value it does not take."""


class Cancelled(Exception):
    """A run was asked to stop (``should_stop``); its last checkpoint holds its state."""


def one_line(error: BaseException, limit: int = 200) -> str:
    """``error``'s message on one line (a library's multi-line text joined), at most ``limit``
    characters: for sentences that quote another library's complaint."""
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= limit else text[:limit - 1] + "…"
