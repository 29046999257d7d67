"""UniformAdam: one step by hand, a tensor-wide denominator, and exact resume from its
state_dict. LogAdam: Adam on the log of the parameter, steps that multiply."""

import io
import math

import pytest
import torch

from diffrec.pipeline.optimizers import LogAdam, UniformAdam


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


def test_log_adam_matches_adam_on_the_log_of_the_parameter():
    """Two steps of LogAdam on ``p`` are torch's Adam on ``log p`` (the same loss)."""
    start = torch.tensor([0.5, 2.0, 30.0])
    target = torch.tensor([4.0, 1.0, 30.5])
    p = torch.nn.Parameter(start.clone())
    log_p = torch.nn.Parameter(start.log())
    ours = LogAdam([p], lr=0.1, betas=(0.5, 0.75), eps=1e-12)
    adam = torch.optim.Adam([log_p], lr=0.1, betas=(0.5, 0.75), eps=1e-12)
    for _ in range(2):
        for optimizer, value in ((ours, p), (adam, log_p.exp())):
            optimizer.zero_grad()
            ((value - target) ** 2).sum().backward()
            optimizer.step()
        assert torch.allclose(p.detach(), log_p.detach().exp(), rtol=1e-5)


def test_log_adam_grows_an_entry_by_a_factor_per_step_whatever_its_size():
    """A steady push on log p, strong or weak, multiplies each entry by exp(lr) a step: 0.5
    reaches 74 in 100 steps, where plain Adam, lr a step, would reach 5.5."""
    p = torch.nn.Parameter(torch.tensor([0.5, 5.0]))
    optimizer = LogAdam([p], lr=0.05)
    for _ in range(100):
        p.grad = -torch.tensor([1.0, 0.001]) / p.detach()  # d loss / d log p: -1 and -0.001
        optimizer.step()
    assert torch.allclose(p.detach(), torch.tensor([0.5, 5.0]) * math.exp(5.0), rtol=1e-3)


def test_log_adam_lifts_zeros_to_its_floor():
    p = torch.nn.Parameter(torch.zeros(2))
    optimizer = LogAdam([p], lr=0.1, floor=0.01)
    p.grad = torch.tensor([-1.0, 1.0])
    optimizer.step()
    assert torch.allclose(p.detach(), 0.01 * torch.tensor([math.exp(0.1), math.exp(-0.1)]))
    with pytest.raises(ValueError, match="floor"):
        LogAdam([p], floor=0.0)
