"""XRAI against PAIR's ``saliency.core.XRAI`` given the same segments and base attributions."""

import numpy as np
import pytest

import saliency_kit as sk
from saliency_kit.methods.xrai import felzenszwalb_segments, rank_regions

keras = pytest.importorskip("keras")
import saliency.core.xrai as pair_xrai


def random_segments(rng, count, size):
    """Overlapping rectangles and blobs of various sizes."""
    masks = []
    for _ in range(count):
        r0, c0 = rng.integers(0, size - 4, 2)
        r1, c1 = r0 + rng.integers(4, size - r0 + 1), c0 + rng.integers(4, size - c0 + 1)
        mask = np.zeros((size, size), bool)
        mask[r0:r1, c0:c1] = True
        masks.append(mask)
    return masks


def pair_result(attr, segments, area_threshold=1.0):
    parameters = pair_xrai.XRAIParameters(area_threshold=area_threshold, flatten_xrai_segments=True)
    parameters.return_xrai_segments = True
    out = pair_xrai.XRAI().GetMaskWithDetails(
        np.zeros((*attr.shape[:2], 3)),
        call_model_function=None,
        base_attribution=attr,
        segments=segments,
        extra_parameters=parameters,
    )
    return out.attribution_mask, out.segments


def ranks_from(values, order_masks_gains):
    """PAIR's integer rank image: regions (new pixels) numbered by decreasing gain, the rest last."""
    ranks = np.zeros(values.shape, int)
    for i, (mask, _) in enumerate(sorted(order_masks_gains, key=lambda mg: -mg[1])):
        ranks[mask] = i + 1
    return ranks


@pytest.mark.parametrize("threshold", [1.0, 0.35])
def test_same_order_and_map_as_pair(threshold):
    rng = np.random.default_rng(0)
    size = 40
    attr = rng.normal(size=(size, size, 3)).astype(np.float32)
    segments = random_segments(rng, 60, size)
    got, order = rank_regions(attr.max(axis=-1), segments, threshold)
    expected_map, expected_ranks = pair_result(attr, segments, threshold)
    np.testing.assert_allclose(got, expected_map, rtol=1e-4, atol=1e-6)
    covered = np.zeros((size, size), bool)
    trace = []
    for index in order:
        added = segments[index] & ~covered
        trace.append((added, got[added][0]))
        covered |= added
    if (~covered).any():
        trace.append((~covered, -np.inf))
    np.testing.assert_array_equal(ranks_from(got, trace), expected_ranks)
    assert len(order) >= 3


def test_default_segments_are_pairs():
    rng = np.random.default_rng(1)
    image = rng.uniform(0, 1, (48, 40, 3)).astype(np.float32)
    image[10:30, 5:25] += 2.0
    ours = felzenszwalb_segments(image)
    theirs = pair_xrai._get_segments_felzenszwalb(image)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(a, b)


def tiny_model():
    inputs = keras.Input((24, 24, 3))
    h = keras.layers.Conv2D(4, 3, padding="same", activation="relu")(inputs)
    h = keras.layers.GlobalAveragePooling2D()(h)
    return keras.Model(inputs, keras.layers.Dense(3)(h))


def test_explain_uses_the_base_method_and_given_segments():
    model = tiny_model()
    rng = np.random.default_rng(2)
    x = rng.uniform(0, 1, (2, 24, 24, 3)).astype("float32")
    segments = [random_segments(rng, 20, 24), random_segments(rng, 25, 24)]
    got = sk.explain(model, x, "xrai", targets="top2", segments=segments, steps=8)
    base = sk.explain(model, x, "integrated_gradients", targets=got.targets, steps=8)
    assert got.attributions.shape == (2, 2, 24, 24)
    for b in range(2):
        for k in range(2):
            expected, _ = pair_result(base.attributions[b, k], segments[b])
            np.testing.assert_allclose(got.attributions[b, k], expected, rtol=1e-4, atol=1e-6)
    assert got.options["base"] == "integrated_gradients" and got.options["steps"] == 8


def test_default_segments_run_end_to_end_and_refusals():
    model = tiny_model()
    x = np.random.default_rng(3).uniform(0, 1, (1, 24, 24, 3)).astype("float32")
    got = sk.explain(model, x, "xrai", targets=0, base="gradient")
    assert np.isfinite(got.maps).all() and len(np.unique(got.maps)) > 1
    with pytest.raises(ValueError, match=r"one list of masks per input \(1\); received 2 lists"):
        sk.explain(model, x, "xrai", targets=0, segments=[[np.ones((24, 24), bool)]] * 2)
    with pytest.raises(ValueError, match=r"base must be a pixel method .*received .gradcam."):
        sk.explain(model, x, "xrai", targets=0, base="gradcam")
    inputs = keras.Input((5,))
    flat = keras.Model(inputs, keras.layers.Dense(2)(inputs))
    with pytest.raises(ValueError, match=r"xrai needs image inputs \[B, H, W, C\]; received shape \(1, 5\)"):
        sk.explain(flat, np.zeros((1, 5), "float32"), "xrai", targets=0)
