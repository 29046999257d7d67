"""Multiresolution hash encoding (Instant-NGP) in plain torch, bit-compatible with tiny-cuda-nn.

The encoding of Müller et al., "Instant Neural Graphics Primitives with a Multiresolution Hash
Encoding" (SIGGRAPH 2022): ``L`` grids of growing resolution; each grid vertex owns ``F``
trainable features, stored densely when the level's grid fits in its table and in a hash table
otherwise; a point's encoding concatenates, per level, the N-linear interpolation of the features
at the ``2^D`` vertices of its cell.

The same flat parameter vector gives the same encoding here and in tiny-cuda-nn's ``HashGrid``
(``"otype": "HashGrid"``, ``"interpolation": "Linear"``, ``"hash": "CoherentPrime"`` defaults).
The conventions below were read from tiny-cuda-nn's sources (``include/tiny-cuda-nn/
encodings/grid.h`` and ``common_device.h``, NVlabs/tiny-cuda-nn, 2022 to 2026 versions alike)
and its ``DOCUMENTATION.md``; no code was copied.

- Level scale (float32): ``scale_l = exp2(l * log2(per_level_scale)) * base_resolution - 1``
  (``grid_scale``); the ``-1`` makes ``base_resolution`` count vertices, not cells.
- Level resolution: ``res_l = ceil(scale_l) + 1`` vertices per axis (``grid_resolution``).
- Position: ``p = fma(scale_l, x, 0.5)`` (the +0.5 offset staggers the levels, paper Appendix A);
  cell ``floor(p)``, fraction ``p - floor(p)``.
- Table size per level (entries): ``min(next_multiple(res_l^D, 8), 2^log2_hashmap_size)``.
- Index: ``x0 + x1*res + x2*res^2 ...`` (dense) when ``res^D`` fits in the table, else the hash
  ``XOR_d (x_d * pi_d)`` in uint32 with the paper's primes ``pi = (1, 2654435761, 805459861,
  ...)``; either way taken modulo the table size (so the vertices at ``res`` wrap in dense levels).
- Interpolation: corner ``c`` of the cell takes ``x_d + bit_d(c)`` and weight
  ``prod_d (bit_d(c) ? f_d : 1 - f_d)``.
- Memory layout: levels concatenated in order; level ``l`` starts at entry ``offset_l`` (the sum
  of the previous table sizes); entry ``e`` holds its ``F`` features contiguously, so feature
  ``f`` of entry ``e`` of level ``l`` is ``params[(offset_l + e) * F + f]``.
- Output layout: column ``l * F + f``.
- Initialisation: every parameter uniform in ``[-1e-4, 1e-4]``.

Input positions lie in ``[0, 1]^D`` (the caller normalises to the grid's box). Values outside
are clamped here (tiny-cuda-nn would wrap them around the uint32 range; nobody wants that).
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np
import torch

# The hash primes of the paper (Section 3), as tiny-cuda-nn's "CoherentPrime" hash uses them.
HASH_PRIMES = (1, 2654435761, 805459861, 3674653429, 2097192037, 1434869437, 2165219737)
INIT_RANGE = 1e-4
DEFAULT_CHUNK = 1 << 15


@dataclasses.dataclass(frozen=True)
class HashGridConfig:
    """Hash-grid hyper-parameters; defaults are nvdiffrec's (finest level 4096 = 16 * 1.4473^15)."""

    n_levels: int = 16
    n_features_per_level: int = 2
    log2_hashmap_size: int = 19
    base_resolution: int = 16
    per_level_scale: float = math.exp(math.log(4096 / 16) / 15)
    n_dims: int = 3

    def __post_init__(self):
        if not 1 <= self.n_dims <= len(HASH_PRIMES):
            raise ValueError(f"n_dims must be 1..{len(HASH_PRIMES)}, got {self.n_dims}")
        if self.n_levels < 1 or self.n_features_per_level < 1 or self.base_resolution < 1:
            raise ValueError(f"levels, features and base resolution must be >= 1: {self}")
        if not 1 <= self.log2_hashmap_size <= 31:
            raise ValueError(f"log2_hashmap_size must be 1..31, got {self.log2_hashmap_size}")
        if not self.per_level_scale >= 1.0:
            raise ValueError(f"per_level_scale must be >= 1, got {self.per_level_scale}")

    @classmethod
    def from_finest(cls, finest_resolution: int, **kwargs) -> HashGridConfig:
        """A config whose finest level has ``finest_resolution`` (per-level scale derived)."""
        n_levels = kwargs.get("n_levels", cls.n_levels)
        base = kwargs.get("base_resolution", cls.base_resolution)
        scale = math.exp(math.log(finest_resolution / base) / max(n_levels - 1, 1))
        return cls(per_level_scale=scale, **kwargs)

    def tcnn_config(self) -> dict:
        """The tiny-cuda-nn encoding config that computes the same function."""
        return {
            "otype": "HashGrid",
            "n_levels": self.n_levels,
            "n_features_per_level": self.n_features_per_level,
            "log2_hashmap_size": self.log2_hashmap_size,
            "base_resolution": self.base_resolution,
            "per_level_scale": float(self.per_level_scale),
            "interpolation": "Linear",
        }

    @functools.cached_property
    def level_scales(self) -> np.ndarray:
        """``[L]`` float32: ``exp2(l * log2(per_level_scale)) * base_resolution - 1``."""
        log2_scale = np.log2(np.float32(self.per_level_scale))
        levels = np.arange(self.n_levels, dtype=np.float32)
        return np.exp2(levels * log2_scale) * np.float32(self.base_resolution) - np.float32(1)

    @functools.cached_property
    def level_resolutions(self) -> np.ndarray:
        """``[L]`` int64 vertices per axis: ``ceil(scale) + 1``."""
        return np.ceil(self.level_scales).astype(np.int64) + 1

    @functools.cached_property
    def level_vertex_counts(self) -> tuple[int, ...]:
        """``res_l^D`` per level, as Python ints (no overflow)."""
        return tuple(int(r) ** self.n_dims for r in self.level_resolutions)

    @functools.cached_property
    def level_table_sizes(self) -> np.ndarray:
        """``[L]`` int64 entries per level: ``min(next_multiple(res^D, 8), 2^log2_hashmap)``."""
        cap = 1 << self.log2_hashmap_size
        return np.array([min(-(-n // 8) * 8, cap) for n in self.level_vertex_counts], np.int64)

    @functools.cached_property
    def level_hashed(self) -> np.ndarray:
        """``[L]`` bool: True where the level's dense grid exceeds its table (hash indexing)."""
        sizes = self.level_table_sizes
        pairs = zip(self.level_vertex_counts, sizes, strict=True)
        return np.array([n > s for n, s in pairs], dtype=bool)

    @functools.cached_property
    def level_offsets(self) -> np.ndarray:
        """``[L + 1]`` int64: first entry of each level; the last element is the entry count."""
        return np.concatenate([[0], np.cumsum(self.level_table_sizes)]).astype(np.int64)

    @property
    def n_params(self) -> int:
        """Length of the flat parameter vector: entries x features per level."""
        return int(self.level_offsets[-1]) * self.n_features_per_level

    @property
    def n_output_dims(self) -> int:
        return self.n_levels * self.n_features_per_level


def uniform_params(config: HashGridConfig, device=None) -> torch.Tensor:
    """A flat float32 parameter vector, uniform in ``[-1e-4, 1e-4]`` as tiny-cuda-nn initialises."""
    return torch.empty(config.n_params, device=device).uniform_(-INIT_RANGE, INIT_RANGE)


def _grid_positions(x: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """``[N, L, D]`` = ``scale_l * x + 0.5``, rounded once like tiny-cuda-nn's ``fmaf``.

    For float32 input the product-sum is formed in float64 (exact: 24 x 24 bits fit in 53) and
    rounded to float32, which is what a fused multiply-add does. MPS has no float64, so there it
    rounds twice (off by one ulp at worst, which only matters exactly on a cell boundary).
    """
    if x.dtype == torch.float32 and x.device.type != "mps":
        wide = x.double()[:, None, :] * scales.double()[None, :, None] + 0.5
        return wide.float()
    return x[:, None, :] * scales.to(x.dtype)[None, :, None] + 0.5


class HashGridEncoding(torch.nn.Module):
    """``encoding(x)``: ``[N, D]`` positions in [0, 1] -> ``[N, L * F]`` features.

    ``params`` is the flat tiny-cuda-nn parameter vector (``config.n_params`` floats); copy it into
    ``tinycudann.Encoding(D, config.tcnn_config()).params`` to get the same encoding there.
    Differentiable w.r.t. ``params`` and ``x``; the dtype follows ``params`` (float32, or float64
    for gradient checks). Points are processed ``chunk_size`` at a time.
    """

    def __init__(self, config: HashGridConfig | None = None, *, chunk_size: int = DEFAULT_CHUNK,
                 device: torch.device | str | None = None):
        super().__init__()
        self.config = config if config is not None else HashGridConfig()
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        self.chunk_size = chunk_size
        cfg = self.config
        self.params = torch.nn.Parameter(uniform_params(cfg, device))
        as_buffer = functools.partial(torch.as_tensor, device=device)
        self.register_buffer("scales", as_buffer(cfg.level_scales), persistent=False)
        self.register_buffer("resolutions", as_buffer(cfg.level_resolutions), persistent=False)
        self.register_buffer("table_sizes", as_buffer(cfg.level_table_sizes), persistent=False)
        self.register_buffer("hashed", as_buffer(cfg.level_hashed), persistent=False)
        self.register_buffer("offsets", as_buffer(cfg.level_offsets[:-1]), persistent=False)
        self.register_buffer("steps", torch.tensor([0, 1], device=device), persistent=False)
        hashed = cfg.level_hashed.tolist()
        starts = [0, *(i for i in range(1, len(hashed)) if hashed[i] != hashed[i - 1])]
        stops = [*starts[1:], len(hashed)]
        # Runs of consecutive levels indexed the same way (dense levels come first).
        self.level_groups = [(hashed[a], slice(a, b)) for a, b in zip(starts, stops, strict=True)]

    @property
    def n_output_dims(self) -> int:
        return self.config.n_output_dims

    def extra_repr(self) -> str:
        return f"{self.config}, n_params={self.config.n_params}"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.ndim != 2 or x.shape[1] != self.config.n_dims:
            raise ValueError(f"positions must be [N, {self.config.n_dims}], got {tuple(x.shape)}")
        if not x.is_floating_point():
            raise TypeError(f"positions must be floating point, got {x.dtype}")
        x = x.to(self.params.dtype).clamp(0.0, 1.0)
        chunks = [self._encode(part) for part in x.split(self.chunk_size)]
        return torch.cat(chunks) if len(chunks) > 1 else chunks[0]

    def _encode(self, x: torch.Tensor) -> torch.Tensor:
        """One chunk: ``[n, D]`` -> ``[n, L * F]``.

        Per dimension, the two candidate coordinates of a cell (``x_d`` and ``x_d + 1``) give two
        weights and two index terms ``[n, L, 2]``; the ``2^D`` corners are their outer
        combinations (product of weights; sum of dense terms or XOR of hashed terms), so only the
        last few operations run at full corner width.
        """
        n = x.shape[0]
        cfg = self.config
        pos = _grid_positions(x, self.scales)  # [n, L, D]
        cell = torch.floor(pos.detach())
        frac = pos - cell  # the gradient reaches x through pos
        coords = cell.long()[..., None] + self.steps  # [n, L, D, 2]
        index = self._corner_index(coords)  # [n, L, 2^D] global entry numbers
        weight = self._corner_weight(torch.stack([1.0 - frac, frac], dim=-1))  # [n, L, 2^D]
        table = self.params.view(-1, cfg.n_features_per_level)
        # index_select: its backward (index_add) is several times faster on CPU than embedding's.
        features = table.index_select(0, index.reshape(-1))
        features = features.view(*index.shape, cfg.n_features_per_level)  # [n, L, 2^D, F]
        return (weight[..., None, :] @ features).reshape(n, cfg.n_output_dims)

    def _corners(self, terms: torch.Tensor, combine) -> torch.Tensor:
        """``[n, L, D, 2]`` per-dimension terms -> ``[n, L, 2^D]`` by ``combine`` over dims."""
        n, levels, dims, _ = terms.shape
        out = terms[:, :, 0]
        for d in range(1, dims):
            out = combine(out[..., None], terms[:, :, d].view(n, levels, *([1] * d), 2))
        return out.reshape(n, levels, 1 << dims)

    def _corner_weight(self, weights: torch.Tensor) -> torch.Tensor:
        return self._corners(weights, torch.mul)

    def _corner_index(self, coords: torch.Tensor) -> torch.Tensor:
        """``[n, L, D, 2]`` vertex coordinates -> ``[n, L, 2^D]`` entry numbers in ``params``.

        Dense levels: ``sum_d x_d * res^d``, below ``2 * table`` for in-range input, so the modulo
        (which wraps the vertices at ``res``) is one conditional subtraction. Hashed levels:
        ``XOR_d (x_d * pi_d)`` modulo the table, which is then ``2^log2_hashmap_size``, so the
        mask can be applied per term.
        """
        dims = self.config.n_dims
        out = coords.new_empty((*coords.shape[:2], 1 << dims))
        strides = self.resolutions[:, None] ** torch.arange(dims, device=coords.device)
        primes = coords.new_tensor(HASH_PRIMES[:dims])[:, None]
        for hashed, levels in self.level_groups:
            size = self.table_sizes[levels][:, None]
            c = coords[:, levels]
            if hashed:
                terms = (c * primes) & (size[..., None] - 1)  # table size 2^k divides 2^32
                index = self._corners(terms, torch.bitwise_xor)
            else:
                index = self._corners(c * strides[levels][..., None], torch.add)
                index = index - (index >= size) * size
            out[:, levels] = index + self.offsets[levels][:, None]
        return out
