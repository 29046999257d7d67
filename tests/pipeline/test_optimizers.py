"""UniformAdam: one step by hand, a tensor-wide denominator, and exact resume from its
state_dict."""

import io
import math

import pytest
import torch

from diffrec.pipeline.optimizers import UniformAdam


def test_two_steps_match_the_hand_computed_update():
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0, 0.5]))
    optimizer = UniformAdam([p], lr=0.1, betas=(0.5, 0.75), eps=0.0)
    first, second = torch.tensor([0.2, -0.4, 0.1]), torch.tensor([0.4, 0.0, -0.2])
    p.grad = first.clone()
    optimizer.step()
    # step 1: m_hat = g, v_hat = g^2, so the step is lr * g / max|g|
    expected = torch.tensor([1.0, -2.0, 0.5]) - 0.1 * first / 0.4
    assert torch.allclose(p.detach(), expected)
    p.grad = second.clone()
    optimizer.step()
    m = 0.5 * (0.5 * first) + 0.5 * second
    v = 0.75 * (0.25 * first**2) + 0.25 * second**2
    m_hat, v_hat = m / (1 - 0.5**2), v / (1 - 0.75**2)
    expected = expected - 0.1 * m_hat / v_hat.sqrt().max()
    assert torch.allclose(p.detach(), expected)
    # per-entry Adam would have scaled each entry by its own sqrt(v_hat): not this
    per_entry = m_hat / v_hat.sqrt()
    assert not torch.allclose(m_hat / v_hat.sqrt().max(), per_entry)
    assert optimizer.state[p]["step"] == 2


def test_a_step_keeps_the_gradients_shape_and_moves_no_entry_more_than_lr():
    p = torch.nn.Parameter(torch.zeros(50, 3))
    optimizer = UniformAdam([p], lr=0.01)
    smooth = torch.sin(torch.linspace(0, math.pi, 50))[:, None] * torch.tensor([1.0, 2.0, 3.0])
    p.grad = smooth.clone()
    optimizer.step()
    assert p.detach().abs().max() == pytest.approx(0.01, rel=1e-5)
    assert torch.allclose(-p.detach() / p.detach().abs().max(), smooth / smooth.abs().max(),
                          atol=1e-6)


def test_a_reloaded_state_dict_continues_exactly():
    gen = torch.Generator().manual_seed(0)
    grads = [torch.randn(20, 3, generator=gen) for _ in range(5)]

    def run(steps, state=None, start=None):
        p = torch.nn.Parameter(torch.ones(20, 3) if start is None else start.clone())
        optimizer = UniformAdam([p], lr=0.05)
        if state is not None:
            optimizer.load_state_dict(state)
        for grad in steps:
            p.grad = grad.clone()
            optimizer.step()
        return p.detach(), optimizer.state_dict()

    straight, _ = run(grads)
    halfway, state = run(grads[:2])
    buffer = io.BytesIO()
    torch.save(state, buffer)  # as checkpoints are
    buffer.seek(0)
    state = torch.load(buffer, weights_only=False)
    resumed, _ = run(grads[2:], state, halfway)
    assert torch.equal(straight, resumed)


def test_invalid_settings_are_refused():
    with pytest.raises(ValueError, match="betas"):
        UniformAdam([torch.nn.Parameter(torch.zeros(1))], betas=(0.9, 1.0))
