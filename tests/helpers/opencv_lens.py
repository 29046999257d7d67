"""OpenCV's inverse of a lens, iterated to convergence, as either major version spells it: the
independent reference the lens tests compare diffrec's undistortion with."""

from __future__ import annotations

import cv2
import numpy as np

CRITERIA = (cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, 100, 1e-12)


def undistort_points(pixels: np.ndarray, k: np.ndarray, coefficients: np.ndarray,
                     p: np.ndarray | None = None) -> np.ndarray:
    """``pixels`` ``[N, 1, 2]`` of the photo of camera matrix ``k`` and OpenCV distortion
    ``coefficients``, undistorted: normalised coordinates, or pixels of camera matrix ``p``
    where given. OpenCV 4 iterates in ``undistortPointsIter``; OpenCV 5 took its criteria
    into ``undistortPoints``."""
    if hasattr(cv2, "undistortPointsIter"):
        return cv2.undistortPointsIter(pixels, k, coefficients, None, p, CRITERIA)
    return cv2.undistortPoints(pixels, k, coefficients, R=None, P=p, criteria=CRITERIA)
