"""The rule for which of a mesh's own UVs the server keeps (``diffrec.protocol.uv_layout``),
shared with the add-on: its texel counts against a brute-force reference, and its verdicts on
layouts an artist makes (mirrored halves, tiles, collapsed charts)."""

import numpy as np
import pytest
from helpers.uv_reference import cover_counts

from diffrec.protocol import uv_layout

RESOLUTION = 64


def _soup(count: int, seed: int, scale: float = 0.3) -> np.ndarray:
    """``count`` random triangles [T, 3, 2] inside [0, 1]², of about ``scale`` a side."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(scale, 1 - scale, (count, 1, 2))
    return centres + rng.uniform(-scale / 2, scale / 2, (count, 3, 2))


def _reference(uv_corners: np.ndarray, resolution: int) -> tuple[int, int]:
    counts = cover_counts(uv_corners.reshape(-1, 2), np.arange(uv_corners.size // 2)
                          .reshape(-1, 3), resolution)
    return int((counts > 0).sum()), int((counts > 1).sum())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_texel_counts_match_a_brute_force_count_of_centres_in_triangles(seed):
    soup = _soup(40, seed)
    covered, overlapped = uv_layout.texel_overlap(soup, RESOLUTION)
    assert (covered, overlapped) == _reference(soup, RESOLUTION)
    assert 0 < overlapped < covered  # a soup this dense overlaps, not everywhere


def test_counts_do_not_depend_on_chunking_or_orientation(monkeypatch):
    soup = _soup(60, 3)
    whole = uv_layout.texel_overlap(soup, RESOLUTION)
    assert uv_layout.texel_overlap(soup[:, ::-1], RESOLUTION) == whole  # clockwise
    monkeypatch.setattr(uv_layout, "_CANDIDATES_PER_CHUNK", 37)
    assert uv_layout.texel_overlap(soup, RESOLUTION) == whole


def test_neighbours_sharing_edges_do_not_overlap_and_a_stacked_copy_overlaps_all():
    """A square of two triangles covers its texels once; the same square twice covers each
    of them twice; its area in texels is what it covers."""
    square = np.array([[[0.1, 0.1], [0.6, 0.1], [0.6, 0.6]],
                       [[0.1, 0.1], [0.6, 0.6], [0.1, 0.6]]])
    covered, overlapped = uv_layout.texel_overlap(square, 100)
    assert (covered, overlapped) == (50 * 50, 0)
    assert uv_layout.texel_overlap(np.concatenate([square, square]), 100) == (2500, 2500)


@pytest.mark.parametrize("winding", ["counter-clockwise", "clockwise", "mixed"])
def test_a_fan_through_texel_centres_covers_each_of_its_texels_once(winding):
    """Eight triangles meeting at a texel centre, their edges along a row, a column and both
    diagonals through texel centres, their outer corners on texel centres too: each centre on
    a shared edge or at the shared vertex belongs to one triangle, and the square they make,
    8 texels a side, covers 64 texels as a half-open square does."""
    resolution = 16
    centre = np.array([8.0, 8.0])
    ring = [(4, 0), (4, 4), (0, 4), (-4, 4), (-4, 0), (-4, -4), (0, -4), (4, -4)]
    fan = np.array([[centre, centre + ring[k], centre + ring[(k + 1) % 8]] for k in range(8)])
    if winding != "counter-clockwise":
        turned = slice(None) if winding == "clockwise" else slice(None, None, 2)
        fan[turned] = fan[turned, ::-1]
    uvs = (fan + 0.5) / resolution  # texel (x, y)'s centre at ((x + 0.5) / R, (y + 0.5) / R)
    assert uv_layout.texel_overlap(uvs, resolution) == (64, 0)


def test_uvs_wrap_by_whole_tiles_and_what_sticks_out_is_not_counted():
    """Triangles anywhere in [0, 1)², some across its edges, moved by whole tiles: counted
    as the brute force counts them moved back so that their centroids lie in [0, 1)²."""
    rng = np.random.default_rng(4)
    soup = rng.uniform(0, 1, (30, 1, 2)) + rng.uniform(-0.15, 0.15, (30, 3, 2))
    back = soup - np.floor(soup.mean(1, keepdims=True))
    assert uv_layout.texel_overlap(soup, RESOLUTION) == _reference(back, RESOLUTION)
    shift = rng.integers(-3, 4, (30, 1, 2))
    assert uv_layout.texel_overlap(soup + shift, RESOLUTION) == _reference(back, RESOLUTION)
    huge = np.array([[[-5.0, -5.0], [6.0, -5.0], [0.5, 7.0]]])  # clamped to two tiles away
    assert uv_layout.texel_overlap(huge, RESOLUTION) == (RESOLUTION ** 2, 0)
    with pytest.raises(ValueError, match="exact up to 65536 texels"):
        uv_layout.texel_overlap(soup, 1 << 17)


def test_counting_stops_once_enough_texels_overlap():
    soup = _soup(400, 6, scale=0.45)
    covered, overlapped = uv_layout.texel_overlap(soup, RESOLUTION)
    monkey = uv_layout._CANDIDATES_PER_CHUNK
    try:
        uv_layout._CANDIDATES_PER_CHUNK = 500
        early = uv_layout.texel_overlap(soup, RESOLUTION, enough=10)
    finally:
        uv_layout._CANDIDATES_PER_CHUNK = monkey
    assert 10 < early[1] < overlapped and early[0] <= covered


def test_a_count_cut_short_is_said_to_be_a_lower_bound(monkeypatch):
    """Six copies of the whole square, counted in small chunks: the count stops past 1 % of
    the texture, and the phrase says 'or more' of the texture, not of what was covered."""
    corners, uvs = _grid()
    monkeypatch.setattr(uv_layout, "_CANDIDATES_PER_CHUNK", 4096)
    (found,) = uv_layout.problems(np.concatenate([corners] * 6), np.concatenate([uvs] * 6))
    count, rest = found.split(" ", 1)
    assert int(count) < 256 * 256, found  # every texel overlaps: the count stopped short
    assert rest.startswith("texels or more (at 256²)"), found
    assert found.endswith("more than 1% of the texture"), found


def _grid(cells: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """A flat square of ``cells``² quads in 3D [T, 3, 3] and its UVs [T, 3, 2] spanning
    [0, 1]²."""
    step = 1 / cells
    uv = []
    for i in range(cells):
        for j in range(cells):
            a, b = np.array([i, j]) * step, np.array([i + 1, j]) * step
            c, d = np.array([i + 1, j + 1]) * step, np.array([i, j + 1]) * step
            uv += [[a, b, c], [a, c, d]]
    uv = np.array(uv)
    return np.concatenate([uv * 2.0, np.zeros_like(uv[..., :1])], -1), uv


def test_a_clean_layout_has_no_problems_and_each_fault_is_named():
    corners, uvs = _grid()
    assert uv_layout.problems(corners, uvs) == []
    mirrored = uvs.copy()
    mirrored[..., 0] = np.abs(2 * mirrored[..., 0] - 1)  # both halves on the same texels
    (found,) = uv_layout.problems(corners, mirrored)
    assert "belong to more than one triangle" in found, found
    outside, tiled = uv_layout.problems(corners, uvs * 1.5)  # past the wrap margin
    assert "outside [0, 1]" in outside and "more than one triangle" in tiled
    collapsed = uvs.copy()
    collapsed[:8] = 0.5  # half the surface in one point
    assert any("no UV area" in p for p in uv_layout.problems(corners, collapsed))
    assert uv_layout.problems(corners, uvs * np.nan) == ["UVs are not finite"]


def test_a_sliver_of_overlap_under_the_limit_is_kept():
    """Two charts whose borders overlap by a texel's width: well under 1 % of the covered
    texels, as packers leave at times."""
    corners, uvs = _grid()
    nudged = uvs.copy()
    nudged[uvs[..., 0].mean(-1) > 0.5, :, 0] -= 1.5 / 256  # the right half's triangles
    covered, overlapped = uv_layout.texel_overlap(nudged, 256)
    assert 0 < overlapped < uv_layout.MAX_OVERLAP * covered
    assert uv_layout.problems(corners, nudged) == []
