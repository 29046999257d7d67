"""Adam: torch's Adam's numbers, resuming from its state dict, no torch._dynamo imported.
UniformAdam: one step by hand, a tensor-wide denominator, and exact resume from its
state_dict. LogAdam: Adam on the log of the parameter, steps that multiply. Schedule: torch's
LambdaLR's learning rates."""

import io
import math
import subprocess
import sys

import pytest
import torch

from diffrec.pipeline.optimizers import Adam, LogAdam, Schedule, UniformAdam


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


def _two_groups(seed: int = 0) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(6, 4, generator=gen)),
            torch.nn.Parameter(torch.randn(5, generator=gen)),
            torch.nn.Parameter(torch.randn(3, 2, generator=gen))]


def _trained(optimizer, params, steps: int, schedule=None, first: int = 0) -> None:
    """``steps`` steps on a fixed quartic loss, the middle parameter without a gradient on
    odd steps (from ``first``)."""
    for step in range(first, first + steps):
        optimizer.zero_grad()
        used = params if step % 2 == 0 else params[::2]
        sum(((p - 0.3) ** 4).sum() + (p * p.roll(1, 0)).sum() for p in used).backward()
        optimizer.step()
        if schedule is not None:
            schedule.step()


def test_adam_computes_torchs_adam_bit_for_bit_with_groups_and_a_schedule():
    """Two groups of their own learning rates and eps, a parameter without a gradient on
    some steps, a LambdaLR-style decay: every parameter and moment equal to torch's."""
    ours, theirs = _two_groups(), _two_groups()

    def groups(params):
        return [{"params": params[:2], "lr": 0.05},
                {"params": params[2:], "lr": 0.2, "eps": 1e-3}]

    factor = lambda step: 0.9 ** step  # noqa: E731
    ours_optimizer = Adam(groups(ours), betas=(0.8, 0.95))
    theirs_optimizer = torch.optim.Adam(groups(theirs), betas=(0.8, 0.95))
    _trained(ours_optimizer, ours, 7, Schedule(ours_optimizer, factor))
    _trained(theirs_optimizer, theirs, 7,
             torch.optim.lr_scheduler.LambdaLR(theirs_optimizer, factor))
    for mine, torchs in zip(ours, theirs, strict=True):
        assert torch.equal(mine.detach(), torchs.detach())
        for key in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(ours_optimizer.state[mine][key], theirs_optimizer.state[torchs][key])
    assert ours_optimizer.state[ours[1]]["step"] == 4  # counted only where it had a gradient
    assert [g["lr"] for g in ours_optimizer.param_groups] == \
        [g["lr"] for g in theirs_optimizer.param_groups]


def test_adam_resumes_from_torchs_state_dict():
    """Three steps of torch's Adam, its state saved as a checkpoint and loaded into ours, three
    more: the same parameters as six steps of ours (a checkpoint written before diffrec had
    its own optimisers resumes)."""
    straight, before, after = _two_groups(), _two_groups(), _two_groups()
    straight_optimizer = Adam(straight, lr=0.05)
    _trained(straight_optimizer, straight, 6)
    theirs = torch.optim.Adam(before, lr=0.05)
    _trained(theirs, before, 3)
    buffer = io.BytesIO()
    torch.save(theirs.state_dict(), buffer)
    buffer.seek(0)
    with torch.no_grad():
        for p, q in zip(after, before, strict=True):
            p.copy_(q)
    resumed = Adam(after, lr=0.5)  # the saved learning rate wins
    resumed.load_state_dict(torch.load(buffer, weights_only=False))
    assert resumed.param_groups[0]["lr"] == 0.05
    _trained(resumed, after, 3, first=3)
    for p, q in zip(after, straight, strict=True):
        assert torch.allclose(p.detach(), q.detach(), rtol=0, atol=1e-7)


def test_a_state_dict_of_other_groups_is_refused_and_duplicates_are_caught():
    params = _two_groups()
    state = Adam([{"params": params[:1]}, {"params": params[1:]}], lr=0.1).state_dict()
    with pytest.raises(ValueError, match="groups"):
        Adam(params, lr=0.1).load_state_dict(state)
    with pytest.raises(ValueError, match="more than one place"):
        Adam([{"params": params[:2]}, {"params": params[1:]}])
    with pytest.raises(ValueError, match="no parameters"):
        Adam([])


def test_schedule_resumes_at_its_step_count():
    params = _two_groups()
    optimizer = Adam(params, lr=0.4)
    schedule = Schedule(optimizer, lambda step: 1.0 / (1 + step))
    for _ in range(3):
        schedule.step()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.1)
    again = Adam(_two_groups(), lr=0.4)
    resumed = Schedule(again, lambda step: 1.0 / (1 + step))
    resumed.load_state_dict(schedule.state_dict())
    assert again.param_groups[0]["lr"] == pytest.approx(0.1)


def test_building_and_stepping_the_optimisers_imports_no_dynamo():
    """torch's own optimisers import torch._dynamo when the first is built (1.3 s a process
    on a 2-core CPU); ours do not."""
    code = ("import sys, torch\n"
            "from diffrec.pipeline.optimizers import Adam, LogAdam, Schedule, UniformAdam\n"
            "p = torch.ones(3, requires_grad=True)\n"
            "for kind in (Adam, LogAdam, UniformAdam):\n"
            "    optimizer = kind([p], lr=0.1)\n"
            "    schedule = Schedule(optimizer, lambda step: 1.0)\n"
            "    p.sum().backward()\n"
            "    optimizer.step(); schedule.step(); optimizer.zero_grad()\n"
            "print('torch._dynamo' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=120)
    assert done.stdout.strip() == "False"
