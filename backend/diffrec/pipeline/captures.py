"""Every capture layout the backend reads, behind one call: ``diffrec.protocol.captures``'
NeRF-style folders, capture tools' ``transforms.json`` and LLFF captures (numpy only, shared
with the add-on), and COLMAP models (``diffrec.pipeline.colmap_capture``, through the optional
pycolmap). Captures only: images are decoded (and undistorted, ``Frame.undistort``) into
``Views`` by ``diffrec.pipeline.loading``.
"""

from __future__ import annotations

from pathlib import Path

from diffrec.pipeline.colmap_capture import detect_colmap, read_colmap
from diffrec.protocol.captures import Capture, CaptureError, detect_layout, read_capture

__all__ = ["capture_layout", "poses_hint", "read_any_capture"]


def capture_layout(folder: str | Path) -> str | None:
    """``"nerf"``, ``"nerfstudio"``, ``"llff"``, ``"colmap"`` or None (``detect_layout``
    plus COLMAP models)."""
    layout = detect_layout(folder) if Path(folder).is_dir() else None
    return layout or ("colmap" if detect_colmap(folder) else None)


def poses_hint(folder: str | Path) -> str:
    """For a folder with ``images/`` but no cameras, a clause saying how to find them
    (``diffrec poses``), else ""."""
    if not (Path(folder) / "images").is_dir():
        return ""
    return f": for photos without cameras, find them first with diffrec poses {folder}"


def read_any_capture(folder: str | Path, split: str = "train", *,
                     longest_side: int | None = None) -> Capture:
    """``read_capture``, and COLMAP models where the folder is neither NeRF-style nor LLFF
    (one split, "train", as LLFF). Frames with a lens must have their images undistorted
    (``Frame.undistort``)."""
    folder = Path(folder)
    if not folder.is_dir() or detect_layout(folder) or any(folder.glob("transforms*.json")):
        return read_capture(folder, split, longest_side=longest_side, undistorts=True)
    if detect_colmap(folder) is None:
        try:
            return read_capture(folder, split, longest_side=longest_side, undistorts=True)
        except CaptureError as error:
            raise CaptureError(f"{error}; nor a COLMAP model (cameras and images .bin or .txt "
                               f"in sparse/0/, sparse/ or the folder itself){poses_hint(folder)}"
                               ) from None
    if split != "train":
        raise CaptureError(f"{folder} is a COLMAP capture: it has one split of views "
                           f"('train'), not '{split}'")
    return read_colmap(folder, longest_side=longest_side)
