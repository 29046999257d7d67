"""Adam and two variants of it, on an optimiser base of our own, and the pass's schedule.

torch's optimisers import ``torch._dynamo`` the first time a process builds one (each of
their methods is wrapped so that dynamo leaves it alone): 1.3 s of every command-line job on
a 2-core CPU, a job whose pass may take 12 s (docs/BENCHMARKS.md). ``AdamBase`` keeps what
``torch.optim.Optimizer`` keeps for these (parameter groups over defaults, per-parameter
state, ``state_dict`` in its layout, so a checkpoint of torch's Adam loads) without that
import:

- ``Adam``: torch's Adam without weight decay or AMSGrad, step for step the same numbers.
- ``UniformAdam``: one denominator per tensor, for large-steps geometry.
- ``LogAdam``: Adam on the logarithm of a non-negative parameter, for a learned light.
- ``Schedule``: each group's learning rate times a factor of the step count (torch's
  ``LambdaLR``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch

__all__ = ["Adam", "AdamBase", "LogAdam", "Schedule", "UniformAdam"]


class AdamBase:
    """Parameter groups (each a dict: ``params`` and the settings, ``defaults`` filling those
    it lacks), per-parameter state (``step`` an int, ``exp_avg``, ``exp_avg_sq``) and
    ``state_dict`` / ``load_state_dict`` in ``torch.optim.Optimizer``'s layout. A subclass
    gives ``_update(p, state, group)``, which moves ``p`` by one step once ``step`` counts it."""

    def __init__(self, params: Iterable, defaults: dict):
        lr, eps, betas = defaults["lr"], defaults["eps"], defaults["betas"]
        if lr < 0 or eps < 0 or not all(0.0 <= beta < 1.0 for beta in betas):
            raise ValueError(f"invalid {type(self).__name__} settings "
                             + ", ".join(f"{key}={value}" for key, value in defaults.items()))
        self.defaults = defaults
        self.state: dict[torch.Tensor, dict] = {}
        self.param_groups: list[dict] = []
        params = list(params)
        if not params:
            raise ValueError(f"{type(self).__name__} was given no parameters")
        for group in params if isinstance(params[0], dict) else [{"params": params}]:
            self.add_param_group(group)

    def add_param_group(self, group: dict) -> None:
        params = group["params"]
        params = [params] if isinstance(params, torch.Tensor) else list(params)
        seen = {id(p) for earlier in self.param_groups for p in earlier["params"]}
        if any(id(p) in seen for p in params) or len({id(p) for p in params}) < len(params):
            raise ValueError("a parameter appears in more than one place")
        self.param_groups.append({**self.defaults, **group, "params": params})

    def zero_grad(self) -> None:
        """Every parameter's gradient set to None (torch's default)."""
        for p in self._parameters():
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        """One step of every parameter that has a gradient (its state made on first use)."""
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state.get(p)
                if state is None:
                    state = self.state[p] = {"step": 0, "exp_avg": torch.zeros_like(p),
                                             "exp_avg_sq": torch.zeros_like(p)}
                state["step"] += 1
                self._update(p, state, group)

    def _update(self, p: torch.Tensor, state: dict, group: dict) -> None:
        raise NotImplementedError

    def _parameters(self) -> list[torch.Tensor]:
        return [p for group in self.param_groups for p in group["params"]]

    def state_dict(self) -> dict:
        """{"state": {index: state}, "param_groups": [settings, params as indices]}, the
        indices counting the parameters across the groups in order."""
        index = {id(p): i for i, p in enumerate(self._parameters())}
        groups = [{**{key: value for key, value in group.items() if key != "params"},
                   "params": [index[id(p)] for p in group["params"]]}
                  for group in self.param_groups]
        return {"state": {index[id(p)]: dict(state) for p, state in self.state.items()},
                "param_groups": groups}

    def fits(self, state_dict: dict) -> bool:
        """Whether ``state_dict``'s groups match this optimiser's in number and size (what
        ``load_state_dict`` takes)."""
        return _group_sizes(state_dict["param_groups"]) == _group_sizes(self.param_groups)

    def load_state_dict(self, state_dict: dict) -> None:
        """The groups' settings and the parameters' state from ``state_dict`` (ours, or
        torch's Adam's: its tensor ``step`` read as an int), its tensors moved to each
        parameter's device and dtype; refuses (ValueError) one that does not ``fit``."""
        groups = state_dict["param_groups"]
        if not self.fits(state_dict):
            raise ValueError(f"the state has groups of {_group_sizes(groups)} parameters, "
                             f"this optimiser {_group_sizes(self.param_groups)}")
        parameters = self._parameters()
        self.state = {}
        for key, saved in state_dict["state"].items():
            p = parameters[int(key)]
            self.state[p] = {name: (int(value) if name == "step"
                                    else value.to(p) if isinstance(value, torch.Tensor)
                                    else value)
                             for name, value in saved.items()}
        for group, saved in zip(self.param_groups, groups, strict=True):
            group.update({key: value for key, value in saved.items() if key != "params"})


def _group_sizes(groups: list[dict]) -> list[int]:
    return [len(group["params"]) for group in groups]


def _moments(grad: torch.Tensor, state: dict, group: dict) -> tuple[float, float]:
    """Adam's moments of ``grad`` updated in ``state``; their bias corrections (1 - beta^t)."""
    beta1, beta2 = group["betas"]
    state["exp_avg"].lerp_(grad, 1 - beta1)
    state["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    return 1 - beta1 ** state["step"], 1 - beta2 ** state["step"]


class Adam(AdamBase):
    """Adam (Kingma and Ba 2015) as ``torch.optim.Adam`` computes it without weight decay or
    AMSGrad: per entry ``p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)``."""

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8):
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps})

    def _update(self, p: torch.Tensor, state: dict, group: dict) -> None:
        first, second = _moments(p.grad, state, group)
        denominator = (state["exp_avg_sq"].sqrt() / second ** 0.5).add_(group["eps"])
        p.addcdiv_(state["exp_avg"], denominator, value=-group["lr"] / first)


class UniformAdam(AdamBase):
    """Adam whose denominator is one number per parameter tensor: the largest ``sqrt(v_hat)``
    over the whole tensor, not each entry's own (Nicolet et al. 2021, "Large Steps in Inverse
    Rendering of Geometry"). A step is then the bias-corrected first moment times one scale,
    so it keeps the smoothness of a gradient that the parameterisation smoothed
    (``diffrec.geometry.large_steps``), and no entry moves by more than about ``lr``.

    Per parameter ``p`` with gradient ``g`` at step ``t`` (from 1)::

        m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
        p -= lr * (m / (1 - beta1^t)) / (max(sqrt(v / (1 - beta2^t))) + eps)
    """

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8):
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps})

    def _update(self, p: torch.Tensor, state: dict, group: dict) -> None:
        first, second = _moments(p.grad, state, group)
        scale = (state["exp_avg_sq"] / second).sqrt().max() + group["eps"]
        p.sub_(state["exp_avg"] / (first * scale), alpha=group["lr"])


class LogAdam(AdamBase):
    """Adam on the logarithm of a non-negative parameter, which stays the parameter itself:
    each step multiplies every entry by ``exp(-lr * m_hat / (sqrt(v_hat) + eps))``, ``m`` and
    ``v`` the moments of the gradient with respect to ``log p``, ``g * p``. An entry then moves
    by about the same factor per step whatever its size, so radiance can grow by orders of
    magnitude within a pass (a sun) and still settle a dim sky; plain Adam moves each entry by
    about ``lr`` per step, so a texel that starts at 0.5 would need thousands of steps to
    become a sun of 50 (docs/BENCHMARKS.md, "Learning a sun"). Entries are taken as at least
    ``floor`` before each step (a zero would stay zero).
    """

    def __init__(self, params, lr: float = 1e-2, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, floor: float = 1e-4):
        if floor <= 0:
            raise ValueError(f"invalid LogAdam settings floor={floor}")
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps, "floor": floor})

    def _update(self, p: torch.Tensor, state: dict, group: dict) -> None:
        p.clamp_(min=group["floor"])
        first, second = _moments(p.grad * p, state, group)  # d loss / d log p
        denominator = (state["exp_avg_sq"] / second).sqrt_().add_(group["eps"])
        p.mul_(torch.exp(state["exp_avg"] / denominator * (-group["lr"] / first)))


class Schedule:
    """Each of ``optimizer``'s groups at its first learning rate (``initial_lr``, kept in the
    group) times ``factor(steps)``, ``steps`` counting calls of ``step`` from 0, as torch's
    ``LambdaLR``; ``state_dict`` holds the count (``last_epoch``, LambdaLR's name for it, so
    LambdaLR's state loads)."""

    def __init__(self, optimizer: AdamBase, factor: Callable[[int], float]):
        self.optimizer, self.factor, self.last_epoch = optimizer, factor, 0
        for group in optimizer.param_groups:
            group.setdefault("initial_lr", group["lr"])
        self._apply()

    def step(self) -> None:
        self.last_epoch += 1
        self._apply()

    def _apply(self) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = group["initial_lr"] * self.factor(self.last_epoch)

    def state_dict(self) -> dict:
        return {"last_epoch": self.last_epoch}

    def load_state_dict(self, state_dict: dict) -> None:
        self.last_epoch = int(state_dict["last_epoch"])
        self._apply()
