"""The volumetric neural material: world position -> (kd, ks, normal), on two engines.

nvdiffrec's first-pass material: the position, normalised to the material's box, goes through a
multiresolution hash encoding and a small MLP to 9 outputs, each squashed by a sigmoid into its
channel's range: ``kd`` in ``[kd_min, kd_max]`` (default [0, 1]^3), ``ks`` (occlusion,
roughness, metallic) in ``[ks_min, ks_max]`` (default ``[0, 0.08, 0]`` .. ``[1, 1, 1]``),
``normal`` in ``[normal_min, normal_max]`` (default ``[-1, -1, 0]`` .. ``[1, 1, 1]``; a
tangent-space perturbation, not normalised here).

Engines (the same function, the same parameter vectors):

- ``"torch"``: ``hashgrid.HashGridEncoding`` + ``mlp.MLP``, on any device (CPU, CUDA, MPS);
- ``"tcnn"``: ``tinycudann.Encoding`` (HashGrid) + ``tinycudann.Network`` (FullyFusedMLP, half
  precision inside), both with float32 master parameters. ``grid_precision`` sets the hash
  grid's computation: "float32" (the default) or "float16" (nvdiffrec's, tiny-cuda-nn's
  preferred; on an H200 no faster, and its backward pass rounds most of the tiny gradients of
  a mean loss to zero: docs/BENCHMARKS.md). The torch engine computes in float32 either way.

Both keep their parameters as ``encoding.params`` and ``mlp.params`` in tiny-cuda-nn's layout, so
a ``state_dict`` saved on one engine loads on the other. Choice, in order of precedence: an
explicit ``impl`` ("torch" or "tcnn"); ``$DIFFREC_NEURAL`` (same values or "auto"); "auto" =
tinycudann on a CUDA device when it imports, torch otherwise (``diffrec.engines.NEURAL``, the
same rules as the rasterizer's).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import NamedTuple

import torch

from diffrec.devices import default_device
from diffrec.engines import NEURAL, EngineUnavailableError
from diffrec.neural.hashgrid import HashGridConfig, HashGridEncoding, uniform_params
from diffrec.neural.mlp import MLP, MLPConfig, xavier_uniform_params
from diffrec.shading.ranges import KD_RANGE, KS_RANGE, NORMAL_RANGE

log = logging.getLogger(__name__)

N_OUTPUTS = 9
EVAL_CHUNK = 1 << 18
_GRID_DTYPES = {"float16": torch.float16, "float32": torch.float32}


class NeuralMaterialSample(NamedTuple):
    """Material channels at a batch of points, each ``[..., 3]`` float32."""

    kd: torch.Tensor
    ks: torch.Tensor
    normal: torch.Tensor


def _vec3(name: str, value) -> torch.Tensor:
    out = torch.as_tensor(value, dtype=torch.float32).flatten().cpu()
    if out.shape != (3,) or not torch.isfinite(out).all():
        raise ValueError(f"{name} must be 3 finite numbers, got {value!r}")
    return out


class NeuralMaterial(torch.nn.Module):
    """``material(points)``: world positions ``[..., 3]`` -> ``NeuralMaterialSample``.

    ``bbox_min``/``bbox_max``: the box (world units) the hash grid spans; points outside are
    clamped to it. ``grid_precision``: "float16" or "float32", tiny-cuda-nn's hash grid only
    (module docstring). ``device`` defaults to ``diffrec.devices.default_device()``. With the same
    seed and device both engines start from the same parameters (hash entries uniform in
    +-1e-4, MLP Xavier-uniform).
    """

    def __init__(
        self,
        bbox_min: Sequence[float] | torch.Tensor,
        bbox_max: Sequence[float] | torch.Tensor,
        impl: str = "auto",
        *,
        kd_min: Sequence[float] = KD_RANGE[0],
        kd_max: Sequence[float] = KD_RANGE[1],
        ks_min: Sequence[float] = KS_RANGE[0],
        ks_max: Sequence[float] = KS_RANGE[1],
        normal_min: Sequence[float] = NORMAL_RANGE[0],
        normal_max: Sequence[float] = NORMAL_RANGE[1],
        grid: HashGridConfig | None = None,
        n_neurons: int = 32,
        n_hidden_layers: int = 2,
        grid_precision: str = "float32",
        device: torch.device | str | None = None,
    ):
        super().__init__()
        if grid_precision not in _GRID_DTYPES:
            raise ValueError(f"grid_precision must be one of {sorted(_GRID_DTYPES)}, "
                             f"got {grid_precision!r}")
        device = default_device() if device is None else torch.device(device)
        lo, hi = _vec3("bbox_min", bbox_min), _vec3("bbox_max", bbox_max)
        if not (hi > lo).all():
            raise ValueError(f"bbox_max must exceed bbox_min on every axis: {lo} .. {hi}")
        ranges = {"kd": (kd_min, kd_max), "ks": (ks_min, ks_max),
                  "normal": (normal_min, normal_max)}
        lows, highs = [], []
        for name, (low, high) in ranges.items():
            low, high = _vec3(f"{name}_min", low), _vec3(f"{name}_max", high)
            if not (high >= low).all():
                raise ValueError(f"{name}_max must be >= {name}_min on every channel: "
                                 f"{low} .. {high}")
            lows.append(low)
            highs.append(high)
        out_min, out_max = torch.cat(lows), torch.cat(highs)
        self.register_buffer("bbox_min", lo.to(device))
        self.register_buffer("bbox_max", hi.to(device))
        self.register_buffer("out_min", out_min.to(device))
        self.register_buffer("out_max", out_max.to(device))

        self.grid_config = grid if grid is not None else HashGridConfig()
        if self.grid_config.n_dims != 3:
            raise ValueError(f"the material's grid must be 3D, not {self.grid_config.n_dims}D")
        self.mlp_config = MLPConfig(
            self.grid_config.n_output_dims, N_OUTPUTS, n_neurons, n_hidden_layers
        )
        self._impl = NEURAL.resolve(device, impl)
        if self._impl == "torch":
            self.encoding = HashGridEncoding(self.grid_config, device=device)
            self.mlp = MLP(self.mlp_config, device=device)
        else:
            self._build_tcnn(device, _GRID_DTYPES[grid_precision])

    def _build_tcnn(self, device: torch.device, grid_dtype: torch.dtype) -> None:
        tcnn = NEURAL.module()
        with torch.cuda.device(device):
            self.encoding = tcnn.Encoding(3, self.grid_config.tcnn_config(), dtype=grid_dtype)
            self.mlp = tcnn.Network(
                self.mlp_config.n_input_dims, N_OUTPUTS, self.mlp_config.tcnn_config()
            )
        for module, config, init in (
            (self.encoding, self.grid_config, uniform_params),
            (self.mlp, self.mlp_config, xavier_uniform_params),
        ):
            if module.params.numel() != config.n_params:
                raise EngineUnavailableError(
                    f"this tinycudann lays out {type(module).__name__} with "
                    f"{module.params.numel()} parameters, diffrec expects {config.n_params}; "
                    f"use impl='torch' ({NEURAL.env_var}=torch)"
                )
            with torch.no_grad():
                module.params.copy_(init(config, device))

    @property
    def impl(self) -> str:
        """The engine in use: "torch" or "tcnn"."""
        return self._impl

    def extra_repr(self) -> str:
        return f"impl={self._impl!r}, bbox={self.bbox_min.tolist()}..{self.bbox_max.tolist()}"

    def normalise(self, points: torch.Tensor) -> torch.Tensor:
        """World positions -> the box's unit cube, clamped to [0, 1]."""
        unit = (points - self.bbox_min) / (self.bbox_max - self.bbox_min)
        return unit.clamp(0.0, 1.0)

    def raw(self, points: torch.Tensor) -> torch.Tensor:
        """``[N, 3]`` world positions -> ``[N, 9]`` float32 network outputs before the sigmoid."""
        unit = self.normalise(points).float().contiguous()
        if unit.shape[0] == 0:
            return unit.new_zeros(0, N_OUTPUTS)
        return self.mlp(self.encoding(unit)).float()

    def forward(self, points: torch.Tensor) -> NeuralMaterialSample:
        if points.ndim < 1 or points.shape[-1] != 3:
            raise ValueError(f"points must be [..., 3], got {tuple(points.shape)}")
        if not points.is_floating_point():
            raise TypeError(f"points must be floating point, got {points.dtype}")
        if not torch.isfinite(points).all():
            raise ValueError("points contain NaN or infinity")
        flat = points.reshape(-1, 3).to(self.bbox_min.device)
        out = torch.sigmoid(self.raw(flat)) * (self.out_max - self.out_min) + self.out_min
        out = out.view(*points.shape[:-1], N_OUTPUTS)
        return NeuralMaterialSample(out[..., 0:3], out[..., 3:6], out[..., 6:9])

    def evaluate(self, points: torch.Tensor, chunk_size: int = EVAL_CHUNK) -> NeuralMaterialSample:
        """``forward`` without gradients, ``chunk_size`` points at a time (texture baking)."""
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        if points.ndim < 1 or points.shape[-1] != 3:
            raise ValueError(f"points must be [..., 3], got {tuple(points.shape)}")
        flat = points.reshape(-1, 3)
        with torch.no_grad():
            parts = [self(chunk) for chunk in flat.split(chunk_size)] or [self(flat)]
        channels = zip(*parts, strict=True)
        return NeuralMaterialSample(
            *(torch.cat(channel).view(*points.shape[:-1], 3) for channel in channels)
        )

    def smoothness(
        self,
        points: torch.Tensor,
        std: float = 0.01,
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-point ``(sum_c |kd(x + eps) - kd(x)|, sum_c |ks(x + eps) - ks(x)|)``,
        ``eps ~ N(0, std^2)`` in world units, from one evaluation at ``x`` and one at ``x + eps``.

        nvdiffrec's albedo-smoothness term and its ks twin: the caller averages them and
        weights them (albedo 0.03, ramped in over the first 500 iterations). ``generator`` (a
        CPU generator) draws the jitter reproducibly. Each is ``points.shape[:-1]``.
        """
        noise = torch.randn(points.shape, generator=generator, dtype=points.dtype)
        here, there = self(points), self(points + noise.to(points.device) * std)
        return ((there.kd - here.kd).abs().sum(dim=-1), (there.ks - here.ks).abs().sum(dim=-1))
