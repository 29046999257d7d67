"""Engine selection: explicit choice, environment override, clear errors, and the context
deciding the engine of every operation."""

import pytest
import torch

from diffrec import raster
from diffrec.engines import NEURAL, RASTER
from diffrec.errors import UserError


def test_auto_on_cpu_is_torch(monkeypatch):
    monkeypatch.delenv(RASTER.env_var, raising=False)
    ctx = raster.RasterContext(device="cpu")
    assert ctx.engine == "torch"
    assert "torch" in repr(ctx)


def test_environment_overrides_auto(monkeypatch):
    monkeypatch.setenv(RASTER.env_var, "nvdiffrast")
    with pytest.raises(raster.EngineUnavailableError, match="CUDA"):
        raster.RasterContext(device="cpu")
    # on the command line, a sentence naming the variable that asked for it
    assert issubclass(raster.EngineUnavailableError, UserError)
    with pytest.raises(UserError, match=r"\$DIFFREC_RASTER\) needs a CUDA device, and this "
                                        r"run's device is cpu: set DIFFREC_RASTER=torch"):
        raster.RasterContext(device="cpu")
    # an explicit impl wins over the environment
    assert raster.RasterContext(device="cpu", impl="torch").engine == "torch"


def test_unknown_engine_is_rejected(monkeypatch):
    monkeypatch.setenv(RASTER.env_var, "opengl")
    with pytest.raises(ValueError, match="DIFFREC_RASTER"):
        raster.RasterContext(device="cpu")
    with pytest.raises(ValueError, match="impl"):
        raster.RasterContext(device="cpu", impl="vulkan")


def test_nvdiffrast_missing_is_explained(monkeypatch):
    monkeypatch.setattr(RASTER, "module", lambda: None)
    with pytest.raises(raster.EngineUnavailableError, match="not installed"):
        RASTER.resolve(torch.device("cuda"), "nvdiffrast")
    assert RASTER.resolve(torch.device("cuda"), "auto") == "torch"


def test_one_resolver_for_both_families(monkeypatch):
    """The rasterizer and the neural material choose by the same rules, each with its own
    environment variable and accelerated engine."""
    monkeypatch.setenv(RASTER.env_var, "torch")
    monkeypatch.setenv(NEURAL.env_var, "tcnn")
    assert RASTER.resolve("cpu") == "torch"
    with pytest.raises(raster.EngineUnavailableError,
                       match=r"tcnn engine \(\$DIFFREC_NEURAL\) needs a CUDA"):
        NEURAL.resolve("cpu")
    assert NEURAL.resolve("cpu", "torch") == "torch"
    assert (RASTER.engines, NEURAL.engines) == (("torch", "nvdiffrast"), ("torch", "tcnn"))


def test_operations_take_the_engine_from_the_context(monkeypatch):
    """interpolate / texture / antialias follow the context they are given, not the
    environment."""
    pos = torch.tensor([[[-0.8, -0.8, 0.5, 1], [0.8, -0.8, 0.5, 1], [0, 0.8, 0.5, 1]]])
    tri = torch.tensor([[0, 1, 2]], dtype=torch.int32)
    ctx = raster.RasterContext("cpu", impl="torch")
    rast, _ = raster.rasterize(ctx, pos, tri, (8, 8))
    # an environment that cannot run here: the context's choice still holds
    monkeypatch.setenv(RASTER.env_var, "nvdiffrast")
    color, _ = raster.interpolate(torch.eye(3)[None], rast, tri, ctx=ctx)
    raster.antialias(color, rast, pos, tri, ctx=ctx)
    raster.texture(color, torch.rand(1, 4, 4, 2), ctx=ctx)
    # a context that says nvdiffrast routes every operation there
    class Native:
        def __getattr__(self, name):
            return lambda *args: name

    monkeypatch.setattr(RASTER, "module", Native)
    native = raster.RasterContext("cpu", impl="torch")
    native.engine = "nvdiffrast"
    assert raster.interpolate(torch.eye(3)[None], rast, tri, ctx=native) == "interpolate"
    assert raster.texture(color, torch.rand(1, 4, 4, 2), ctx=native) == "texture"
    assert raster.antialias(color, rast, pos, tri, ctx=native) == "antialias"


def test_every_operation_needs_its_context():
    """No operation picks an engine of its own: without a RasterContext each raises
    TypeError naming the missing ``ctx``."""
    pos = torch.tensor([[[-0.8, -0.8, 0.5, 1], [0.8, -0.8, 0.5, 1], [0, 0.8, 0.5, 1]]])
    tri = torch.tensor([[0, 1, 2]], dtype=torch.int32)
    ctx = raster.RasterContext("cpu", impl="torch")
    rast, _ = raster.rasterize(ctx, pos, tri, (8, 8))
    color = torch.rand(1, 8, 8, 3)
    calls = {
        "interpolate": lambda **kw: raster.interpolate(torch.eye(3)[None], rast, tri, **kw),
        "texture": lambda **kw: raster.texture(color, torch.rand(1, 4, 4, 2), **kw),
        "texture_construct_mip": lambda **kw: raster.texture_construct_mip(color, **kw),
        "antialias": lambda **kw: raster.antialias(color, rast, pos, tri, **kw),
        "antialias_construct_topology_hash":
            lambda **kw: raster.antialias_construct_topology_hash(tri, **kw),
    }
    for name, call in calls.items():
        call(ctx=ctx)
        with pytest.raises(TypeError, match="ctx"):
            call()
        with pytest.raises(TypeError, match=f"{name} needs the RasterContext to run on"):
            call(ctx=None)
    with pytest.raises(TypeError, match="rasterize needs the RasterContext"):
        raster.rasterize(None, pos, tri, (8, 8))
    with pytest.raises(TypeError, match="DepthPeeler needs the RasterContext"):
        raster.DepthPeeler("cpu", pos, tri, (8, 8))
