"""RISE: a region-mean model ranks its region first; a hand-written reference; seeds and batch sizes."""

import numpy as np
import pytest
import skimage.transform
from method_support import uniform_draws

import saliency_kit as sk

keras = pytest.importorskip("keras")


def region_mean_model(size=16):
    """score 0 = mean of the image's top-left 6×6 square; score 1 = mean of the bottom-right one."""
    weights = np.zeros((size, size, 1, 2), "float32")
    weights[:6, :6, 0, 0] = 1 / 36
    weights[-6:, -6:, 0, 1] = 1 / 36
    inputs = keras.Input((size, size, 1))
    flat = keras.layers.Flatten()(inputs)
    dense = keras.layers.Dense(2, use_bias=False)
    outputs = dense(flat)
    dense.set_weights([weights.reshape(size * size, 2)])
    return keras.Model(inputs, outputs)


def test_region_mean_model_ranks_its_region_first():
    model = region_mean_model()
    x = np.ones((1, 16, 16, 1), "float32")
    got = sk.explain(model, x, "rise", targets=[[0, 1]], masks=600, cells=4, seed=0, batch_size=64)
    for k, (rows, cols) in enumerate([(slice(0, 6), slice(0, 6)), (slice(10, 16), slice(10, 16))]):
        saliency = got.maps[0, k]
        inside = np.zeros((16, 16), bool)
        inside[rows, cols] = True
        # every pixel of the region outranks every pixel far from it
        far = np.ones((16, 16), bool)
        far[max(rows.start - 4, 0) : rows.stop + 4, max(cols.start - 4, 0) : cols.stop + 4] = False
        assert saliency[inside].min() > saliency[far].max()
        assert np.unravel_index(saliency.argmax(), saliency.shape) in {
            (r, c) for r in range(16)[rows] for c in range(16)[cols]
        }


def test_matches_a_numpy_reference_with_skimage_masks():
    """The paper's recipe written independently: NumPy masks through skimage's bilinear resize
    (edge mode: the grid's own values), scores from the model on the masked images."""
    model = region_mean_model(12)
    rng = np.random.default_rng(1)
    x = rng.uniform(0, 1, (2, 12, 12, 1)).astype("float32")
    count, cells, p = 40, 3, 0.4
    got = sk.explain(model, x, "rise", targets=[[0, 1], [1, 0]], masks=count, cells=cells, p=p, seed=7, batch_size=9)
    # the masks' draws, shared by every input: cells² grid values (kept where u < p), then the offset
    u = uniform_draws(7, None, count, range(count), [cells * cells + 2])
    grids = (u[:, : cells * cells] < p).astype("float32").reshape(count, cells, cells)
    offsets = np.minimum(np.floor(u[:, -2:] * 4).astype(int), 3)
    masks = np.stack(
        [
            skimage.transform.resize(g, (16, 16), order=1, mode="edge", anti_aliasing=False)[r : r + 12, c : c + 12]
            for g, (r, c) in zip(grids, offsets)
        ]
    )
    for b in range(2):
        scores = model(x[b][None] * masks[..., None]).numpy()  # [count, 2]
        for k, cls in enumerate(got.targets[b]):
            expected = np.einsum("i,ihw->hw", scores[:, cls], masks) / (count * p)
            np.testing.assert_allclose(got.attributions[b, k], expected, rtol=1e-4, atol=1e-6)


def test_seed_fixes_the_result_whatever_the_batch_size():
    model = region_mean_model()
    x = np.random.default_rng(2).uniform(0, 1, (3, 16, 16, 1)).astype("float32")
    a = sk.explain(model, x, "rise", targets="top2", masks=30, seed=3, batch_size=4)
    b = sk.explain(model, x, "rise", targets="top2", masks=30, seed=3, batch_size=100)
    c = sk.explain(model, x[1:2], "rise", targets=a.targets[1:2], masks=30, seed=3)
    np.testing.assert_allclose(a.attributions, b.attributions, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(c.attributions[0], a.attributions[1], rtol=1e-5, atol=1e-7)
    assert a.attributions.shape == (3, 2, 16, 16)


def test_refusals():
    inputs = keras.Input((5,))
    model = keras.Model(inputs, keras.layers.Dense(2)(inputs))
    with pytest.raises(ValueError, match=r"rise needs image inputs \[B, H, W, C\]; received shape \(1, 5\)"):
        sk.explain(model, np.zeros((1, 5), "float32"), "rise", targets=0)
    with pytest.raises(ValueError, match=r"p must be a number in \(0, 1\]; received 1.5"):
        sk.explain(region_mean_model(), np.zeros((1, 16, 16, 1), "float32"), "rise", targets=0, p=1.5)
