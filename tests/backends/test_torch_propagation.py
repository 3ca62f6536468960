"""LRP and DeepLIFT through custom layers on PyTorch: a call that is linear around a sublayer a rule
covers is explained (LRP-ε against NumPy written independently of the library, conservation,
DeepLIFT's summation to delta), one computing a softmax itself is refused in one line naming the
layer and the operation, and KerasHub's ``TransformerEncoder`` (attention, layer norms, a
residual sum, GELU) sums to delta under DeepLIFT."""

import keras
import numpy as np
import pytest
from propagation.numpy_reference import numpy_deeplift

import saliency_kit as sk
from saliency_kit.propagation import composites
from saliency_kit.propagation.lrp import rewrite_lrp
from saliency_kit.propagation.lrp_rules import Epsilon

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "torch", reason="runs in the PyTorch process: KERAS_BACKEND=torch pytest tests/backends"
)


class Residual(keras.layers.Layer):
    """A custom layer: a dense sublayer (ReLU) and a residual sum, ``x + 0.5 · relu(x W + b)``."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.inner = keras.layers.Dense(6, activation="relu")

    def call(self, x):
        return x + 0.5 * self.inner(x)


class Squashing(keras.layers.Layer):
    """A custom layer whose call computes a softmax of the explained values itself."""

    def call(self, x):
        return keras.ops.softmax(x, axis=-1) * x


def _residual_model(seed, biases=True):
    rng = np.random.default_rng(seed)
    inp = keras.Input((6,))
    model = keras.Model(inp, keras.layers.Dense(3)(Residual(name="residual")(inp)))
    for variable in model.weights:
        value = rng.normal(scale=0.5, size=variable.shape) if biases or "bias" not in variable.path else 0.0
        variable.assign(np.broadcast_to(value, variable.shape).astype(np.float32))
    return model


def input_relevance(rewritten, x, column):
    """The input gradient of ``rewritten``'s output ``column`` (its relevance, ``input_relevance=True``)."""
    import torch

    z = torch.tensor(x, requires_grad=True)
    (grad,) = torch.autograd.grad(rewritten(z)[:, column].sum(), z)
    return grad.detach().cpu().numpy()


def stab(d, eps):
    return d + eps * np.where(d >= 0, 1.0, -1.0)


def numpy_residual_epsilon(x, W1, b1, W2, b2, column, eps):
    """LRP-ε of ``(x + 0.5 · relu(x W1 + b1)) W2 + b2`` for output ``column`` (``x [I]``): ε at
    both dense layers, the ReLU passing relevance on, the residual sum sharing it in proportion to
    its two terms (``x`` and ``0.5 · h``)."""
    z1 = x @ W1 + b1
    h = np.maximum(z1, 0.0)
    y = x + 0.5 * h
    z2 = y @ W2 + b2
    R2 = np.where(np.arange(z2.size) == column, z2, 0.0)
    R_y = y * (W2 @ (R2 / stab(z2, eps)))
    share = np.divide(R_y, y, out=np.zeros_like(y), where=y != 0)
    R_h = 0.5 * h * share  # relevance of the ReLU's output: that of its input (pass)
    return x * share + x * (W1 @ (R_h / stab(z1, eps)))


def test_lrp_epsilon_through_a_custom_layer_matches_numpy():
    model = _residual_model(8)
    W1, b1, W2, b2 = (np.asarray(v, np.float64) for v in model.get_weights())
    x = np.random.default_rng(9).normal(size=(2, 6)).astype(np.float32)
    composite = composites.Composite({keras.layers.Dense: Epsilon(epsilon=0.5)})
    rewritten = rewrite_lrp(model, composite, input_relevance=True)
    for column in range(3):
        got = input_relevance(rewritten, x, column)
        for row in range(2):
            want = numpy_residual_epsilon(x[row].astype(np.float64), W1, b1, W2, b2, column, 0.5)
            np.testing.assert_allclose(got[row], want, rtol=2e-4, atol=2e-5)


def test_a_linear_custom_layer_conserves_relevance_and_sums_to_delta():
    model = _residual_model(3, biases=False)
    x = np.random.default_rng(4).normal(size=(2, 6)).astype(np.float32)
    scores = scores_of(model, x)
    explanation = sk.explain(model, x, method="lrp", composite="epsilon", epsilon=1e-9, targets=[0, 2])
    np.testing.assert_allclose(explanation.attributions.reshape(2, -1).sum(-1), scores[[0, 1], [0, 2]], rtol=1e-4)

    model = _residual_model(5)
    explanation = sk.explain(model, x, method="deeplift", targets=[1, 2], baseline=np.zeros(6, np.float32))
    delta = scores_of(model, x) - scores_of(model, np.zeros_like(x))
    np.testing.assert_allclose(explanation.attributions.reshape(2, -1).sum(-1), delta[[0, 1], [1, 2]], atol=1e-4)


def scores_of(model, x):
    return keras.ops.convert_to_numpy(model(x))


class BatchCentred(keras.layers.Layer):
    """A custom layer subtracting the mean over the whole batch (rows mix)."""

    def call(self, x):
        return x - keras.ops.mean(x)


class Squared(keras.layers.Layer):
    """A custom layer multiplying the explained values by themselves."""

    def call(self, x):
        return x * x


@pytest.mark.parametrize(
    "layer, method, words",
    [
        (Squashing, "lrp", ("softmax", "not linear")),
        (Squashing, "deeplift", ("softmax", "not linear")),
        (BatchCentred, "lrp", ("mean", "across the batch")),
        (Squared, "deeplift", ("mul", "product of two")),
    ],
    ids=lambda v: v.__name__ if isinstance(v, type) else (v if isinstance(v, str) else None),
)
def test_a_nonlinear_custom_call_is_refused_in_one_line_naming_the_layer_and_the_operation(layer, method, words):
    inp = keras.Input((6,))
    model = keras.Model(inp, keras.layers.Dense(3)(layer(name="custom")(inp)))
    x = np.random.default_rng(1).normal(size=(2, 6)).astype(np.float32)
    with pytest.raises(ValueError) as refused:
        sk.explain(model, x, method=method, targets=[0, 1])
    line = str(refused.value)
    assert "\n" not in line and "layer 'custom'" in line and all(word in line for word in words), line


class Block(keras.layers.Layer):
    """A transformer block written as a custom layer: its sublayers called in ``call`` around
    two residual sums."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.attention = keras.layers.MultiHeadAttention(2, 4, name="attention")
        self.norm1 = keras.layers.LayerNormalization(name="norm1")
        self.ff1 = keras.layers.Dense(12, activation="gelu", name="ff1")
        self.ff2 = keras.layers.Dense(8, name="ff2")
        self.norm2 = keras.layers.LayerNormalization(name="norm2")

    def call(self, h):
        h1 = self.norm1(h + self.attention(h, h))
        return self.norm2(h1 + self.ff2(self.ff1(h1)))


@pytest.mark.parametrize("method", ["lrp", "deeplift"])
def test_a_block_as_a_custom_layer_is_explained_as_the_same_functional_block(method):
    inp = keras.Input((5, 8))
    block = Block(name="block")
    custom = keras.Model(inp, keras.layers.Dense(3, name="logits")(keras.layers.Flatten()(block(inp))))
    rng = np.random.default_rng(12)
    for variable in custom.weights:
        variable.assign(rng.normal(scale=0.4, size=variable.shape).astype(np.float32))
    h1 = keras.layers.LayerNormalization(name="norm1")(
        inp + keras.layers.MultiHeadAttention(2, 4, name="attention")(inp, inp)
    )
    ff = keras.layers.Dense(8, name="ff2")(keras.layers.Dense(12, activation="gelu", name="ff1")(h1))
    h2 = keras.layers.LayerNormalization(name="norm2")(h1 + ff)
    functional = keras.Model(inp, keras.layers.Dense(3, name="logits")(keras.layers.Flatten()(h2)))
    for name in ("attention", "norm1", "ff1", "ff2", "norm2"):
        functional.get_layer(name).set_weights(getattr(block, name).get_weights())
    functional.get_layer("logits").set_weights(custom.get_layer("logits").get_weights())
    x = rng.normal(size=(2, 5, 8)).astype(np.float32)
    np.testing.assert_allclose(scores_of(custom, x), scores_of(functional, x), atol=1e-5)
    options = {"composite": "epsilon"} if method == "lrp" else {"baseline": 0.1}
    ours = sk.explain(custom, x, method, targets=[2, 0], **options).attributions
    theirs = sk.explain(functional, x, method, targets=[2, 0], **options).attributions
    np.testing.assert_allclose(ours, theirs, atol=1e-5 * np.abs(theirs).max())


def test_deeplift_sums_to_delta_through_a_kerashub_transformer_encoder():
    keras_hub = pytest.importorskip("keras_hub")
    tokens, width = 5, 8
    inp = keras.Input((tokens, width))
    h = inp + keras_hub.layers.PositionEmbedding(tokens)(inp)
    h = keras_hub.layers.TransformerEncoder(intermediate_dim=12, num_heads=2, dropout=0.0)(h)
    h = keras.layers.GlobalAveragePooling1D()(h)
    model = keras.Model(inp, keras.layers.Dense(3)(h))
    rng = np.random.default_rng(6)
    for variable in model.weights:
        value = rng.normal(scale=0.4, size=variable.shape)
        variable.assign((1.0 + 0.1 * value if variable.path.endswith("gamma") else value).astype(np.float32))
    x = rng.normal(size=(2, tokens, width)).astype(np.float32)
    baseline = np.float32(0.2) * rng.normal(size=(tokens, width)).astype(np.float32)
    explanation = sk.explain(model, x, method="deeplift", targets=[[0, 2]] * 2, baseline=baseline)
    delta = scores_of(model, x) - scores_of(model, np.broadcast_to(baseline, x.shape))
    np.testing.assert_allclose(explanation.attributions.reshape(2, 2, -1).sum(-1), delta[:, [0, 2]], atol=2e-4)
    assert 1e-3 < np.abs(explanation.attributions).max() < 10


def test_torchs_own_element_wise_activations_are_explained():
    import torch

    rng = np.random.default_rng(7)
    inp = keras.Input((6,))
    h = keras.layers.Dense(5, activation=torch.tanh)(inp)
    h = keras.layers.Activation(torch.nn.functional.gelu, name="gelu")(h)
    model = keras.Model(inp, keras.layers.Dense(3)(h))
    x = rng.normal(size=(2, 6)).astype(np.float32)
    explanation = sk.explain(model, x, method="deeplift", targets=[0, 2], baseline=np.zeros(6, np.float32))
    delta = scores_of(model, x) - scores_of(model, np.zeros_like(x))
    np.testing.assert_allclose(explanation.attributions.reshape(2, -1).sum(-1), delta[[0, 1], [0, 2]], atol=1e-5)
    rewritten = rewrite_lrp(model, composites.get("epsilon"))
    assert type(rewritten.rewritten_layers["gelu"]).__name__ == "Pass"


def _in_place_copy(x, torch):
    out = torch.zeros(x.shape)
    out[:, :3] = x[:, :3]
    return out


ACCEPTED = {  # f(x, torch) of the explained x [2, 6] -> whether its output depends on x
    "reshape, sum over a row, scale": (lambda x, torch: (x + 1.0).reshape(2, 3, 2).sum(-1) * 2.0, True),
    "where on a constant condition": (lambda x, torch: torch.where(x.new_ones(x.shape) > 0, x, 0.0), True),
    "product with a constant matrix": (lambda x, torch: x @ torch.ones(6, 2), True),
    "in-place write into a constant": (_in_place_copy, True),
    "shape only": (lambda x, torch: torch.zeros_like(x) + x.shape[-1], False),
}
REFUSED = {  # f(x, torch) of the explained x [2, 6] -> the refused operation
    "sum over everything": (lambda x, torch: x.sum(), "sum"),
    "division by x": (lambda x, torch: 1.0 / x, "rtruediv"),
    "exp": (lambda x, torch: x.exp(), "exp"),
    "a comparison": (lambda x, torch: (x > 0).float() * x, "gt"),
    "a cast to integers": (lambda x, torch: x.int(), "int"),
    "a value read in Python": (lambda x, torch: x * x[0, 0].item(), "item"),
}


def _check(function):
    """:func:`check_calls` on ``function(x, torch)``, ``x`` explained, refusing with the operation's kind."""
    import torch

    from saliency_kit.propagation.custom_torch import check_calls

    def refuse_op(layer, path, kind, name, why):
        raise ValueError(kind)

    return check_calls(None, "f", lambda x: function(x, torch), [((None, 6), "float32")], [True], [], refuse_op)


@pytest.mark.parametrize("case", ACCEPTED, ids=str)
def test_linear_torch_calls_are_accepted(case):
    function, depends = ACCEPTED[case]
    assert _check(function) is depends


@pytest.mark.parametrize("case", REFUSED, ids=str)
def test_nonlinear_torch_calls_are_refused_naming_the_operation(case):
    function, kind = REFUSED[case]
    with pytest.raises(ValueError, match=f"^{kind}$"):
        _check(function)


def test_lrp_sees_weights_changed_in_place_replaced_or_trained():
    """The rewritten copy's weights follow the model's however they change: assigned in place, set
    from NumPy, or trained by an optimizer (each checked against LRP-ε of ``x W + b`` written out,
    ``R_i = x_i W_ij z_j / stab(z_j)``, from the weights the model has then)."""
    rng = np.random.default_rng(11)
    inp = keras.Input((4,))
    model = keras.Model(inp, keras.layers.Dense(3, name="head")(inp))
    x = rng.normal(size=(5, 4)).astype(np.float32)
    eps = Epsilon().stabilizer

    def check():
        W, b = (w.astype(np.float64) for w in model.get_layer("head").get_weights())
        got = sk.explain(model, x, method="lrp", composite="epsilon", targets=[2] * 5).attributions[:, 0]
        z = x.astype(np.float64) @ W + b
        want = x * W[:, 2] * (z[:, 2:3] / stab(z[:, 2:3], eps))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)

    check()
    head = model.get_layer("head")
    head.kernel.assign(rng.normal(size=(4, 3)).astype(np.float32))  # in place
    check()
    head.set_weights([rng.normal(size=(4, 3)).astype(np.float32), rng.normal(size=3).astype(np.float32)])
    check()
    model.compile(optimizer=keras.optimizers.SGD(0.5), loss="mse")
    before = head.get_weights()[0].copy()
    model.fit(x, rng.normal(size=(5, 3)).astype(np.float32), epochs=1, batch_size=5, verbose=0)
    assert not np.allclose(head.get_weights()[0], before)
    check()


def test_deeplift_through_a_relu_large_enough_to_be_compiled_matches_numpy():
    """A ReLU whose tensor is large enough for DeepLIFT's element-wise kernel to be compiled by
    ``torch.compile`` (checked: Dynamo captured a graph) gives NumPy's Rescale multipliers."""
    import torch._dynamo

    from saliency_kit.propagation import torch_autodiff

    rng = np.random.default_rng(12)
    units = torch_autodiff.COMPILE_FROM // 2  # two rows: the ReLU's input has COMPILE_FROM elements
    inp = keras.Input((6,))
    model = keras.Model(inp, keras.layers.Dense(3)(keras.layers.Dense(units, activation="relu")(inp)))
    W1, b1 = rng.normal(scale=0.5, size=(6, units)), rng.normal(scale=0.3, size=units)
    W2, b2 = rng.normal(scale=0.01, size=(units, 3)), rng.normal(size=3)
    model.layers[1].set_weights([W1.astype(np.float32), b1.astype(np.float32)])
    model.layers[2].set_weights([W2.astype(np.float32), b2.astype(np.float32)])
    x = rng.normal(size=(2, 6)).astype(np.float32)
    captured = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    got = sk.explain(model, x, method="deeplift", targets=[0, 2]).attributions
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] > captured
    layers = [("dense", W1, b1), ("relu",), ("dense", W2, b2)]
    for row, column in enumerate((0, 2)):
        want = numpy_deeplift(layers, x[row].astype(np.float64), np.zeros(6), column)
        np.testing.assert_allclose(got[row, 0], want, rtol=1e-4, atol=1e-6)
