"""One device rule (``diffrec.devices``): "auto" is CUDA, else MPS, else the CPU, and every
place that picks a device without being told (``diffrec info``, ``diffrec serve``, the memory
bounds, a ``RasterContext``, a ``NeuralMaterial``) picks the same one."""

import pytest
import torch

from diffrec import devices, raster
from diffrec.commands import info, serve
from diffrec.errors import UserError
from diffrec.pipeline import bounds


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
