"""Region outlines and boxes drawn on pictures (sk.render.outline, draw_box, draw_mark, grid marks),
checked pixel by pixel on real PNG files read back with Pillow."""

import numpy as np
import pytest
from PIL import Image

from saliency_kit import render

CYAN = np.array(render.MARK_COLOUR, np.uint8)
GREY = np.array([90, 90, 90], np.uint8)


def through_png(array, tmp_path, name="picture.png") -> np.ndarray:
    path = render.save_png(array, tmp_path / name)
    return np.asarray(Image.open(path).convert("RGB"))


def grey(h, w):
    return np.broadcast_to(GREY, (h, w, 3)).copy()


def test_outline_colours_the_border_pixels_of_the_region_only(tmp_path):
    mask = np.zeros((32, 32), bool)
    mask[8:20, 10:26] = True
    drawn = through_png(render.outline(grey(32, 32), mask), tmp_path)
    border = mask & ~np.pad(mask[1:-1, 1:-1] & mask[:-2, 1:-1] & mask[2:, 1:-1] & mask[1:-1, :-2] & mask[1:-1, 2:], 1)
    assert border.sum() == 2 * 12 + 2 * 16 - 4
    np.testing.assert_array_equal(drawn[border], np.broadcast_to(CYAN, (border.sum(), 3)))
    np.testing.assert_array_equal(drawn[~border], np.broadcast_to(GREY, ((~border).sum(), 3)))


def test_outline_scales_a_coarse_mask_and_an_empty_mask_draws_nothing(tmp_path):
    coarse = np.zeros((4, 4), bool)
    coarse[1:3, 1:3] = True  # the picture's pixels 16..47 on each axis once scaled to 64 x 64
    drawn = through_png(render.outline(grey(64, 64), coarse), tmp_path)
    cyan = np.all(drawn == CYAN, axis=-1)
    assert cyan[16, 16:48].all() and cyan[47, 16:48].all() and cyan[16:48, 16].all() and cyan[16:48, 47].all()
    assert cyan.sum() == 4 * 32 - 4 and not cyan[17:47, 17:47].any()
    untouched = render.outline(grey(8, 8), np.zeros((8, 8), bool))
    np.testing.assert_array_equal(untouched, grey(8, 8))


def test_outline_at_the_picture_edge_and_its_width(tmp_path):
    mask = np.zeros((20, 20), bool)
    mask[:10, :10] = True  # touches the top and left edges: those sides are outlined too
    drawn = through_png(render.outline(grey(20, 20), mask, width=2), tmp_path)
    cyan = np.all(drawn == CYAN, axis=-1)
    assert cyan[:10, :2].all() and cyan[:2, :10].all() and cyan[8:10, :10].all() and cyan[:10, 8:10].all()
    assert not cyan[2:8, 2:8].any() and not cyan[10:].any() and not cyan[:, 10:].any()


def test_draw_box_rectangle_and_label_band(tmp_path):
    picture = grey(64, 64)
    drawn = through_png(render.draw_box(picture, (20, 30, 40, 50), "star"), tmp_path)
    cyan = np.all(drawn == CYAN, axis=-1)
    assert cyan[30:50, 20].all() and cyan[30:50, 39].all()  # the left and right lines: columns x0 and x1 - 1
    assert cyan[49, 20:40].all() and cyan[30, 20:40].all()  # bottom (row y1 - 1) and top lines
    np.testing.assert_array_equal(drawn[31:49, 21:39], np.broadcast_to(GREY, (18, 18, 3)))
    band = drawn[:30, 20:60]
    assert np.all(band == CYAN, axis=-1).sum() > 50  # the label's band sits above the box ...
    assert ((band[..., 0] == 0) & (band[..., 1] < 100)).sum() > 5  # ... with dark text on it
    np.testing.assert_array_equal(drawn[:, :20], picture[:, :20])  # nothing left of the box
    np.testing.assert_array_equal(drawn[51:], picture[51:])  # nothing below it


def test_draw_box_in_the_models_frame_is_scaled_to_the_picture(tmp_path):
    drawn = through_png(render.draw_box(grey(128, 256), (8, 16, 24, 48), frame=(64, 64)), tmp_path)
    cyan = np.all(drawn == CYAN, axis=-1)
    # x scaled by 4, y by 2: columns 32..95, rows 32..95
    assert cyan[32:96, 32].all() and cyan[32:96, 95].all() and cyan[32, 32:96].all() and cyan[95, 32:96].all()
    assert cyan.sum() == 2 * 64 + 2 * 64 - 4


def test_draw_box_refuses_a_malformed_box():
    with pytest.raises(ValueError, match=r"4 finite numbers; received"):
        render.draw_box(grey(8, 8), (1, 2, 3))
    with pytest.raises(ValueError, match=r"mask \[h, w\]"):
        render.outline(grey(8, 8), np.zeros((2, 8, 8), bool))


def test_draw_mark_draws_both_and_none_changes_nothing(tmp_path):
    mask = np.zeros((16, 16), bool)
    mask[2:6, 2:6] = True
    mark = render.Mark(mask=mask, box=(10, 10, 14, 14), frame=(16, 16))
    drawn = through_png(render.draw_mark(grey(16, 16), mark), tmp_path)
    cyan = np.all(drawn == CYAN, axis=-1)
    assert cyan[2, 2:6].all() and cyan[10, 10:14].all() and cyan[13, 10:14].all()
    np.testing.assert_array_equal(render.draw_mark(grey(4, 4), None), grey(4, 4))


def test_grid_draws_each_columns_mark_on_its_panel(tmp_path):
    from matplotlib.figure import Figure  # noqa: F401  (the grid is a bare Figure)

    class Row:  # one input, two target columns, as grid() reads an explanation
        method = "gradient"
        maps = np.zeros((1, 2, 32, 32), np.float32)
        targets = np.array([[1, 2]])
        scores = np.array([[0.5, 0.25]], np.float32)

    mask = np.zeros((32, 32), bool)
    mask[4:28, 4:28] = True
    marked = render.grid(Row(), [grey(32, 32)], ["a", "b", "c"], marks=[[render.Mark(mask=mask), None]])
    plain = render.grid(Row(), [grey(32, 32)], ["a", "b", "c"])
    marked_png = through_png(marked, tmp_path, "marked.png").astype(int)
    plain_png = through_png(plain, tmp_path, "plain.png")
    assert marked_png.shape == plain_png.shape
    changed = np.any(marked_png != plain_png, axis=-1)
    cyanish = (marked_png[..., 0] < 80) & (marked_png[..., 1] > 180) & (marked_png[..., 2] > 180)
    assert cyanish.sum() > 100 and changed.sum() >= cyanish.sum()
    columns = np.flatnonzero(cyanish.any(axis=0))
    width = marked_png.shape[1]
    assert width / 3 < columns.min() and columns.max() < 2 * width / 3  # only the first map panel (the middle third)
    with pytest.raises(ValueError, match="one list of marks per input"):
        render.grid(Row(), [grey(32, 32)], marks=[])
