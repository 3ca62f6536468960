"""An input kind declared by a test alone: integer ids read by a one-hot ``CategoryEncoding``,
explained at its output as token ids are at their ``Embedding``'s, with nothing in the package
changed. Registering it is the whole of the work.

The model is linear in the one-hot codes, so its gradient and integrated gradients are closed
forms written out in NumPy: ``s_c = Σ_t W2[t, c] Σ_v onehot(ids)[t, v] w[v]``, the gradient
``W2[t, c] w[v]``, and integrated gradients from the baseline token's one-hot their product with
the codes' difference."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras
import numpy as np
import pytest

import saliency_kit as sk
from saliency_kit.pipeline import kinds

T, V = 4, 5
IDS = np.array([[1, 2, 0, 4], [3, 3, 1, 0]], np.int32)
W_CODE = np.array([0.5, -1.0, 2.0, 0.25, 1.5], np.float32)
W_TOP = np.array([[1.0, -0.5], [0.3, 0.8], [-1.2, 0.4], [0.6, 1.1]], np.float32)


def _is_one_hot(layer):
    return isinstance(layer, keras.layers.CategoryEncoding) and layer.output_mode == "one_hot"


ONE_HOT = kinds.IdsKind(
    label="one-hot",
    reads=_is_one_hot,
    vocabulary=lambda layer: layer.num_tokens,
    layer_name="CategoryEncoding",
    summary="categorical codes, explained at their one-hot encoding",
)


@pytest.fixture
def one_hot_kind():
    kinds.register(ONE_HOT)
    yield ONE_HOT
    kinds.unregister(ONE_HOT.label)


@pytest.fixture(scope="module")
def model():
    ids = keras.Input((T,), dtype="int32", name="ids")
    codes = keras.layers.CategoryEncoding(num_tokens=V, output_mode="one_hot", name="onehot")(ids)
    per_code = keras.layers.Dense(1, use_bias=False, name="code")
    top = keras.layers.Dense(2, use_bias=False, name="top")
    out = top(keras.layers.Flatten()(per_code(codes)))
    built = keras.Model(ids, out, name="codes")
    per_code.kernel.assign(W_CODE[:, None])
    top.kernel.assign(W_TOP)
    return built


def _one_hot(ids):
    return np.eye(V, dtype=np.float32)[ids]


def test_without_the_kind_the_codes_are_refused_in_one_line_naming_the_kinds(model):
    with pytest.raises(ValueError, match=r"nothing to explain.*integers that feed no Embedding;"):
        sk.explain(model, IDS, "gradient", targets=0)


def test_the_gradient_is_the_closed_form_at_the_codes(model, one_hot_kind):
    expl = sk.explain(model, IDS, "gradient", targets=[[0, 1]] * len(IDS))
    assert expl.parts == {"ids": "one-hot"}
    assert expl.attributions.shape == (len(IDS), 2, T, V) and expl.maps.shape == (len(IDS), 2, T)
    for k in range(2):
        hand = np.broadcast_to(W_TOP[:, k][:, None] * W_CODE[None, :], (len(IDS), T, V))
        np.testing.assert_allclose(expl.attributions[:, k], hand, rtol=1e-6)
        np.testing.assert_allclose(expl.maps[:, k], hand.sum(-1), rtol=1e-6)


def test_integrated_gradients_from_the_baseline_token_is_exact_and_complete(model, one_hot_kind):
    expl = sk.explain(model, IDS, "integrated_gradients", targets=1, steps=4, baseline_token=2)
    difference = _one_hot(IDS) - _one_hot(np.full_like(IDS, 2))
    hand = difference * (W_TOP[:, 1][:, None] * W_CODE[None, :])
    np.testing.assert_allclose(expl.attributions[:, 0], hand, rtol=1e-5, atol=1e-6)
    scores = model.predict(IDS, verbose=0)[:, 1] - model.predict(np.full_like(IDS, 2), verbose=0)[:, 1]
    np.testing.assert_allclose(expl.attributions[:, 0].sum(axis=(1, 2)), scores, rtol=1e-5, atol=1e-6)


def test_ids_outside_the_vocabulary_are_refused_naming_the_layer(model, one_hot_kind):
    bad = IDS.copy()
    bad[1, 2] = V
    with pytest.raises(ValueError, match=rf"CategoryEncoding 'onehot' must lie in \[0, {V}\).*position \[1, 2\]"):
        sk.explain(model, bad, "gradient", targets=0)


def test_a_label_is_registered_once(one_hot_kind):
    with pytest.raises(ValueError, match="already called 'one-hot'"):
        kinds.register(ONE_HOT)
    assert [kind.label for kind in kinds.kinds()] == ["embedding", "one-hot"]
    with pytest.raises(ValueError, match="feed no Embedding or CategoryEncoding"):
        sk.explain(keras.Sequential([keras.Input((3,), dtype="int32"), keras.layers.Dense(1)]), IDS[:, :3])
