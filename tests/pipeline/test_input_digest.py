"""diffrec.pipeline.input_digest: the digest a run's checkpoints carry changes with what the
passes train on (a pixel, a camera, the start mesh) and with nothing else."""

import dataclasses

import torch

from diffrec.camera import orbit_cameras
from diffrec.mesh import Mesh
from diffrec.pipeline.checkpoints import CheckpointStore
from diffrec.pipeline.input_digest import inputs_digest
from diffrec.pipeline.inputs import Inputs
from diffrec.pipeline.views import Views


def views(count: int, seed: int) -> Views:
    cameras = orbit_cameras(count, radius=3.0, size=8)
    images = torch.rand(count, 8, 8, 4, generator=torch.Generator().manual_seed(seed))
    return Views(cameras, images)


def inputs(**changes) -> Inputs:
    """The same inputs, built afresh each call (no tensor shared between two calls)."""
    triangle = Mesh(torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0]]), torch.tensor([[0, 1, 2]]))
    return dataclasses.replace(Inputs(views(3, 0), views(2, 1), base_mesh=triangle), **changes)


def test_the_digest_follows_the_training_inputs_to_the_byte_and_nothing_else():
    digest = inputs_digest(inputs())
    assert inputs_digest(inputs()) == digest
    touched = views(3, 0)
    touched.images[1, 2, 3, 0] += 1e-6
    moved = views(3, 0)
    moved.cameras.camera_to_world[0, 0, 3] += 1e-3
    bent = inputs().base_mesh
    bent.positions[2, 2] = 0.01
    for changed in ({"train": touched}, {"train": moved}, {"base_mesh": bent},
                    {"base_mesh": None}, {"envmap": torch.ones(4, 8, 3)},
                    {"poses_found": True}):
        assert inputs_digest(inputs(**changed)) != digest, changed
    # the held-out views train nothing
    assert inputs_digest(inputs(test=views(2, 7))) == digest


def test_a_store_knows_a_checkpoint_of_other_inputs():
    store = CheckpointStore("unused").for_inputs("a")
    store_saved = {"iteration": 3, "inputs": "a"}
    assert store.made_from(store_saved)
    assert not store.made_from({**store_saved, "inputs": "b"})
    assert store.made_from({"iteration": 3})  # from before checkpoints were tagged
    assert CheckpointStore("unused").made_from(store_saved)
