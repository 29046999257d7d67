"""What an ``optimize`` job is refused at submit rather than after its training (issue 56.9):
images too small to score at its train_res, and a mesh with no faces."""

import numpy as np
import pytest
from helpers.servers import optimize_inputs

from diffrec.server.optimize_runner import OptimizeRunner
from diffrec.server.runner import JobFailed


def refusal(settings: dict, inputs: dict) -> str:
    runner = OptimizeRunner("cpu")
    with pytest.raises(JobFailed) as info:
        runner.check_inputs(runner.parse({"task": "optimize", "settings": settings}), inputs)
    return str(info.value)


def test_wide_images_at_a_small_train_res_are_refused_naming_the_size_that_scores():
    inputs = optimize_inputs(count=4, size=32)
    inputs["images"] = np.zeros((4, 18, 32, 4), np.float32)  # 16:9
    said = refusal({"mode": "reconstruct", "light": "learn", "train_res": 16}, inputs)
    assert said == ("train_res 16 makes the images 16x9 pixels (from 32x18), and a run's score "
                    "needs at least 11 on each side: raise train_res to 19 or more")
    runner = OptimizeRunner("cpu")
    runner.check_inputs(runner.parse({"task": "optimize", "settings": {
        "mode": "reconstruct", "light": "learn", "train_res": 19}}), inputs)


def test_a_mesh_with_no_faces_is_refused():
    inputs = {**optimize_inputs(), "vertices": np.eye(3, dtype=np.float32),
              "faces": np.zeros((0, 3), np.int32)}
    said = refusal({"mode": "materials", "light": "learn"}, inputs)
    assert said == "the mesh sent has no faces: send a mesh with at least one triangle"
