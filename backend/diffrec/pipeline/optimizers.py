"""Optimisers beyond torch's own: ``UniformAdam`` for large-steps geometry."""

from __future__ import annotations

import torch


class UniformAdam(torch.optim.Optimizer):
    """Adam whose denominator is one number per parameter tensor: the largest ``sqrt(v_hat)``
    over the whole tensor, not each entry's own (Nicolet et al. 2021, "Large Steps in Inverse
    Rendering of Geometry"). A step is then the bias-corrected first moment times one scale,
    so it keeps the smoothness of a gradient that the parameterisation smoothed
    (``diffrec.geometry.large_steps``), and no entry moves by more than about ``lr``.

    Per parameter ``p`` with gradient ``g`` at step ``t`` (from 1)::

        m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
        p -= lr * (m / (1 - beta1^t)) / (max(sqrt(v / (1 - beta2^t))) + eps)

    State (``exp_avg``, ``exp_avg_sq``, ``step``) goes through ``state_dict`` like torch's Adam.
    """

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8):
        if lr < 0 or eps < 0 or not all(0.0 <= beta < 1.0 for beta in betas):
            raise ValueError(f"invalid UniformAdam settings lr={lr}, betas={betas}, eps={eps}")
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps})

    @torch.no_grad()
    def step(self, closure=None):
        return _adam_steps(self, closure, _uniform_update)


class LogAdam(torch.optim.Optimizer):
    """Adam on the logarithm of a non-negative parameter, which stays the parameter itself:
    each step multiplies every entry by ``exp(-lr * m_hat / (sqrt(v_hat) + eps))``, ``m`` and
    ``v`` the moments of the gradient with respect to ``log p``, ``g * p``. An entry then moves
    by about the same factor per step whatever its size, so radiance can grow by orders of
    magnitude within a pass (a sun) and still settle a dim sky; plain Adam moves each entry by
    about ``lr`` per step, so a texel that starts at 0.5 would need thousands of steps to
    become a sun of 50 (docs/BENCHMARKS.md, "Learning a sun"). Entries are taken as at least
    ``floor`` before each step (a zero would stay zero). State as torch's Adam's.
    """

    def __init__(self, params, lr: float = 1e-2, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, floor: float = 1e-4):
        if lr < 0 or eps < 0 or floor <= 0 or not all(0.0 <= beta < 1.0 for beta in betas):
            raise ValueError(f"invalid LogAdam settings lr={lr}, betas={betas}, eps={eps}, "
                             f"floor={floor}")
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps, "floor": floor})

    @torch.no_grad()
    def step(self, closure=None):
        return _adam_steps(self, closure, _log_update)


def _adam_steps(optimizer: torch.optim.Optimizer, closure, update) -> torch.Tensor | None:
    """One step of an Adam variant: for each parameter with a gradient, its state made on
    first use (``step``, ``exp_avg``, ``exp_avg_sq``) and counted, then ``update(p, grad_fn,
    state, group)`` moves ``p``; the closure's loss is returned as torch's optimisers do."""
    loss = None
    if closure is not None:
        with torch.enable_grad():
            loss = closure()
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.grad is None:
                continue
            state = optimizer.state[p]
            if not state:
                state["step"] = 0
                state["exp_avg"] = torch.zeros_like(p)
                state["exp_avg_sq"] = torch.zeros_like(p)
            state["step"] += 1
            update(p, state, group)
    return loss


def _moments(grad: torch.Tensor, state: dict, group: dict) -> tuple[float, float]:
    """Adam's moments of ``grad`` updated in ``state``; their bias corrections (1 - beta^t)."""
    beta1, beta2 = group["betas"]
    state["exp_avg"].mul_(beta1).add_(grad, alpha=1 - beta1)
    state["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    return 1 - beta1 ** state["step"], 1 - beta2 ** state["step"]


def _uniform_update(p: torch.Tensor, state: dict, group: dict) -> None:
    first, second = _moments(p.grad, state, group)
    scale = (state["exp_avg_sq"] / second).sqrt().max() + group["eps"]
    p.sub_(state["exp_avg"] / (first * scale), alpha=group["lr"])


def _log_update(p: torch.Tensor, state: dict, group: dict) -> None:
    p.clamp_(min=group["floor"])
    first, second = _moments(p.grad * p, state, group)  # d loss / d log p
    denominator = (state["exp_avg_sq"] / second).sqrt_().add_(group["eps"])
    p.mul_(torch.exp(state["exp_avg"] / denominator * (-group["lr"] / first)))
