"""A small bias-free ReLU MLP whose parameters are laid out like tiny-cuda-nn's FullyFusedMLP.

``params`` is one flat vector in tiny-cuda-nn's order (read from ``src/fully_fused_mlp.cu`` and
``include/tiny-cuda-nn/networks/fully_fused_mlp.h``, NVlabs/tiny-cuda-nn; no code copied), so it
can be copied to and from ``tinycudann.Network(n_in, n_out, config.tcnn_config()).params``:

- ``n_hidden_layers`` hidden layers of ``n_neurons`` (tcnn's ``n_hidden_layers``; the number of
  weight matrices is ``n_hidden_layers + 1``), ReLU after each hidden layer, no output
  activation, no biases;
- the matrices, in order: input ``[W, in_pad]``, ``n_hidden_layers - 1`` hidden ``[W, W]``,
  output ``[out_pad, W]``; each row-major with rows = outputs (the layout of
  ``torch.nn.Linear.weight``), concatenated;
- ``out_pad = next_multiple(n_output_dims, 16)``: FullyFusedMLP computes 16-aligned outputs and
  the torch bindings slice the first ``n_output_dims``; the padding rows are parameters that
  affect nothing (their gradient is zero);
- ``in_pad = next_multiple(n_input_dims, 16)``: a standalone ``tinycudann.Network`` feeds its
  input through an Identity encoding that pads with ones, so the padding columns act as a bias;
  this module feeds ones there too, so the function is the same for any parameter vector (the
  hash grid's 32 outputs need no padding);
- initialisation: Xavier-uniform per matrix, bound ``sqrt(6 / (fan_in + fan_out))`` on the padded
  shape, as FullyFusedMLP initialises itself.
"""

from __future__ import annotations

import dataclasses
import math

import torch

ALIGNMENT = 16  # FullyFusedMLP works on 16x16x16 tensor-core tiles
TCNN_WIDTHS = (16, 32, 64, 128)  # the widths FullyFusedMLP is compiled for


def next_multiple(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


@dataclasses.dataclass(frozen=True)
class MLPConfig:
    """Shape of the MLP; defaults are nvdiffrec's material MLP (32 wide, 2 hidden layers)."""

    n_input_dims: int
    n_output_dims: int
    n_neurons: int = 32
    n_hidden_layers: int = 2

    def __post_init__(self):
        if min(self.n_input_dims, self.n_output_dims, self.n_neurons, self.n_hidden_layers) < 1:
            raise ValueError(f"every MLP dimension must be >= 1: {self}")

    @property
    def padded_input_dims(self) -> int:
        return next_multiple(self.n_input_dims, ALIGNMENT)

    @property
    def padded_output_dims(self) -> int:
        return next_multiple(self.n_output_dims, ALIGNMENT)

    @property
    def matrix_shapes(self) -> list[tuple[int, int]]:
        """``(rows, cols)`` of each weight matrix in tcnn order (rows = outputs)."""
        width = self.n_neurons
        hidden = [(width, width)] * (self.n_hidden_layers - 1)
        return [(width, self.padded_input_dims), *hidden, (self.padded_output_dims, width)]

    @property
    def n_params(self) -> int:
        return sum(rows * cols for rows, cols in self.matrix_shapes)

    def tcnn_config(self) -> dict:
        """The tiny-cuda-nn network config that computes the same function."""
        if self.n_neurons not in TCNN_WIDTHS:
            raise ValueError(f"FullyFusedMLP supports {TCNN_WIDTHS} neurons, not {self.n_neurons}")
        return {
            "otype": "FullyFusedMLP",
            "activation": "ReLU",
            "output_activation": "None",
            "n_neurons": self.n_neurons,
            "n_hidden_layers": self.n_hidden_layers,
        }


def xavier_uniform_params(config: MLPConfig, device=None) -> torch.Tensor:
    """A flat float32 parameter vector initialised per matrix like FullyFusedMLP does."""
    parts = []
    for rows, cols in config.matrix_shapes:
        bound = math.sqrt(6.0 / (rows + cols))
        parts.append(torch.empty(rows * cols, device=device).uniform_(-bound, bound))
    return torch.cat(parts)


class MLP(torch.nn.Module):
    """``mlp(x)``: ``[N, n_input_dims]`` -> ``[N, n_output_dims]``, dtype of ``params``."""

    def __init__(self, config: MLPConfig, *, device: torch.device | str | None = None):
        super().__init__()
        self.config = config
        self.params = torch.nn.Parameter(xavier_uniform_params(config, device))

    def extra_repr(self) -> str:
        return f"{self.config}, n_params={self.config.n_params}"

    def weights(self) -> list[torch.Tensor]:
        """Views of ``params`` as the weight matrices, ``[rows, cols]`` each, in tcnn order."""
        shapes = self.config.matrix_shapes
        flat = self.params.split([rows * cols for rows, cols in shapes])
        return [part.view(shape) for part, shape in zip(flat, shapes, strict=True)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cfg = self.config
        if x.ndim != 2 or x.shape[1] != cfg.n_input_dims:
            raise ValueError(f"MLP input must be [N, {cfg.n_input_dims}], got {tuple(x.shape)}")
        h = x.to(self.params.dtype)
        if cfg.padded_input_dims > cfg.n_input_dims:
            h = torch.nn.functional.pad(h, (0, cfg.padded_input_dims - cfg.n_input_dims), value=1.0)
        *hidden, output = self.weights()
        for weight in hidden:
            h = torch.relu(h @ weight.T)
        return h @ output[: cfg.n_output_dims].T
