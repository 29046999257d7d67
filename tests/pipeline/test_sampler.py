"""Training batches: deterministic, epoch-covering, resumable."""

import io

import pytest
import torch
from view_helpers import toy_views

from diffrec.errors import UserError
from diffrec.pipeline.sampler import ViewSampler


def test_sampler_is_deterministic_and_covers_each_epoch():
    views = toy_views(6)
    first = [ViewSampler(views, 3, seed=1).next_indices() for _ in range(2)]
    torch.testing.assert_close(first[0], first[1])
    sampler = ViewSampler(views, 3, seed=1)
    epochs = torch.stack([torch.cat([sampler.next_indices(), sampler.next_indices()])
                          for _ in range(4)])
    assert (epochs.sort(dim=1).values == torch.arange(6)).all(), "each epoch sees every view"
    assert len({tuple(e.tolist()) for e in epochs}) > 1, "epochs are reshuffled"
    other = ViewSampler(views, 3, seed=2)
    assert not torch.equal(torch.cat([other.next_indices() for _ in range(8)]), epochs.flatten())
    cameras, images = next(ViewSampler(views, 4, seed=1))
    assert len(cameras) == 4 and images.shape == (4, 4, 4, 4)


def test_sampler_state_round_trip_resumes_the_same_batches():
    views = toy_views(5)
    sampler = ViewSampler(views, 2, seed=9)
    for _ in range(3):  # stop mid-epoch
        sampler.next_indices()
    buffer = io.BytesIO()
    torch.save(sampler.state_dict(), buffer)
    expected = [sampler.next_indices() for _ in range(7)]
    resumed = ViewSampler(views, 2, seed=0)
    buffer.seek(0)
    resumed.load_state_dict(torch.load(buffer))
    assert [r.tolist() for r in (resumed.next_indices() for _ in range(7))] == [
        e.tolist() for e in expected]
    with pytest.raises(UserError, match="made for 5 views but this dataset has 6"):
        ViewSampler(toy_views(6), 2).load_state_dict(sampler.state_dict())
