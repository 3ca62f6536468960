"""Scenes of 1-3 shapes follow their specification: label maps, boxes, colours, determinism."""

import numpy as np
import pytest
from skimage.measure import label as connected

from saliency_kit.data import scenes
from saliency_kit.data.shapes import CLASS_NAMES

N = 150


@pytest.fixture(scope="module")
def data():
    return scenes.make_scenes(N, seed=31)


def test_shapes_and_dtypes(data):
    assert scenes.SEGMENTATION_CLASSES == ("background",) + CLASS_NAMES
    assert data.images.shape == (N, 64, 64, 3) and data.images.dtype == np.uint8
    assert data.label_maps.shape == (N, 64, 64) and data.label_maps.dtype == np.uint8
    assert data.boxes.shape == (N, 3, 4) and data.labels.shape == (N, 3) and data.counts.shape == (N,)
    assert set(np.unique(data.counts)) == {1, 2, 3}
    for i in range(N):
        m = data.counts[i]
        assert (data.labels[i, :m] >= 0).all() and (data.labels[i, m:] == -1).all() and not data.boxes[i, m:].any()
    assert set(np.unique(data.labels[data.labels >= 0])) == set(range(5))


def test_each_box_is_the_edge_box_of_its_own_shape_of_one_colour(data):
    for i in range(N):
        components = connected(data.label_maps[i] > 0, connectivity=2)
        boxes, labels = scenes.scene_boxes(data, i)
        assert components.max() == len(labels)  # shapes never touch: one component per shape
        found = []
        for c in range(1, components.max() + 1):
            rows, cols = np.nonzero(components == c)
            found.append(
                (
                    (cols.min(), rows.min(), cols.max() + 1, rows.max() + 1),
                    int(data.label_maps[i][rows[0], cols[0]]) - 1,
                )
            )
            assert len(np.unique(data.label_maps[i][rows, cols])) == 1
            assert len(np.unique(data.images[i][rows, cols], axis=0)) == 1  # one flat colour
        assert sorted(found) == sorted((tuple(b), int(k)) for b, k in zip(boxes.astype(int).tolist(), labels))
        size = boxes[:, 2:] - boxes[:, :2]
        assert (size >= 8).all() and (size <= 29).all()


def test_deterministic_prefix_stable_and_apart_from_the_single_shape_images():
    a, b = scenes.make_scenes(6, seed=5), scenes.make_scenes(9, seed=5)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y[:6])
    from saliency_kit.data import shapes

    single, _, _ = shapes.make_dataset(6, seed=5)
    assert not any(np.array_equal(s, t) for s, t in zip(single, a.images))
    one = scenes.make_scenes(20, seed=2, objects=(1, 1))
    assert (one.counts == 1).all()
    empty = scenes.make_scenes(5, seed=2, objects=(0, 0))
    assert (empty.counts == 0).all() and not empty.label_maps.any() and (empty.labels == -1).all()


@pytest.mark.parametrize(
    "n, objects, match",
    [
        (-1, (1, 3), "non-negative whole number"),
        (2.5, (1, 3), "non-negative whole number"),
        (3, (-1, 2), r"0 <= low <= high <= 3"),
        (3, (2, 4), r"0 <= low <= high <= 3"),
    ],
)
def test_bad_arguments(n, objects, match):
    with pytest.raises(ValueError, match=match):
        scenes.make_scenes(n, objects=objects)
