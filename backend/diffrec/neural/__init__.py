"""Neural materials: a multiresolution hash encoding and a small MLP, on torch or tinycudann.

- ``HashGridConfig``, ``HashGridEncoding``: the Instant-NGP encoding, tiny-cuda-nn compatible;
- ``MLPConfig``, ``MLP``: bias-free ReLU MLP in FullyFusedMLP's parameter layout;
- ``NeuralMaterial``: world position -> ``NeuralMaterialSample(kd, ks, normal)``.
"""

from diffrec.neural.hashgrid import HashGridConfig, HashGridEncoding
from diffrec.neural.material import NeuralMaterial, NeuralMaterialSample
from diffrec.neural.mlp import MLP, MLPConfig

__all__ = [
    "MLP",
    "HashGridConfig",
    "HashGridEncoding",
    "MLPConfig",
    "NeuralMaterial",
    "NeuralMaterialSample",
]
