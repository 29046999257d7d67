"""``Material.mips``: fitted levels 1..n of texture channels, checked on construction with
sentences that say what is wrong."""

import numpy as np
import pytest
import torch

from diffrec.errors import UserError
from diffrec.io import Material

UNIT_Z = torch.tensor([0.0, 0.0, 1.0])


def test_good_levels_are_kept_as_float32_tensors():
    material = Material(kd=torch.rand(8, 6, 4), normal=UNIT_Z.expand(5, 3, 3),
                        mips={"kd": [np.full((4, 3, 4), 0.5), torch.rand(2, 1, 4),
                                     torch.rand(1, 1, 4)],
                              "normal": [UNIT_Z.expand(2, 1, 3), UNIT_Z.expand(1, 1, 3)]})
    assert [level.shape for level in material.mips["kd"]] == [(4, 3, 4), (2, 1, 4), (1, 1, 4)]
    assert all(level.dtype == torch.float32 for level in material.mips["kd"])
    assert Material(kd=torch.rand(4, 4, 3), mips={"kd": []}).mips == {"kd": []}


@pytest.mark.parametrize(("mips", "message"), [
    ([torch.rand(4, 4, 3)], "material mips must be a dict of channel -> list of levels, got list"),
    ({"albedo": []}, "material mips has a channel 'albedo'; mip levels exist only for kd, ks, "
                     "normal"),
    ({"ks": [torch.rand(4, 4, 3)]}, "material mips has levels for ks, which is not a texture"),
    ({"normal": []}, "material mips has levels for normal, which is not a texture"),
    ({"kd": torch.rand(4, 4, 3)}, "material mips['kd'] must be a list of levels 1..n, got Tensor"),
    ({"kd": [torch.rand(4, 4, 3)]}, "material mips['kd'] level 1 has shape (4, 4, 3); a 8x8 "
                                    "texture's level 1 is (4, 4, 4)"),
    ({"kd": [torch.rand(4, 4, 4), torch.rand(1, 1, 4)]},
     "material mips['kd'] level 2 has shape (1, 1, 4); a 8x8 texture's level 2 is (2, 2, 4)"),
    ({"kd": [torch.full((4, 4, 4), float("nan"))]},
     "material mips['kd'] level 1 holds NaN or infinite values"),
    ({"kd": [torch.rand(4, 4, 4), torch.rand(2, 2, 4), torch.rand(1, 1, 4),
             torch.rand(1, 1, 4)]},
     "material mips['kd'] has a level 4, past the 1x1 level of its 8x8 texture"),
])
def test_bad_levels_are_refused_with_a_sentence(mips, message):
    with pytest.raises(UserError) as caught:
        Material(kd=torch.rand(8, 8, 4), mips=mips)
    assert str(caught.value) == message


def test_normal_levels_must_be_unit_vectors():
    with pytest.raises(UserError, match=r"mips\['normal'\] level 1 holds normals that are not "
                                        r"unit length \(renormalise each level\)"):
        Material(normal=UNIT_Z.expand(4, 4, 3), mips={"normal": [UNIT_Z.expand(2, 2, 3) * 0.9]})
