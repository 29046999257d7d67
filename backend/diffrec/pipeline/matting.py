"""Foreground masks from a learned matting model, for users who install one: the ``rembg``
package (``pip install "diffrec[matting]"``), whose model rembg downloads on first use (into
``~/.u2net``, or ``U2NET_HOME``). Nothing of diffrec needs it: the masks it makes by default
come from the photos and their cameras alone (``diffrec.pipeline.auto_masks``); this is the
``mask_maker`` "rembg" setting's per-photo segmentation, which ``auto_masks`` then makes
consistent across views by carving, as it does GrabCut's.
"""

from __future__ import annotations

import logging

import numpy as np

from diffrec.errors import UserError

__all__ = ["INSTALL", "matte"]

log = logging.getLogger(__name__)

INSTALL = 'pip install "diffrec[matting]" (the rembg package and ONNX Runtime)'
THRESHOLD = 128  # of the model's 8-bit mask: at least this is the object


def matte(images: np.ndarray) -> np.ndarray:
    """Masks ``[N, H, W]`` (bool, True on the object) of the sRGB photos ``images [N, H, W,
    3]`` (uint8), one call of rembg's default model per photo. ``UserError`` where rembg is
    not installed or its model cannot be loaded (not yet downloaded, no network)."""
    try:
        import rembg
        from PIL import Image
    except ImportError:
        raise UserError(f"mask_maker rembg needs the rembg package: {INSTALL}") from None
    try:
        session = rembg.new_session()
    except Exception as error:  # rembg downloads the model on first use: any failure there
        raise UserError(f"rembg could not load its matting model (it downloads it on first "
                        f"use, into ~/.u2net or U2NET_HOME): {error}") from None
    masks = []
    for index, image in enumerate(images):
        mask = rembg.remove(Image.fromarray(image), session=session, only_mask=True)
        masks.append(np.asarray(mask.convert("L")) >= THRESHOLD)
        log.info("masks: %d of %d photos matted by rembg", index + 1, len(images))
    return np.stack(masks)
