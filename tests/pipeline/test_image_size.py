"""Images too small to score are refused before a run (issue 56.9): at train_res 16 a 16:9
frame is 16x9 pixels and SSIM's 11-pixel window cannot score it, which used to be found only
after training. The check, the size it asks for and the settings' own minimum agree with the
SSIM the scoring uses."""

from __future__ import annotations

import inspect

import pytest
import torch

from diffrec.errors import UserError
from diffrec.pipeline.bounds import check_image_size
from diffrec.protocol.images import MIN_SIDE, longest_side_size, smallest_longest_side
from diffrec.protocol.settings import SettingsError, parse_settings
from diffrec.render.metrics import ssim


def test_min_side_is_the_ssim_window_and_smaller_images_cannot_be_scored():
    assert inspect.signature(ssim).parameters["window"].default == MIN_SIDE
    ssim(torch.rand(1, MIN_SIDE, MIN_SIDE, 3), torch.rand(1, MIN_SIDE, MIN_SIDE, 3))
    with pytest.raises(ValueError, match="at least 11 pixels"):
        ssim(torch.rand(1, MIN_SIDE - 1, 16, 3), torch.rand(1, MIN_SIDE - 1, 16, 3))


def test_a_wide_frame_at_a_small_train_res_is_refused_naming_the_size_that_scores():
    with pytest.raises(UserError) as info:
        check_image_size(parse_settings({"train_res": 16}), 1920, 1080)
    assert str(info.value) == ("train_res 16 makes the images 16x9 pixels (from 1920x1080), "
                               "and a run's score needs at least 11 on each side: raise "
                               "train_res to 19 or more")
    check_image_size(parse_settings({"train_res": 19}), 1920, 1080)  # 19x11


@pytest.mark.parametrize("size", [(1920, 1080), (1080, 1920), (64, 64), (1000, 11), (7, 3)])
def test_the_smallest_longest_side_is_the_first_that_scores(size):
    longest = smallest_longest_side(*size)
    assert min(longest_side_size(*size, longest)) >= MIN_SIDE
    assert min(longest_side_size(*size, longest - 1)) < MIN_SIDE or longest == MIN_SIDE


def test_the_settings_refuse_a_train_res_under_the_window():
    with pytest.raises(SettingsError, match="train_res: must be at least 11"):
        parse_settings({"train_res": 10})
