"""sk.evaluate against Quantus 0.6.0, the reference implementation of the metrics.

The model-based metrics run on a small Keras network (ours) and its PyTorch twin holding the same
weights (Quantus'). Quantus draws its randomness from NumPy's global generator; each test feeds it
the very draws our per-input generators make (``numpy.random`` patched for the duration of the
Quantus call), so the two compute the same thing on the same perturbations. Where Quantus departs
from its paper, the test shows the departure and checks the paper's version.

Most inputs have one channel, so that Quantus' channels-first flattening and ours coincide; the
three-channel tests map our ``[H, W, C]`` element order onto Quantus' ``[C, H, W]``, and our K targets
are compared with one Quantus run per target column. The randomisation tests make Quantus randomise
the PyTorch twin into the weights our re-initialisation drew, so both explain the same networks.
"""

from copy import deepcopy

import keras
import numpy as np
import pytest
import quantus
import torch

from saliency_kit import evaluate
from saliency_kit.evaluate import _common
from saliency_kit.evaluate.draws import rng as seeded_rng
from saliency_kit.evaluate.reinitialise import randomized_copies, weighted_layers

B, H, W, CLASSES = 3, 6, 6, 4
TOL = dict(rtol=1e-5, atol=1e-5)


def make_twins(channels):
    """A Keras network ``[B, H, W, C]`` and its PyTorch twin ``[B, C, H, W]`` with the same weights."""
    keras.utils.set_random_seed(7)
    model = keras.Sequential(
        [
            keras.Input((H, W, channels)),
            keras.layers.Conv2D(3, 3, padding="same", activation="relu", bias_initializer="random_normal"),
            keras.layers.Flatten(),
            keras.layers.Dense(CLASSES, bias_initializer="random_normal"),
        ]
    )

    class Twin(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(channels, 3, 3, padding=1)
            self.dense = torch.nn.Linear(H * W * 3, CLASSES)

        def forward(self, x):
            h = torch.relu(self.conv(x))
            return self.dense(h.permute(0, 2, 3, 1).reshape(len(x), -1))  # Keras flattens H, W, C

    twin = Twin().eval()
    load_keras_weights(twin.conv, [w.numpy() for w in model.layers[0].weights])
    load_keras_weights(twin.dense, [w.numpy() for w in model.layers[2].weights])
    return model, twin


def torch_layout(weights):
    """A Keras ``[kernel, bias]`` in PyTorch's layout: conv ``[out, in, h, w]``, dense ``[out, in]``."""
    kernel, bias = weights
    kernel = np.transpose(kernel, (3, 2, 0, 1)) if kernel.ndim == 4 else kernel.T
    return torch.tensor(np.ascontiguousarray(kernel)), torch.tensor(bias)


def load_keras_weights(module, weights):
    kernel, bias = torch_layout(weights)
    with torch.no_grad():
        module.weight.copy_(kernel)
        module.bias.copy_(bias)


@pytest.fixture(scope="module")
def twins():
    """The twins on one channel."""
    return make_twins(1)


@pytest.fixture(scope="module")
def data(twins):
    model, twin = twins
    rng = np.random.default_rng(3)
    x = rng.random((B, H, W, 1)).astype(np.float32)
    x_t = np.moveaxis(x, -1, 1).copy()
    with torch.no_grad():
        logits = twin(torch.tensor(x_t)).numpy()
    np.testing.assert_allclose(logits, model.predict(x, verbose=0), rtol=1e-5, atol=1e-5)  # the twins agree
    y = logits.argmax(-1)
    a_t = rng.normal(size=(B, 1, H, W)).astype(np.float32)  # fixed attributions, channels-first
    return x, x_t, y, a_t


def ours(a_t):
    """Quantus' ``[B, 1, H, W]`` attributions as our element attributions ``[B, K=1, H, W, 1]``."""
    return np.moveaxis(a_t, 1, -1)[:, None]


def torch_gradient(model, inputs, targets, **kwargs):
    """Quantus' explain_func: the gradient of the target logit, ``[B, 1, H, W]``."""
    x = torch.tensor(np.asarray(inputs, dtype=np.float32), requires_grad=True)
    out = model(x)
    out[torch.arange(len(x)), torch.tensor(np.asarray(targets))].sum().backward()
    return x.grad.numpy()


class Feed:
    """Replaces a ``numpy.random`` function by one returning the given values in order."""

    def __init__(self, values):
        self.values = list(values)

    def __call__(self, *args, **kwargs):
        return self.values.pop(0)


def run_quantus(metric, twin, x_t, y, a_t, **kwargs):
    return np.asarray(
        metric(model=twin, x_batch=x_t, y_batch=y, a_batch=a_t, channel_first=True, device="cpu", **kwargs),
        dtype=np.float64,
    )


# ------------------------------------------------------------------------------ faithfulness
def test_faithfulness_correlation_matches_quantus(twins, data, monkeypatch):
    model, twin = twins
    x, x_t, y, a_t = data
    runs, size = 6, 7
    subsets = []  # our generator draws all runs of one input in a row; Quantus one input after another
    for b in range(B):
        g = seeded_rng(0, "faithfulness_correlation", b)
        subsets.append([g.choice(H * W, size, replace=False) for _ in range(runs)])
    monkeypatch.setattr(np.random, "choice", Feed(subsets[b][r] for r in range(runs) for b in range(B)))
    reference = run_quantus(
        quantus.FaithfulnessCorrelation(nr_runs=runs, subset_size=size, return_aggregate=False, disable_warnings=True),
        twin,
        x_t,
        y,
        a_t,
    )
    monkeypatch.undo()
    got = evaluate.faithfulness_correlation(model, x, ours(a_t), y[:, None], nr_runs=runs, subset_size=size)
    np.testing.assert_allclose(got[:, 0], reference, **TOL)


def test_infidelity_matches_quantus(twins, data):
    model, twin = twins
    x, x_t, y, a_t = data
    reference = run_quantus(
        quantus.Infidelity(perturb_patch_sizes=[2, 3], n_perturb_samples=2, disable_warnings=True), twin, x_t, y, a_t
    )
    got = evaluate.infidelity(model, x, ours(a_t), y[:, None], perturb_patch_sizes=[2, 3], n_perturb_samples=2)
    np.testing.assert_allclose(got[:, 0], reference, **TOL)


def test_road_matches_quantus_on_one_channel(twins, data, monkeypatch):
    model, twin = twins
    x, x_t, y, a_t = data
    percentages = [10, 30, 50, 70, 90]
    draws = {}
    for b in range(B):
        g = seeded_rng(0, "road", b)
        draws[b] = [g.standard_normal((1, int(H * W * p / 100))) for p in percentages]
    monkeypatch.setattr(np.random, "randn", Feed(draws[b][i] for i in range(len(percentages)) for b in range(B)))
    metric = quantus.ROAD(percentages=percentages, noise=0.05, disable_warnings=True)
    per_input = []  # Quantus returns the batch mean only: its batch's [B, P] curves read on the way
    evaluate_batch = metric.evaluate_batch
    monkeypatch.setattr(metric, "evaluate_batch", lambda **kw: per_input.append(evaluate_batch(**kw)) or per_input[-1])
    by_percentage = metric(model=twin, x_batch=x_t, y_batch=y, a_batch=a_t, channel_first=True, device="cpu")
    monkeypatch.undo()
    reference = np.asarray([by_percentage[p] for p in percentages])
    got = evaluate.road(model, x, ours(a_t), y[:, None], percentages=percentages, noise=0.05)
    np.testing.assert_allclose(got["curve"][:, 0].mean(axis=0), reference, **TOL)
    ((curves,),) = per_input  # one batch
    np.testing.assert_array_equal(got["curve"][:, 0], curves)
    assert len({tuple(c) for c in curves}) == B  # three different curves: the check tells inputs apart


def test_noisy_linear_imputation_matches_quantus():
    from quantus.functions.perturb_func import noisy_linear_imputation

    image = np.random.default_rng(0).random((1, 7, 5))
    indices = np.array([0, 3, 8, 9, 10, 17, 34])
    noise = np.zeros((1, len(indices)))
    np.testing.assert_allclose(
        evaluate.perturbation.noisy_linear_imputation(image, indices, noise),
        noisy_linear_imputation(image.copy(), indices, noise=0.0),
        rtol=1e-12,
    )


def test_road_imputes_every_channel_where_quantus_fails():
    """Quantus 0.6.0 ranks channels-first elements but imputes pixels: three channels break it."""
    from quantus.functions.perturb_func import noisy_linear_imputation

    image = np.random.default_rng(1).random((3, 5, 5))
    indices = np.array([6, 7, 12])
    ours_3 = evaluate.perturbation.noisy_linear_imputation(image, indices, np.zeros((3, 3)))
    for c in range(3):  # each channel is imputed as its own one-channel image
        np.testing.assert_allclose(
            ours_3[c], noisy_linear_imputation(image[c : c + 1].copy(), indices, noise=0.0)[0], rtol=1e-12
        )
    # an imputed pixel is the weighted mean of its neighbours: a constant image stays constant
    flat = np.full((3, 5, 5), 0.25)
    np.testing.assert_allclose(evaluate.perturbation.noisy_linear_imputation(flat, indices, np.zeros((3, 3))), flat)


def test_road_fails_in_quantus_on_three_channels_and_imputes_each_channel_here():
    """On a 3×3 RGB input Quantus 0.6.0's ROAD indexes pixels with channels-first element ranks (an
    IndexError); ours ranks the pixel map and imputes every channel. Its imputations by hand: the
    centre pixel alone is the weighted mean of its eight neighbours; the centre and a corner
    together solve a 2×2 system (Cramer's rule), channel by channel, and the curve is the dense
    model's arg-max on those images, in NumPy."""
    keras.utils.set_random_seed(2)
    model = keras.Sequential([keras.Input((3, 3, 3)), keras.layers.Flatten(), keras.layers.Dense(CLASSES)])
    kernel, bias = (w.numpy().astype(np.float64) for w in model.layers[-1].weights)
    rng = np.random.default_rng(9)
    x = rng.random((1, 3, 3, 3)).astype(np.float32)
    elements = 0.1 * rng.random((1, CLASSES, 3, 3, 3))  # one map per class, all targets at once
    elements[:, :, 1, 1] += 1.0  # the centre first in every map (channel sums rank pixels)
    elements[:, :, 0, 0] += 0.5  # then the top-left corner
    targets = np.arange(CLASSES)[None]
    noise = 0.3
    got = evaluate.road(model, x, elements, targets, percentages=[12, 23], noise=noise)  # 1 then 2 pixels

    v = x[0].astype(np.float64)  # [3, 3, C]
    direct = v[0, 1] + v[1, 0] + v[1, 2] + v[2, 1]
    diagonal = v[0, 2] + v[2, 0] + v[2, 2]
    centre_alone = direct / 6 + (diagonal + v[0, 0]) / 12
    # corner (5/12 of weight inside the image): 5/12·c − 1/12·m = (v01 + v10)/6
    # centre: −1/12·c + m = direct/6 + diagonal/12
    r_corner, r_centre = (v[0, 1] + v[1, 0]) / 6, direct / 6 + diagonal / 12
    det = 5 / 12 - 1 / 144
    corner, centre = (r_corner + r_centre / 12) / det, (5 / 12 * r_centre + r_corner / 12) / det
    g = seeded_rng(0, "road", 0)
    expected = np.zeros((CLASSES, 2))
    for k in range(CLASSES):  # the draws: per target, per percentage, [C, n] (pixels in ranked order)
        one, two = g.standard_normal((3, 1)), g.standard_normal((3, 2))
        first = v.copy()
        first[1, 1] = centre_alone + noise * one[:, 0]
        second = v.copy()
        second[1, 1], second[0, 0] = centre + noise * two[:, 0], corner + noise * two[:, 1]
        np.testing.assert_allclose(
            evaluate.perturbation.noisy_linear_imputation(np.moveaxis(v, -1, 0), [4, 0], noise * two),
            np.moveaxis(second, -1, 0),
            rtol=1e-12,
        )
        logits = np.stack([first.reshape(-1), second.reshape(-1)]) @ kernel + bias  # Keras flattens H, W, C
        expected[k] = logits.argmax(-1) == k
    np.testing.assert_array_equal(got["curve"][0], expected)
    assert expected.any() and not expected.all()

    class Twin(torch.nn.Module):  # the dense model, channels-first
        def forward(self, x):
            flat = x.permute(0, 2, 3, 1).reshape(len(x), -1)
            return flat @ torch.tensor(kernel, dtype=x.dtype) + torch.tensor(bias, dtype=x.dtype)

    with pytest.raises(IndexError, match="out of bounds for axis 0 with size 9"):  # an element rank, 9 pixels
        quantus.ROAD(percentages=[12, 23], noise=noise, disable_warnings=True)(
            model=Twin(),
            x_batch=np.moveaxis(x, -1, 1).copy(),
            y_batch=np.zeros(1, int),
            a_batch=np.moveaxis(elements[:, 0], -1, 1).astype(np.float32),
            channel_first=True,
            device="cpu",
        )


def test_monotonicity_correlation_matches_quantus(twins, data):
    model, twin = twins
    x, x_t, y, a_t = data
    options = dict(nr_samples=2, features_in_step=3, perturb_baseline=0.5)
    reference = run_quantus(quantus.MonotonicityCorrelation(**options, disable_warnings=True), twin, x_t, y, a_t)
    got = evaluate.monotonicity_correlation(model, x, ours(a_t), y[:, None], **options)
    np.testing.assert_allclose(got[:, 0], reference, **TOL)


@pytest.mark.parametrize("patch_size", [2, 4])  # 4 does not divide 6: Quantus pads the grid
def test_region_perturbation_matches_quantus(twins, data, patch_size):
    model, twin = twins
    x, x_t, y, a_t = data
    reference = run_quantus(
        quantus.RegionPerturbation(patch_size=patch_size, regions_evaluation=5, disable_warnings=True),
        twin,
        x_t,
        y,
        a_t,
    )
    got = evaluate.region_perturbation(model, x, ours(a_t), y[:, None], patch_size=patch_size, regions_evaluation=5)
    np.testing.assert_allclose(got["curve"][:, 0], reference, **TOL)
    np.testing.assert_allclose(got["aopc"], got["curve"].mean(-1))


def test_pixel_flipping_matches_quantus(twins, data, monkeypatch):
    model, twin = twins
    x, x_t, y, a_t = data
    reference = run_quantus(quantus.PixelFlipping(features_in_step=4, disable_warnings=True), twin, x_t, y, a_t)
    got = evaluate.pixel_flipping(model, x, ours(a_t), y[:, None], features_in_step=4)
    np.testing.assert_allclose(got["curve"][:, 0], reference, **TOL)
    monkeypatch.setattr(np, "trapz", np.trapezoid, raising=False)  # Quantus 0.6.0 calls NumPy 1's name
    auc = run_quantus(
        quantus.PixelFlipping(features_in_step=4, return_auc_per_sample=True, disable_warnings=True), twin, x_t, y, a_t
    )
    np.testing.assert_allclose(got["auc"][:, 0], auc, **TOL)


# -------------------------------------------------------------------------------- robustness
def _uniform_feed(salt, samples, low, high, channels=1):
    """Our per-input noise, replayed as Quantus draws it: one ``[B, n]`` array per sample, each row
    flattened channels-first."""
    noise = [seeded_rng(0, salt, b).uniform(low, high, (samples, H, W, channels)) for b in range(B)]
    return Feed(np.stack([np.moveaxis(noise[b][s], -1, 0).reshape(-1) for b in range(B)]) for s in range(samples))


@pytest.mark.parametrize("name", ["max_sensitivity", "avg_sensitivity"])
def test_sensitivity_matches_quantus(twins, data, monkeypatch, name):
    model, twin = twins
    x, x_t, y, _ = data
    samples = 4
    a_t = torch_gradient(twin, x_t, y)
    monkeypatch.setattr(np.random, "uniform", _uniform_feed(name, samples, -0.2, 0.2))
    cls = quantus.MaxSensitivity if name == "max_sensitivity" else quantus.AvgSensitivity
    reference = run_quantus(
        cls(nr_samples=samples, disable_warnings=True), twin, x_t, y, a_t, explain_func=torch_gradient
    )
    monkeypatch.undo()
    got = getattr(evaluate, name)(model, x, "gradient", y[:, None], nr_samples=samples)
    np.testing.assert_allclose(got[:, 0], reference, **TOL)


def test_relative_input_stability_matches_quantus(twins, data, monkeypatch):
    model, twin = twins
    x, x_t, y, _ = data
    samples = 4
    a_t = torch_gradient(twin, x_t, y)
    monkeypatch.setattr(np.random, "uniform", _uniform_feed("relative_input_stability", samples, 0.02, 0.2))
    reference = run_quantus(
        quantus.RelativeInputStability(
            nr_samples=samples, return_nan_when_prediction_changes=False, disable_warnings=True
        ),
        twin,
        x_t,
        y,
        a_t,
        explain_func=torch_gradient,
    )
    monkeypatch.undo()
    got = evaluate.relative_input_stability(
        model, x, "gradient", y[:, None], nr_samples=samples, return_nan_when_prediction_changes=False
    )
    # Measured: 4.2e-7 apart at most (relative). Quantus computes the ratios in float32 (its copies
    # are float32), ours in float64, but Quantus' objective run in float64 moves by less than 1e-7:
    # what is left is the two frameworks' float32 gradients (7.6e-7 apart at most, relative).
    np.testing.assert_allclose(got[:, 0], reference, **TOL)


def test_relative_input_stability_leaves_out_copies_that_change_the_prediction(twins, data, monkeypatch):
    """Agarwal et al. maximise over the copies that keep the prediction; Quantus 0.6.0 takes a plain
    maximum with a changed copy's ratio set to NaN, so one changed copy makes the score NaN. Ours
    against a NumPy computation on the PyTorch twin's predictions and gradients."""
    model, twin = twins
    x, x_t, y, _ = data
    samples, low, high, eps = 8, 0.02, 0.5, 1e-6
    noise = np.stack(
        [seeded_rng(0, "relative_input_stability", b).uniform(low, high, (samples, H, W, 1)) for b in range(B)]
    )
    copies = np.moveaxis(
        (x[:, None] + noise).astype(np.float32), -1, 2
    )  # [B, S, 1, H, W], as both sides feed the model
    a = torch_gradient(twin, x_t, y).astype(np.float64)
    expected, changed = [], []
    for b in range(B):
        with torch.no_grad():
            kept = twin(torch.tensor(copies[b])).numpy().argmax(-1) == y[b]
        a_s = torch_gradient(twin, copies[b], np.full(samples, y[b]))
        numerator = np.linalg.norm(((a[b] - a_s) / (a[b] + (a[b] == 0) * eps)).reshape(samples, -1), axis=-1)
        xb = x_t[b].astype(np.float64)
        denominator = np.linalg.norm(((xb - copies[b]) / (xb + (xb == 0) * eps)).reshape(samples, -1), axis=-1)
        expected.append(np.max((numerator / np.maximum(denominator, eps))[kept]))
        changed.append(int((~kept).sum()))
    assert changed == [5, 2, 0]  # some copies of two inputs change the prediction, none all of them
    got = evaluate.relative_input_stability(model, x, "gradient", y[:, None], nr_samples=samples, upper_bound=high)
    np.testing.assert_allclose(got[:, 0], expected, **TOL)

    monkeypatch.setattr(np.random, "uniform", _uniform_feed("relative_input_stability", samples, low, high))
    reference = run_quantus(
        quantus.RelativeInputStability(
            nr_samples=samples, perturb_func_kwargs={"upper_bound": high}, disable_warnings=True
        ),
        twin,
        x_t,
        y,
        a.astype(np.float32),
        explain_func=torch_gradient,
    )
    monkeypatch.undo()
    np.testing.assert_array_equal(np.isnan(reference), [True, True, False])  # NaN wherever a copy changed
    np.testing.assert_allclose(got[2, 0], reference[2], **TOL)  # and ours where none did


# ------------------------------------------------------------------- three channels, two targets
@pytest.fixture(scope="module")
def twins3():
    """The twins on three channels: Quantus flattens ``[C, H, W]``, ours ``[H, W, C]``."""
    return make_twins(3)


@pytest.fixture(scope="module")
def data3(twins3):
    """``x [B, H, W, 3]``, ``x_t [B, 3, H, W]``, the top two classes ``y [B, 2]`` and element
    attributions ``a [B, 2, H, W, 3]`` (ours, one map per target)."""
    model, twin = twins3
    rng = np.random.default_rng(5)
    x = rng.random((B, H, W, 3)).astype(np.float32)
    x_t = np.moveaxis(x, -1, 1).copy()
    with torch.no_grad():
        logits = twin(torch.tensor(x_t)).numpy()
    np.testing.assert_allclose(logits, model.predict(x, verbose=0), rtol=1e-5, atol=1e-5)
    y = np.argsort(-logits, axis=-1)[:, :2]
    return x, x_t, y, rng.normal(size=(B, 2, H, W, 3)).astype(np.float32)


def test_faithfulness_correlation_on_three_channels_and_two_targets(twins3, data3, monkeypatch):
    model, twin = twins3
    x, x_t, y, a = data3
    runs, size = 5, 20
    subsets = np.empty((B, runs, size), dtype=int)  # ours index [H, W, C] elements, Quantus [C, H, W]
    for b in range(B):
        g = seeded_rng(0, "faithfulness_correlation", b)
        for r in range(runs):
            h, w, c = np.unravel_index(g.choice(H * W * 3, size, replace=False), (H, W, 3))
            subsets[b, r] = np.ravel_multi_index((c, h, w), (3, H, W))
    got = evaluate.faithfulness_correlation(model, x, a, y, nr_runs=runs, subset_size=size)
    assert got.shape == (B, 2)
    for k in range(2):  # one Quantus run per target column, on the same subsets (ours share them)
        feed = Feed(subsets[b, r] for r in range(runs) for b in range(B))
        monkeypatch.setattr(np.random, "choice", feed)
        metric = quantus.FaithfulnessCorrelation(
            nr_runs=runs, subset_size=size, return_aggregate=False, disable_warnings=True
        )
        reference = run_quantus(metric, twin, x_t, y[:, k], np.moveaxis(a[:, k], -1, 1).copy())
        monkeypatch.undo()
        assert not feed.values
        np.testing.assert_allclose(got[:, k], reference, **TOL)


def test_max_sensitivity_on_three_channels_and_two_targets(twins3, data3, monkeypatch):
    model, twin = twins3
    x, x_t, y, _ = data3
    samples = 4
    got = evaluate.max_sensitivity(model, x, "gradient", y, nr_samples=samples)
    assert got.shape == (B, 2)
    for k in range(2):  # one Quantus run per target column, on the same copies (ours share them)
        monkeypatch.setattr(np.random, "uniform", _uniform_feed("max_sensitivity", samples, -0.2, 0.2, channels=3))
        metric = quantus.MaxSensitivity(nr_samples=samples, disable_warnings=True)
        a_t = torch_gradient(twin, x_t, y[:, k])
        reference = run_quantus(metric, twin, x_t, y[:, k], a_t, explain_func=torch_gradient)
        monkeypatch.undo()
        np.testing.assert_allclose(got[:, k], reference, **TOL)
    assert np.abs(got[:, 0] - got[:, 1]).min() > 1e-3  # the two targets' scores differ


# ------------------------------------------------------------------------------ localisation
@pytest.fixture(scope="module")
def masks():
    s = np.zeros((B, H, W), dtype=bool)
    s[0, 1:4, 1:4] = True
    s[1, :, :2] = True
    s[2, 2:, 3:] = True
    return s


@pytest.mark.parametrize(
    "name, cls, options",
    [
        ("relevance_mass_accuracy", "RelevanceMassAccuracy", {}),
        ("relevance_rank_accuracy", "RelevanceRankAccuracy", {}),
        ("top_k_intersection", "TopKIntersection", {"k": 5}),
        ("top_k_intersection", "TopKIntersection", {"k": 7, "concept_influence": True}),
        ("attribution_localisation", "AttributionLocalisation", {}),
        ("auc", "AUC", {}),
    ],
)
def test_localisation_matches_quantus(data, masks, name, cls, options):
    x, x_t, y, a_t = data
    metric = getattr(quantus, cls)(**options, disable_warnings=True)
    reference = np.asarray(
        metric(model=None, x_batch=x_t, y_batch=y, a_batch=a_t, s_batch=masks[:, None], channel_first=True),
        dtype=np.float64,
    )
    got = getattr(evaluate, name)(maps=a_t, masks=masks, **options)  # [B, 1, H, W]: one map per input
    np.testing.assert_allclose(got[:, 0], reference, **TOL)


def quantus_pointing_game(maps, x_t, masks):
    """Quantus' PointingGame of one map per input ``[B, H, W]`` (its defaults: normalised, signed)."""
    return np.asarray(
        quantus.PointingGame(disable_warnings=True)(
            model=None,
            x_batch=x_t,
            y_batch=np.zeros(len(maps), dtype=int),
            a_batch=maps[:, None].astype(np.float32),
            s_batch=masks[:, None],
            channel_first=True,
        )
    )


def test_pointing_game_matches_quantus(data, masks):
    x, x_t, y, a_t = data
    maps = np.random.default_rng(4).random((B, 3, H, W))  # K=3 maps per input
    maps[:, 2] = a_t[:, 0]  # signed, normal draws
    for b, (on, off) in enumerate([((2, 2), (5, 5)), ((3, 0), (0, 4)), ((4, 4), (0, 0))]):
        maps[b, 0][on] = 2.0  # the peak on the object
        maps[b, 1][off] = 2.0  # the peak off it
    got = evaluate.pointing_game(maps, masks)
    for k in range(3):  # one Quantus run per target
        np.testing.assert_array_equal(got[:, k], quantus_pointing_game(maps[:, k], x_t, masks))
    np.testing.assert_array_equal(got[:, :2], [[True, False]] * B)


def test_pointing_game_ties_and_empty_masks_depart_from_quantus(data, masks):
    """Quantus 0.6.0 counts a tie as a hit if *any* tied pixel is on the object, so a flat map hits
    every object, and scores an empty mask as a hit (its NaN lands in a bool array). Here all the
    tied pixels must be on the object, and an empty mask is a miss."""
    x, x_t, y, a_t = data
    s = masks.copy()
    maps = np.zeros((B, H, W))
    maps[0, 1, 1] = maps[0, 3, 3] = 1.0  # both peaks on the object: a hit for both
    maps[1, 0, 0] = maps[1, 0, 5] = 1.0  # one on (column 0), one off (column 5): a miss here
    s[2] = False  # an empty mask, under a flat map
    np.testing.assert_array_equal(evaluate.pointing_game(maps[:, None], s)[:, 0], [True, False, False])
    np.testing.assert_array_equal(quantus_pointing_game(maps, x_t, s), [True, True, True])


@pytest.mark.parametrize("tolerance", [0.0, 1.0, 1.4, 1.5, 2.0, 2.9])
def test_pointing_game_tolerance_by_hand(masks, tolerance):
    """Quantus 0.6.0's PointingGame has no tolerance: a brute-force Euclidean distance to the object."""
    peaks = [[(0, 0)], [(0, 3), (5, 1)], [(0, 1)]]  # √2, then 2 and 0 (a tie), then √8 from the object
    maps = np.zeros((B, H, W))
    for b, where in enumerate(peaks):
        for p in where:
            maps[b][p] = 1.0
    expected = []
    for b, where in enumerate(peaks):
        on = np.argwhere(masks[b])
        distance = [np.min(np.hypot(*(on - np.array(p)).T)) for p in where]  # to the nearest object pixel
        expected.append(max(distance) <= tolerance)
    np.testing.assert_array_equal(evaluate.pointing_game(maps[:, None], masks, tolerance=tolerance)[:, 0], expected)


# -------------------------------------------------------------------------------- complexity
@pytest.mark.parametrize(
    "name, cls",
    [("sparseness", "Sparseness"), ("complexity", "Complexity"), ("effective_complexity", "EffectiveComplexity")],
)
def test_complexity_matches_quantus(data, name, cls):
    x, x_t, y, a_t = data
    a = _common.normalise_by_max(a_t[:, None])[:, 0]  # per input, so that Quantus' batch maximum is not needed
    options = {"eps": 0.3} if name == "effective_complexity" else {}
    metric = getattr(quantus, cls)(normalise=False, **options, disable_warnings=True)
    reference = np.asarray(
        metric(model=None, x_batch=x_t, y_batch=y, a_batch=a.astype(np.float32).copy(), channel_first=True),
        dtype=np.float64,
    )
    got = getattr(evaluate, name)(maps=a.astype(np.float32), normalise=False, **options)
    np.testing.assert_allclose(got[:, 0], reference, **TOL)


def test_quantus_normalises_over_the_batch_and_ours_per_map(data):
    """Quantus divides every map by the batch's largest value, so an input's score moves when another
    input joins the batch; ours divides each map by its own. Effective complexity counts the values
    above ``eps`` after that division, so it shows it."""
    x, x_t, y, a_t = data

    def effective_complexity(a, x):
        metric = quantus.EffectiveComplexity(eps=0.3, disable_warnings=True)  # normalise=True, abs=True
        scores = metric(model=None, x_batch=x, y_batch=np.zeros(len(x), int), a_batch=a, channel_first=True)
        return np.asarray(scores, dtype=np.float64)

    louder = 4 * a_t[:1]  # another input, its map peaking 4 times higher
    quantus_alone = effective_complexity(a_t, x_t)
    quantus_joined = effective_complexity(np.concatenate([a_t, louder]), np.concatenate([x_t, x_t[:1]]))[:B]
    assert (quantus_joined < quantus_alone).all()  # a higher batch maximum: fewer values above eps
    ours_alone = evaluate.effective_complexity(maps=a_t, eps=0.3)[:, 0]
    ours_joined = evaluate.effective_complexity(maps=np.concatenate([a_t, louder]), eps=0.3)[:B, 0]
    np.testing.assert_array_equal(ours_joined, ours_alone)
    # ours is Quantus on a batch of one, where the batch maximum is the map's own
    np.testing.assert_array_equal(
        ours_alone, [effective_complexity(a_t[b : b + 1], x_t[b : b + 1])[0] for b in range(B)]
    )


def test_discrete_entropy_matches_quantus(data):
    from quantus.functions.complexity_func import discrete_entropy

    a = data[3]
    got = evaluate.randomisation.discrete_entropy(a[:, None])
    np.testing.assert_allclose(got[:, 0], [discrete_entropy(a=m, x=None) for m in a], rtol=1e-12)


# ----------------------------------------------------------------------------- randomisation
def test_random_logit_matches_quantus(twins, data, monkeypatch):
    model, twin = twins
    x, x_t, y, _ = data
    a_t = torch_gradient(twin, x_t, y)
    draws = np.array([seeded_rng(0, "random_logit", b).integers(0, CLASSES - 1) for b in range(B)])
    monkeypatch.setattr(np.random, "randint", Feed([draws]))
    reference = run_quantus(
        quantus.RandomLogit(num_classes=CLASSES, normalise=False, disable_warnings=True),
        twin,
        x_t,
        y,
        a_t,
        explain_func=torch_gradient,
    )
    monkeypatch.undo()
    got = evaluate.random_logit(model, x, "gradient", y[:, None], normalise=False)
    np.testing.assert_allclose(got[:, 0], reference, **TOL)


def keras_randomised_weights(model, seed):
    """Our re-initialisation of every weighted layer, ``{path: [kernel, bias]}`` (each layer is drawn
    from its own seed, so the weights do not depend on the order of the steps)."""
    steps = randomized_copies(model, "cascading", None, seed, "top_down")
    next(steps)  # the trained copy
    return {path: [w.numpy() for w in dict(weighted_layers(clone))[path].weights] for path, clone, _ in steps}


def twin_randomised_as_ours(model, twin, seed, monkeypatch):
    """A copy of ``twin`` that Quantus randomises into our re-initialised weights.

    Quantus randomises a PyTorch layer by calling its ``reset_parameters`` on a deep copy of the
    model; patched, that call loads the weights our re-initialisation drew for the same layer, so
    both sides explain the same randomised networks and only the metrics' arithmetic is compared.
    """
    weights = keras_randomised_weights(model, seed)
    randomised = deepcopy(twin)
    randomised.conv.ours = torch_layout(weights[model.layers[0].name])
    randomised.dense.ours = torch_layout(weights[model.layers[2].name])

    def reset_parameters(module):
        with torch.no_grad():
            module.weight.copy_(module.ours[0])
            module.bias.copy_(module.ours[1])

    monkeypatch.setattr(torch.nn.Conv2d, "reset_parameters", reset_parameters)
    monkeypatch.setattr(torch.nn.Linear, "reset_parameters", reset_parameters)
    return randomised


def check_steps(steps, reference, model, order):
    """Our steps against Quantus' ``{"original": [B], layer: [B], ...}``, layer by layer."""
    names = {"conv": model.layers[0].name, "dense": model.layers[2].name}
    assert list(reference) == ["original", *order]
    np.testing.assert_array_equal(reference["original"], 1.0)  # the original against itself
    assert [step["layer"] for step in steps] == [names[n] for n in order]
    for step, name in zip(steps, order):
        np.testing.assert_allclose(step["per_input"][:, 0], reference[name], **TOL)
        np.testing.assert_allclose(step["similarity"], np.mean(reference[name]), **TOL)
        assert np.ptp(step["per_input"]) > 0.1  # the maps really changed, and differently per input


def test_mprt_matches_quantus_on_the_same_randomised_weights(twins, data, monkeypatch):
    """Spearman of the normalised magnitudes, cascading from the output down (Quantus' defaults)."""
    model, twin = twins
    x, x_t, y, _ = data
    randomised = twin_randomised_as_ours(model, twin, 0, monkeypatch)
    reference = quantus.MPRT(disable_warnings=True)(
        model=randomised, x_batch=x_t, y_batch=y, channel_first=True, device="cpu", explain_func=torch_gradient
    )
    monkeypatch.undo()
    steps = evaluate.randomization_test(model, x, "gradient", y[:, None], mode="mprt", seed=0)
    check_steps(steps, reference, model, ["dense", "conv"])


def test_smooth_mprt_matches_quantus_on_the_same_randomised_weights_and_noise(twins, data, monkeypatch):
    """SmoothMPRT: each explanation the mean over ``nr_samples`` copies, the last one the input itself.

    Quantus draws new noise for every explanation it averages (the original's twice, then each
    step's); ours draws the copies once and explains the same copies at every step. Quantus is fed
    our copies at every draw, so its steps see the noise ours does.
    """
    model, twin = twins
    x, x_t, y, _ = data
    samples, magnitude = 4, 0.1
    noise = np.stack(
        [
            seeded_rng(0, "smooth_mprt", b).normal(0.0, magnitude * float(np.ptp(x[b])), (samples - 1, H, W, 1))
            for b in range(B)
        ]
    )
    std = magnitude * (x_t.max(axis=(1, 2, 3), keepdims=True) - x_t.min(axis=(1, 2, 3), keepdims=True))  # Quantus'
    one_explanation = [np.moveaxis(noise[:, s], -1, 1) / std for s in range(samples - 1)]  # its randn × std
    draws = Feed(one_explanation * 4)  # its a_batch, the original, two layers
    randomised = twin_randomised_as_ours(model, twin, 0, monkeypatch)
    monkeypatch.setattr(np.random, "randn", draws)
    monkeypatch.setattr(quantus, "explain", torch_gradient)  # SmoothMPRT calls quantus.explain, not explain_func
    reference = quantus.SmoothMPRT(nr_samples=samples, noise_magnitude=magnitude, disable_warnings=True)(
        model=randomised, x_batch=x_t, y_batch=y, channel_first=True, device="cpu", explain_func=torch_gradient
    )
    monkeypatch.undo()
    assert not draws.values  # every copy was used
    steps = evaluate.randomization_test(
        model, x, "gradient", y[:, None], mode="smooth_mprt", seed=0, nr_samples=samples, noise_magnitude=magnitude
    )
    check_steps(steps, reference, model, ["conv", "dense"])  # from the input up


def test_smooth_mprt_of_one_sample_is_mprt_from_the_input_up(twins, data):
    """The last of the ``nr_samples`` copies is the input itself: one sample, no noise."""
    model, _ = twins
    x, _, y, _ = data
    smooth = evaluate.randomization_test(model, x, "gradient", y[:, None], mode="smooth_mprt", seed=0, nr_samples=1)
    plain = evaluate.randomization_test(model, x, "gradient", y[:, None], mode="mprt", seed=0)
    assert [s["layer"] for s in smooth] == [s["layer"] for s in plain][::-1]
    # the last step has every layer random in both orders: the same network, the same maps
    np.testing.assert_allclose(smooth[-1]["per_input"], plain[-1]["per_input"], rtol=1e-12)


def test_efficient_mprt_matches_quantus_on_the_same_randomised_weights(twins, data, monkeypatch):
    """The ratio of the maps' discrete entropies (100 bins), every layer random; Quantus' score is
    the relative rise, this ratio minus 1 (the ratio itself is its ``scores_fraction_explanation``)."""
    model, twin = twins
    x, x_t, y, _ = data
    randomised = twin_randomised_as_ours(model, twin, 0, monkeypatch)
    metric = quantus.EfficientMPRT(compute_extra_scores=True, disable_warnings=True)
    rise = metric(
        model=randomised, x_batch=x_t, y_batch=y, channel_first=True, device="cpu", explain_func=torch_gradient
    )
    monkeypatch.undo()
    (step,) = evaluate.randomization_test(model, x, "gradient", y[:, None], mode="efficient_mprt", seed=0)
    entropies = metric.explanation_scores_by_layer
    assert list(entropies) == ["orig", "dense"]  # skip_layers: the original and the last step only
    np.testing.assert_allclose(step["complexity_original"][:, 0], entropies["orig"], **TOL)
    np.testing.assert_allclose(step["complexity_randomized"][:, 0], entropies["dense"], **TOL)
    np.testing.assert_allclose(step["per_input"][:, 0], metric.scores_extra["scores_fraction_explanation"], **TOL)
    np.testing.assert_allclose(step["per_input"][:, 0] - 1, rise, **TOL)
    np.testing.assert_allclose(step["similarity"], np.mean(step["per_input"]), rtol=1e-12)
    assert np.ptp(step["per_input"]) > 0.01


# --------------------------------------------------------------------------------- axiomatic
def test_completeness_gap_is_what_quantus_compares_for_equality(twins, data):
    """Quantus returns ``Σa == Δf`` by exact float equality; the gap it compares is ours."""
    model, twin = twins
    x, x_t, y, a_t = data
    seen = []
    metric = quantus.Completeness(
        normalise=False, output_func=lambda d: seen.append(np.asarray(d)) or d, disable_warnings=True
    )
    equal = run_quantus(metric, twin, x_t, y, a_t)
    assert not equal.any()  # exact equality of floats: always False on these arrays
    got = evaluate.completeness(model, x, ours(a_t), y[:, None])
    np.testing.assert_allclose(got[:, 0], np.abs(a_t.reshape(B, -1).sum(-1) - seen[0]), **TOL)


def test_non_sensitivity_matches_quantus(twins, data):
    model, twin = twins
    x, x_t, y, a_t = data
    a = a_t.copy()
    a[:, :, :2] = 0.0  # some features without attribution
    reference = run_quantus(quantus.NonSensitivity(disable_warnings=True), twin, x_t, y, a)
    got = evaluate.non_sensitivity(model, x, ours(a), y[:, None])
    np.testing.assert_allclose(got[:, 0], reference)


def test_input_invariance_shifts_every_pixel_where_quantus_skips_one(twins, data):
    """Quantus 0.6.0's shift leaves the first pixel unshifted, so the plain gradient fails there;
    the gradient is input invariant (Kindermans et al.), and passes here."""
    model, twin = twins
    x, x_t, y, _ = data
    a_t = torch_gradient(twin, x_t, y)
    quantus_says = run_quantus(
        quantus.InputInvariance(disable_warnings=True), twin, x_t, y, a_t, explain_func=torch_gradient
    )
    assert not quantus_says.all()
    np.testing.assert_array_equal(evaluate.input_invariance(model, x, "gradient", y[:, None]), 1.0)
    # gradient × input is not input invariant: its attributions move with the input
    assert not evaluate.input_invariance(model, x, "gradient_x_input", y[:, None]).any()
