"""What to say about a setting name nobody knows: the closest known names and where all are
listed. Standard library only (the add-on vendors this package)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

SETTINGS_TABLE = "docs/protocol.md, section 8"


def setting_hint(name: str, known: Iterable[str]) -> str:
    """``"did you mean iterations? Every setting is listed in docs/protocol.md, section 8"``:
    up to three of ``known`` that look like ``name`` (``difflib``), then where all are."""
    close = difflib.get_close_matches(str(name), list(dict.fromkeys(known)), n=3, cutoff=0.7)
    if not close:
        return f"every setting is listed in {SETTINGS_TABLE}"
    return f"did you mean {' or '.join(close)}? Every setting is listed in {SETTINGS_TABLE}"
