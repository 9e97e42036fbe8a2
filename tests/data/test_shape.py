"""Image sizes: S for square crops, (H, W) otherwise, in every form a user or a file gives them."""

from __future__ import annotations

import numpy as np
import pytest

from pfd.data.shape import canonical_size, image_hw, pil_size, plain_size, same_size, size_text
from pfd.errors import PfdError


@pytest.mark.parametrize("given, hw", [
    (112, (112, 112)), ("112", (112, 112)), ((112, 96), (112, 96)), ([112, 96], (112, 96)), ("112x96", (112, 96)),
    (" 112 X 96 ", (112, 96)), ("112,96", (112, 96)), (np.int64(64), (64, 64)), (32.0, (32, 32)), ([64, 64], (64, 64)),
])
def test_every_accepted_form_gives_height_then_width(given, hw):
    assert image_hw(given) == hw
    square = hw[0] == hw[1]
    assert canonical_size(given) == (hw[0] if square else hw)
    assert plain_size(given) == (hw[0] if square else list(hw))
    assert size_text(given) == (f"{hw[0]}px" if square else f"{hw[0]}x{hw[1]}")
    assert pil_size(given) == (hw[1], hw[0])  # Pillow's (width, height)
    assert same_size(given, hw)


@pytest.mark.parametrize("bad", [0, -4, True, 32.5, "abc", "1x2x3", [1, 2, 3], (0, 4), "", None])
def test_anything_else_is_a_one_line_error_naming_the_setting(bad):
    with pytest.raises(PfdError, match="--size"):
        image_hw(bad, what="--size")


def test_sizes_compare_by_shape_not_by_form():
    assert same_size(112, [112, 112]) and same_size("112x96", (112, 96))
    assert not same_size((112, 96), (96, 112))  # height and width are not interchangeable
