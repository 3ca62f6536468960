"""The shapes data set follows its specification, the architecture exercises every rewrite path,
and the shipped model loads offline and is accurate."""

import math

import numpy as np
import pytest
from skimage.measure import regionprops

from saliency_kit.data import shapes

N = 250  # images checked against the specification


@pytest.fixture(scope="module")
def data():
    return shapes._make_dataset_with_info(N, seed=11)


def test_class_names_and_dtypes(data):
    assert shapes.CLASS_NAMES == ("circle", "square", "triangle", "star", "cross")
    images, masks, labels = shapes.make_dataset(7, seed=3)
    assert images.shape == (7, 64, 64, 3) and images.dtype == np.uint8
    assert masks.shape == (7, 64, 64) and masks.dtype == bool
    assert labels.shape == (7,) and labels.dtype == np.int64
    assert set(np.unique(data[2])) == set(range(5))  # every class occurs


def test_deterministic_and_prefix_stable():
    a = shapes.make_dataset(12, seed=5)
    b = shapes.make_dataset(12, seed=5)
    prefix = shapes.make_dataset(4, seed=5)
    other = shapes.make_dataset(12, seed=6)
    for x, y, p in zip(a, b, prefix):
        np.testing.assert_array_equal(x, y)
        np.testing.assert_array_equal(x[:4], p)
    assert not np.array_equal(a[0], other[0])


def test_shape_is_one_flat_colour_exactly_on_the_mask(data):
    images, masks, _, infos = data
    for image, mask, info in zip(images, masks, infos):
        assert mask.any()
        np.testing.assert_array_equal(image[mask], np.broadcast_to(info["colour"], image[mask].shape))
        np.testing.assert_array_equal(image[~mask], info["background"][~mask])


def test_colour_differs_from_every_background_pixel_beneath(data):
    images, masks, _, infos = data
    for mask, info in zip(masks, infos):
        beneath = info["background"][mask].astype(int)
        distance = np.abs(beneath - info["colour"].astype(int)).sum(-1)
        assert distance.min() >= 100


def test_size_position_and_geometry(data):
    """Circumscribed diameter 18-34 px, fully inside, and each class has its own area ratio
    (area / circumscribed-circle area) and solidity, from closed-form geometry."""
    _, masks, labels, infos = data
    # pentagram: 10 triangles with sides R and r = 0.382 R at 36 degrees
    star_ratio = 5 * (3 - math.sqrt(5)) / 2 * math.sin(math.radians(36)) / math.pi
    expected_area = {
        0: 1.0,
        1: 2 / math.pi,
        2: 3 * math.sqrt(3) / 4 / math.pi,
        3: star_ratio,
        4: 2.0 / math.pi,
    }  # cross: 2L·w − w² = 2 R² for w = L/3
    for mask, label, info in zip(masks, labels, infos):
        radius, (cx, cy) = info["radius"], info["centre"]
        assert 9 <= radius <= 17
        assert not (mask[0].any() or mask[-1].any() or mask[:, 0].any() or mask[:, -1].any())
        ys, xs = np.nonzero(mask)
        far = np.hypot(xs + 0.5 - cx, ys + 0.5 - cy).max()  # pixel (i, j) is centred on (j+.5, i+.5)
        assert radius - 1.6 <= far <= radius + 0.5, (label, radius, far)
        ratio = mask.sum() / (math.pi * radius**2)
        assert abs(ratio / expected_area[label] - 1) < 0.15, (label, ratio, expected_area[label])
        solidity = regionprops(mask.astype(np.uint8))[0].solidity
        if label in (0, 1, 2):  # convex
            assert solidity > 0.85, (label, solidity)
        elif label == 3:  # star: area / pentagon hull = 0.47
            assert solidity < 0.65, solidity
        else:  # cross: area / octagon hull = 5/7
            assert 0.6 < solidity < 0.85, solidity


def test_background_is_gradient_plus_uniform_noise(data):
    """Where no line was drawn, a least-squares plane per channel leaves residuals within ±16
    (plus the fit's own error) with the spread of uniform integer noise on [-16, 16]."""
    _, _, _, infos = data
    yy, xx = np.mgrid[0:64, 0:64]
    design = np.stack([np.ones(64 * 64), xx.ravel(), yy.ravel()], 1)
    residuals = []
    for info in infos:
        if info["lines"]:
            continue
        bg = info["background"].reshape(-1, 3).astype(float)
        for c in range(3):
            unclipped = (bg[:, c] > 16) & (bg[:, c] < 239)
            if unclipped.mean() < 0.95:
                continue
            coef, *_ = np.linalg.lstsq(design[unclipped], bg[unclipped, c], rcond=None)
            residuals.append(bg[unclipped, c] - design[unclipped] @ coef)
    residuals = np.concatenate(residuals)
    assert len(residuals) > 20_000
    assert np.abs(residuals).max() <= 18  # 16 noise + 0.5 rounding + the fit's own error
    assert abs(residuals.std() - math.sqrt((33**2 - 1) / 12)) < 0.5  # 9.52 for uniform {-16..16}


def test_lines_are_drawn_under_the_shape():
    _, _, _, infos = shapes._make_dataset_with_info(60, seed=2)
    counts = [info["lines"] for info in infos]
    assert set(counts) == {0, 1, 2, 3}


def test_generator_makes_many_images_repeatably():
    images, _, labels = shapes.make_dataset(1000, seed=9)
    assert images.shape == (1000, 64, 64, 3) and images.dtype == np.uint8
    assert set(np.unique(labels)) == set(range(5))
    again, _, again_labels = shapes.make_dataset(1000, seed=9)
    np.testing.assert_array_equal(images, again)
    np.testing.assert_array_equal(labels, again_labels)


def test_architecture_exercises_every_rewrite_path():
    import keras

    model = shapes.build_model()
    assert model.input_shape == (None, 64, 64, 3) and model.output_shape == (None, 5)
    layers = {layer.name: layer for layer in model.layers}
    assert layers["conv1"].activation is keras.activations.relu  # fused
    assert isinstance(layers["bn2"], keras.layers.BatchNormalization)
    assert isinstance(layers["relu2"], keras.layers.Activation)
    nested = layers["block3"]
    assert isinstance(nested, keras.Model)
    assert any(isinstance(lay, keras.layers.ReLU) for lay in nested.layers)
    assert isinstance(layers["pool"], (keras.layers.GlobalMaxPooling2D, keras.layers.GlobalAveragePooling2D))
    assert layers["predictions"].activation is keras.activations.softmax
    four_d = [lay.name for lay in model.layers if len(lay.output.shape) == 4]
    assert four_d[-1] == shapes.GRADCAM_LAYER == "conv4"
    keras.backend.clear_session()


def test_shipped_model_loads_offline_and_is_accurate(monkeypatch, tmp_path):
    import saliency_kit as sk
    from saliency_kit.zoo.config import resolve_path

    monkeypatch.setenv("SALIENCY_KIT_OFFLINE", "1")
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))  # an empty cache: nothing to fall back on
    shipped = resolve_path("package:shapes.keras", None)
    assert shipped.is_file() and shipped.stat().st_size <= 2_000_000
    model, spec = sk.load_model("shapes")
    assert spec.name == "shapes" and spec.input_size == (64, 64)
    assert spec.class_names == list(shapes.CLASS_NAMES) and spec.gradcam_layer == "conv4"
    images, _, labels = shapes.make_dataset(300, seed=4)  # a seed the training script never uses
    inputs = spec.preprocess(images)
    np.testing.assert_array_equal(inputs, images.astype(np.float32) / 255)
    accuracy = np.mean(model.predict(inputs, batch_size=300, verbose=0).argmax(-1) == labels)
    assert accuracy >= 0.95, accuracy

    random_model, _ = sk.load_model("shapes", weights="random")
    random_accuracy = np.mean(random_model.predict(inputs, batch_size=300, verbose=0).argmax(-1) == labels)
    assert random_accuracy < 0.5
