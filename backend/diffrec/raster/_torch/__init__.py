"""Pure-PyTorch implementation of the rasterization operations (CPU, CUDA, MPS).

Vectorised over triangles and pixels (no Python loop over either), chunked so that memory
stays bounded. Same contracts as nvdiffrast; see ``diffrec.raster``.
"""

from diffrec.raster._torch.interpolate import interpolate
from diffrec.raster._torch.rasterize import DepthPeeler, rasterize
from diffrec.raster._torch.texture import texture, texture_construct_mip

__all__ = ["DepthPeeler", "interpolate", "rasterize", "texture", "texture_construct_mip"]
