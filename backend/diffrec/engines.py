"""Choosing an engine: the portable pure-torch one or an accelerated CUDA package.

Two parts of diffrec run on two engines that compute the same functions with the same
contracts: rasterization (``RASTER``: torch or nvdiffrast, see ``diffrec.raster``) and the
neural material (``NEURAL``: torch or tiny-cuda-nn, see ``diffrec.neural.material``). Both
choose the same way, in order of precedence:

1. an explicit ``impl`` argument (``"torch"`` or the accelerated engine's name);
2. the family's environment variable (same values, or ``"auto"``);
3. ``"auto"``: the accelerated engine when the device is CUDA and its package imports,
   torch otherwise.

An explicit request that cannot run here raises ``EngineUnavailableError`` saying why.
"""

from __future__ import annotations

import os
from types import ModuleType

import torch

from diffrec.errors import SettingVariableError, UserError
from diffrec.optional import optional_module

__all__ = ["NEURAL", "RASTER", "EngineFamily", "EngineUnavailableError"]


class EngineUnavailableError(UserError, RuntimeError):
    """The requested engine cannot run here (package missing or device not supported): a
    sentence for the command line, as the cause is the setup's."""


def explicit_impl(impl: str | None) -> bool:
    """Whether ``impl`` names an engine itself (not None or "auto", which defer to the
    environment)."""
    return impl is not None and impl.strip().lower() != "auto"


class EngineFamily:
    """The torch engine and one accelerated engine (``accelerated``) that needs CUDA and the
    optional module ``package``; ``env_var`` names the environment override."""

    def __init__(self, env_var: str, accelerated: str, package: str):
        self.env_var = env_var
        self.accelerated = accelerated
        self.package = package

    def __repr__(self) -> str:
        return f"EngineFamily({self.env_var!r}, {self.accelerated!r}, {self.package!r})"

    @property
    def engines(self) -> tuple[str, str]:
        """The engine names: ``("torch", accelerated)``."""
        return ("torch", self.accelerated)

    def module(self) -> ModuleType | None:
        """The accelerated engine's module if it imports, else None."""
        return optional_module(self.package)

    def requested(self, impl: str | None = None) -> str:
        """The engine asked for by ``impl`` or, when ``impl`` is None or "auto", the
        environment: "auto" or one of ``engines``. Raises ValueError for other names
        (``SettingVariableError``, a sentence for the command line, for the environment's)."""
        explicit = explicit_impl(impl)
        choice = (impl if explicit else os.environ.get(self.env_var, "auto")).strip().lower()
        if choice not in ("auto", *self.engines):
            names = " or ".join(repr(name) for name in ("auto", *self.engines))
            if explicit:
                raise ValueError(f"impl must be {names}, not {choice!r}")
            raise SettingVariableError(f"${self.env_var} must be {names}, not {choice!r}")
        return choice

    def resolve(self, device: torch.device | str, impl: str | None = None) -> str:
        """The engine that runs on ``device``: "torch" or ``accelerated``.

        Raises EngineUnavailableError when the accelerated engine is requested explicitly
        (by ``impl`` or the environment) but cannot run on ``device``.
        """
        choice = self.requested(impl)
        device = torch.device(device)
        cuda = device.type == "cuda"
        if choice == "auto":
            return self.accelerated if cuda and self.module() is not None else "torch"
        asked = f"impl={impl!r}" if explicit_impl(impl) else f"${self.env_var}"
        if choice == self.accelerated and not cuda:
            raise EngineUnavailableError(
                f"the {choice} engine ({asked}) needs a CUDA device, and this run's device "
                f"is {device}: set {self.env_var}=torch or unset it (impl='torch' in code)"
            )
        if choice == self.accelerated and self.module() is None:
            raise EngineUnavailableError(
                f"{self.package} ({asked}) is not installed or failed to import; install it "
                f"with scripts/install_gpu, or set {self.env_var}=torch (impl='torch' in code)"
            )
        return choice


RASTER = EngineFamily("DIFFREC_RASTER", "nvdiffrast", "nvdiffrast.torch")
NEURAL = EngineFamily("DIFFREC_NEURAL", "tcnn", "tinycudann")
