"""Engine selection: explicit choice, environment override, and clear errors."""

import pytest
import torch

from diffrec import raster
from diffrec.raster import engine


def test_auto_on_cpu_is_torch(monkeypatch):
    monkeypatch.delenv(engine.ENV_VAR, raising=False)
    ctx = raster.RasterContext(device="cpu")
    assert ctx.engine == "torch"
    assert "torch" in repr(ctx)


def test_environment_overrides_auto(monkeypatch):
    monkeypatch.setenv(engine.ENV_VAR, "nvdiffrast")
    with pytest.raises(raster.EngineUnavailableError, match="CUDA"):
        raster.RasterContext(device="cpu")
    # an explicit impl wins over the environment
    assert raster.RasterContext(device="cpu", impl="torch").engine == "torch"


def test_unknown_engine_is_rejected(monkeypatch):
    monkeypatch.setenv(engine.ENV_VAR, "opengl")
    with pytest.raises(ValueError, match="DIFFREC_RASTER"):
        raster.RasterContext(device="cpu")
    with pytest.raises(ValueError, match="impl"):
        raster.RasterContext(device="cpu", impl="vulkan")


def test_nvdiffrast_missing_is_explained(monkeypatch):
    monkeypatch.setattr(engine, "nvdiffrast_module", lambda: None)
    with pytest.raises(raster.EngineUnavailableError, match="not installed"):
        engine.resolve_engine(torch.device("cuda"), "nvdiffrast")
    assert engine.resolve_engine(torch.device("cuda"), "auto") == "torch"
