"""The torch hash grid against a per-point reference written from tiny-cuda-nn's documented rules.

The reference below is deliberately naive (Python ints, one point and one corner at a time) and
shares no code with ``diffrec.neural.hashgrid``. Rules (tiny-cuda-nn grid.h / common_device.h,
Instant-NGP paper): scale = exp2(l * log2(b)) * N_min - 1 in float32; res = ceil(scale) + 1;
p = fma(scale, x, 0.5); table = min(next_multiple(res^D, 8), 2^k); dense index when res^D fits,
else XOR of coordinate x prime (uint32); modulo the table; levels concatenated, F features per
entry contiguous.
"""

import math

import numpy as np
import pytest
import torch

from diffrec.neural.hashgrid import HashGridConfig, HashGridEncoding

PRIMES = (1, 2654435761, 805459861)
TINY = HashGridConfig(n_levels=4, n_features_per_level=2, log2_hashmap_size=9, base_resolution=3,
                      per_level_scale=2.3)


def ref_levels(cfg):
    """Per level: (scale as float, res, table entries, first entry)."""
    f32 = np.float32
    log2_b = np.log2(f32(cfg.per_level_scale))
    levels, offset = [], 0
    for level in range(cfg.n_levels):
        scale = f32(f32(np.exp2(f32(level) * log2_b)) * f32(cfg.base_resolution) - f32(1))
        res = math.ceil(float(scale)) + 1
        entries = min((res**cfg.n_dims + 7) // 8 * 8, 2**cfg.log2_hashmap_size)
        levels.append((float(scale), res, entries, offset))
        offset += entries
    return levels


def ref_index(coord, res, entries):
    if res ** len(coord) <= entries:
        index = sum(c * res**d for d, c in enumerate(coord)) % 2**32
    else:
        index = 0
        for d, c in enumerate(coord):
            index ^= (c * PRIMES[d]) % 2**32
    return index % entries


def ref_encode(cfg, params, x):
    """One point ``x`` (floats in [0, 1]) -> list of L * F floats; params: float64 numpy."""
    out = []
    feats = cfg.n_features_per_level
    for scale, res, entries, offset in ref_levels(cfg):
        pos = [float(np.float32(scale * float(np.float32(xi)) + 0.5)) for xi in x]  # fma, float32
        cell = [math.floor(p) for p in pos]
        frac = [p - c for p, c in zip(pos, cell, strict=True)]
        acc = [0.0] * feats
        for corner in range(2 ** len(x)):
            bits = [(corner >> d) & 1 for d in range(len(x))]
            weight = math.prod(f if b else 1 - f for f, b in zip(frac, bits, strict=True))
            entry = offset + ref_index([c + b for c, b in zip(cell, bits, strict=True)], res,
                                       entries)
            for f in range(feats):
                acc[f] += weight * params[entry * feats + f]
        out.extend(acc)
    return out


@pytest.mark.parametrize("cfg", [TINY, HashGridConfig()], ids=["tiny", "nvdiffrec"])
def test_level_layout_follows_the_documented_formulas(cfg):
    ref = ref_levels(cfg)
    np.testing.assert_array_equal(cfg.level_resolutions, [r[1] for r in ref])
    np.testing.assert_array_equal(cfg.level_table_sizes, [r[2] for r in ref])
    np.testing.assert_array_equal(cfg.level_offsets[:-1], [r[3] for r in ref])
    assert cfg.n_params == (ref[-1][3] + ref[-1][2]) * cfg.n_features_per_level
    # dense exactly where the level's vertices fit its table
    np.testing.assert_array_equal(cfg.level_hashed, [r[1] ** 3 > r[2] for r in ref])


def test_nvdiffrec_levels_run_from_16_to_4096():
    cfg = HashGridConfig()
    res = cfg.level_resolutions
    assert res[0] == 16 and res[-1] == 4096
    # res^3 <= 2^19 (dense) holds for res <= 80: levels 0-4 (16..71) dense, the rest hashed
    assert cfg.level_hashed.tolist() == [r > 80 for r in res.tolist()]
    assert cfg.level_hashed.tolist() == [False] * 5 + [True] * 11


def test_level_scales_are_robust_to_exp2_rounding():
    """ceil(scale) must not depend on the last bits of exp2f, which can differ between CPU and GPU:
    every scale is an exact integer (level 0) or several float32 ulps away from one."""
    scales = HashGridConfig().level_scales
    assert scales[0] == 15.0
    gap = np.abs(scales[1:] - np.round(scales[1:]))
    assert (gap > 4 * np.spacing(scales[1:])).all()


@pytest.mark.parametrize("cfg", [TINY, HashGridConfig()], ids=["tiny", "nvdiffrec"])
def test_encoding_matches_reference(cfg):
    enc = HashGridEncoding(cfg)
    with torch.no_grad():
        enc.params.uniform_(-1.0, 1.0)
    x = torch.rand(12, 3)
    x[0] = 0.0
    x[1] = 1.0  # the +1 corners sit at res: dense levels wrap them around the table
    x[2] = torch.tensor([0.0, 0.5, 1.0])
    got = enc(x).detach().double().numpy()
    params = enc.params.detach().double().numpy()
    want = np.array([ref_encode(cfg, params, xi.tolist()) for xi in x])
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-6)


@pytest.mark.parametrize("cfg", [TINY, HashGridConfig()], ids=["tiny", "nvdiffrec"])
def test_grid_vertices_return_the_stored_entry(cfg):
    """With feature 0 of every entry set to its own entry number, a point on a vertex of level l
    reads back exactly the entry that the documented index rule picks for that vertex."""
    enc = HashGridEncoding(cfg).double()
    n_entries = cfg.n_params // cfg.n_features_per_level
    with torch.no_grad():
        enc.params.view(n_entries, -1)[:, 0] = torch.arange(n_entries, dtype=torch.float64)
        enc.params.view(n_entries, -1)[:, 1] = 0.5
    rng = np.random.default_rng(1)
    for level, (scale, res, entries, offset) in enumerate(ref_levels(cfg)):
        top = math.floor(scale + 0.5)  # the largest vertex coordinate reachable from x <= 1
        for _ in range(4):
            vertex = rng.integers(1, top + 1, size=3)
            x = torch.tensor((vertex - 0.5) / scale, dtype=torch.float64)[None]
            out = enc(x)[0, level * 2 : level * 2 + 2]
            want = offset + ref_index(vertex.tolist(), res, entries)
            assert round(out[0].item()) == want
            assert out[0].item() == pytest.approx(want, abs=1e-5)
            assert out[1].item() == pytest.approx(0.5, abs=1e-12)


def test_vertex_exact_in_float32():
    """Where the vertex position is exactly representable (level 0, scale 16), the float32
    encoding returns the stored features bit for bit."""
    cfg = HashGridConfig(n_levels=1, base_resolution=17, log2_hashmap_size=16)
    enc = HashGridEncoding(cfg)
    with torch.no_grad():
        enc.params.uniform_(-1, 1)
    vertex = [3, 9, 14]
    x = torch.tensor([[(v - 0.5) / 16 for v in vertex]])
    entry = ref_index(vertex, 17, cfg.level_table_sizes[0])
    assert torch.equal(enc(x)[0], enc.params.detach().view(-1, 2)[entry])


def test_cell_centre_is_the_mean_of_its_corners_and_axes_are_linear():
    enc = HashGridEncoding(TINY).double()
    with torch.no_grad():
        enc.params.uniform_(-1, 1)
    table = enc.params.detach().view(-1, 2)
    level = 2
    scale, res, entries, offset = ref_levels(TINY)[level]
    cell = np.array([2, 5, 7])
    centre = torch.tensor((cell + 0.5 - 0.5) / scale)[None]  # pos = cell + 0.5 exactly-ish
    corners = [offset + ref_index((cell + [(c >> d) & 1 for d in range(3)]).tolist(), res, entries)
               for c in range(8)]
    got = enc(centre)[0, level * 2 : level * 2 + 2]
    torch.testing.assert_close(got, table[corners].mean(dim=0), rtol=0, atol=1e-12)
    # inside one cell the encoding is linear along each axis: the midpoint is the mean of the ends
    a = torch.tensor((cell + np.array([0.1, 0.3, 0.6]) - 0.5) / scale)
    b = a + torch.tensor([0.7, 0.0, 0.0]) / scale
    values = enc(torch.stack([a, (a + b) / 2, b]))[:, level * 2 : level * 2 + 2]
    torch.testing.assert_close(values[1], (values[0] + values[2]) / 2, rtol=0, atol=1e-12)


def test_gradcheck_params_and_positions():
    # level 0 dense (3^3 vertices), level 1 hashed (7^3 > 64 entries)
    cfg = HashGridConfig(n_levels=2, log2_hashmap_size=6, base_resolution=3, per_level_scale=2.3)
    assert cfg.level_hashed.tolist() == [False, True]
    enc = HashGridEncoding(cfg).double()
    x = (torch.rand(6, 3, dtype=torch.float64) * 0.9 + 0.05).requires_grad_()
    params = torch.empty_like(enc.params).uniform_(-1, 1).requires_grad_()

    def encode(p, positions):
        return torch.func.functional_call(enc, {"params": p}, (positions,))

    assert torch.autograd.gradcheck(encode, (params, x), eps=1e-7, atol=1e-6)


def test_chunks_and_one_shot_agree_and_outside_points_clamp():
    enc = HashGridEncoding(TINY, chunk_size=7)
    whole = HashGridEncoding(TINY, chunk_size=1000)
    whole.load_state_dict(enc.state_dict())
    x = torch.rand(50, 3)
    assert torch.equal(enc(x), whole(x))
    outside = torch.tensor([[-0.5, 0.3, 1.7]])
    assert torch.equal(enc(outside), enc(torch.tensor([[0.0, 0.3, 1.0]])))
    assert enc(torch.zeros(0, 3)).shape == (0, TINY.n_output_dims)


def test_initialisation_is_uniform_within_1e_4():
    params = HashGridEncoding(HashGridConfig(n_levels=2, base_resolution=32)).params.detach()
    assert params.abs().max() <= 1e-4
    assert params.min() < -0.99e-4 and params.max() > 0.99e-4
    assert params.std().item() == pytest.approx(1e-4 / math.sqrt(3), rel=0.02)


def test_bad_input_is_explained():
    enc = HashGridEncoding(TINY)
    with pytest.raises(ValueError, match=r"\[N, 3\]"):
        enc(torch.rand(4, 2))
    with pytest.raises(TypeError, match="floating"):
        enc(torch.ones(4, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="per_level_scale"):
        HashGridConfig(per_level_scale=0.5)


def test_tcnn_config_names_the_same_grid():
    cfg = HashGridConfig()
    tc = cfg.tcnn_config()
    assert tc["otype"] == "HashGrid" and tc["interpolation"] == "Linear"
    assert (tc["n_levels"], tc["n_features_per_level"], tc["log2_hashmap_size"]) == (16, 2, 19)
    assert tc["base_resolution"] == 16
    assert tc["per_level_scale"] == pytest.approx(2 ** (8 / 15), rel=1e-12)
