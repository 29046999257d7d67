"""One device rule (``diffrec.devices``): "auto" is CUDA, else MPS, else the CPU, and every
place that picks a device without being told (``diffrec info``, ``diffrec serve``, the memory
bounds, a ``RasterContext``, a ``NeuralMaterial``) picks the same one."""

from types import SimpleNamespace

import pytest
import torch

from diffrec import devices, raster
from diffrec.commands import info, serve
from diffrec.commands.optimize import launched_world, ranks_asked
from diffrec.errors import UserError
from diffrec.pipeline import bounds
from diffrec.pipeline.config import build_config


def _machine(monkeypatch, *, cuda: bool, mps: bool) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(devices, "mps_available", lambda: mps)


@pytest.mark.parametrize(("cuda", "mps", "expected"), [
    (True, True, "cuda"), (False, True, "mps"), (False, False, "cpu")])
def test_auto_prefers_cuda_then_mps_then_the_cpu(monkeypatch, cuda, mps, expected):
    _machine(monkeypatch, cuda=cuda, mps=mps)
    assert devices.default_device().type == expected
    assert devices.resolve_device("auto") == devices.resolve_device(None)
    assert devices.resolve_device("auto").type == expected


def test_on_a_mac_every_default_is_mps(monkeypatch):
    """The issue's case: ``diffrec info`` said CPU where ``optimize`` used MPS."""
    _machine(monkeypatch, cuda=False, mps=True)
    monkeypatch.setattr("diffrec.engines.RASTER.module", lambda: None)
    monkeypatch.setattr("diffrec.engines.NEURAL.module", lambda: None)
    assert info.collect()["device"] == "mps"
    assert info.collect()["mps"] is True
    assert serve._device(None) == serve._device("auto") == "mps"
    monkeypatch.setattr(raster, "default_device", lambda: torch.device("meta"))
    assert raster.RasterContext().device == torch.device("meta"), "the context asks the rule"


def test_a_gpu_server_pins_the_first_gpu(monkeypatch):
    _machine(monkeypatch, cuda=True, mps=False)
    assert serve._device(None) == "cuda:0"


def test_memory_of_auto_is_the_memory_of_the_device_auto_picks(monkeypatch):
    _machine(monkeypatch, cuda=False, mps=False)
    assert bounds.device_memory_bytes("auto") == bounds.device_memory_bytes("cpu")


def test_devices_torch_cannot_use_are_refused_in_one_sentence(monkeypatch):
    _machine(monkeypatch, cuda=False, mps=False)
    with pytest.raises(UserError, match="no CUDA device"):
        devices.resolve_device("cuda:1")
    with pytest.raises(UserError, match="cannot use MPS"):
        devices.resolve_device("mps")
    with pytest.raises(UserError, match="unknown device 'gpu'"):
        devices.resolve_device("gpu")
    with pytest.raises(UserError, match="no CUDA device"):
        serve._device("cuda")
    assert devices.resolve_device("cpu") == torch.device("cpu")


@pytest.mark.parametrize(("cuda", "mps", "name", "expected"), [
    (True, False, "auto", "cuda"), (True, False, "cuda:0", "cuda"), (True, False, "cpu", "cpu"),
    (False, False, "auto", "cpu"), (False, True, "cpu", "cpu")])
def test_ranked_runs_train_on_cuda_or_the_cpu_by_one_rule(monkeypatch, cuda, mps, name, expected):
    _machine(monkeypatch, cuda=cuda, mps=mps)
    assert devices.ranks_device_type(name) == expected


@pytest.mark.parametrize("name", ["auto", "mps"])
def test_ranked_runs_on_mps_are_refused_everywhere_in_the_same_sentence(monkeypatch, name):
    """The command line's flags, a launched rank and the server once disagreed about MPS (the
    server put its ranks on the CPU unasked); now every place asks ``ranks_device_type``."""
    _machine(monkeypatch, cuda=False, mps=True)
    config = build_config({"device": name, "batch": 4, "ranks": 2})
    sentence = "not on MPS: give device cpu"
    with pytest.raises(UserError, match=sentence):
        ranks_asked(SimpleNamespace(gpus=None, ranks=None), config)
    with pytest.raises(UserError, match=sentence):
        bounds.check_ranks(config.settings, name)
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(UserError, match=sentence):
        launched_world(SimpleNamespace(gpus=None, ranks=None), config)
