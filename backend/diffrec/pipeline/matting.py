"""Foreground masks from a learned matting model, for users who install one: U²-Net
(Apache-2.0) through the ``rembg`` package (``pip install "diffrec[matting]"``), which
downloads the model on first use into its model folder (``U2NET_HOME`` where set). Nothing of
diffrec needs it: by default masks come from the photos and their cameras alone
(``diffrec.pipeline.auto_masks``, GrabCut); this is the ``mask_maker`` "rembg" source
option's per-photo segmentation, which ``auto_masks`` then makes consistent across views by
carving, as it does GrabCut's.
"""

from __future__ import annotations

import logging

import numpy as np

from diffrec.errors import UserError

__all__ = ["INSTALL", "MASK_MAKERS", "MODEL", "matte"]

log = logging.getLogger(__name__)

MASK_MAKERS = ("grabcut", "rembg")
"""How each photo without a mask is first segmented: GrabCut seeded by the cameras
(``auto_masks``) or rembg's model (``matte``)."""
INSTALL = 'pip install "diffrec[matting]" (the rembg package and ONNX Runtime)'
MODEL = "u2net"
"""rembg's model, named: its default changes between releases (recent ones default to a model
of another licence, some 1 GB)."""
THRESHOLD = 128  # of the model's 8-bit mask: at least this is the object


def matte(images: np.ndarray) -> np.ndarray:
    """Masks ``[N, H, W]`` (bool, True on the object) of the sRGB photos ``images [N, H, W,
    3]`` (uint8), one call of rembg's ``MODEL`` per photo. ``UserError`` where rembg (or
    ONNX Runtime, without which recent rembg exits on import) is not installed, or where its
    model cannot be loaded (not yet downloaded, no network)."""
    try:
        import rembg
        from PIL import Image
    except (ImportError, SystemExit):
        raise UserError(f"mask_maker rembg needs the rembg package: {INSTALL}") from None
    try:
        session = rembg.new_session(MODEL)
    except Exception as error:  # rembg downloads the model on first use: any failure there
        reason = next(iter(str(error).splitlines()), "") or type(error).__name__
        raise UserError(f"rembg could not load its model {MODEL} (it downloads it on first "
                        f"use: run once with a network, or use mask_maker grabcut): "
                        f"{reason}") from None
    log.info("masks: each of %d photos matted by rembg's %s", len(images), MODEL)
    masks = []
    for index, image in enumerate(images):
        mask = rembg.remove(Image.fromarray(image), session=session, only_mask=True)
        masks.append(np.asarray(mask.convert("L")) >= THRESHOLD)
        log.debug("masks: %d of %d photos matted", index + 1, len(images))
    return np.stack(masks)
