"""saliency_kit.model.override: op-level backward rules, checked against gradients computed by hand."""

import threading

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.framework import ops as tf_ops

import saliency_kit as sk
from saliency_kit.model.override import relu_rule, rule_activation
from saliency_kit.rules import ReluFamily, as_rule

RNG = np.random.default_rng(7)
W1 = RNG.normal(size=(4, 6)).astype(np.float32) * 3.0  # large, so relu6 saturates somewhere
W2 = RNG.normal(size=(6, 2)).astype(np.float32)
X = RNG.normal(size=(5, 4)).astype(np.float32)


class HiddenRelu(keras.layers.Layer):
    """A custom layer whose ReLU is invisible from outside: computed inside ``call``."""

    def __init__(self, fn, **kwargs):
        super().__init__(**kwargs)
        self.fn = fn

    def build(self, input_shape):
        self.w = self.add_weight(shape=(4, 6), initializer="zeros", name="w")

    def call(self, x):
        return self.fn(tf.matmul(x, self.w))


def tiny(fn):
    model = keras.Sequential(
        [keras.Input((4,)), HiddenRelu(fn, name="hidden"), keras.layers.Dense(2, use_bias=False, name="out")]
    )
    model.get_layer("hidden").w.assign(W1)
    model.get_layer("out").kernel.assign(W2)
    return model


# hand-written: h = x W1, y = f(h) W2, score = y[:, 0]; dscore/dy_h = W2[:, 0] for every row
def derivative(family: ReluFamily, h):
    """f'(h) of keras.activations.relu(h, negative_slope, max_value, threshold), away from the kinks."""
    t, lo = family.threshold, family.negative_slope
    inside = h > t
    if family.max_value is not None:
        inside &= h < family.max_value
    return np.where(inside, 1.0, np.where(h <= t, lo, 0.0))


def hand_gradient(rule, family, x=X):
    h = x @ W1
    dy = np.broadcast_to(W2[:, 0], h.shape)
    if rule == "plain":
        dh = dy * derivative(family, h)
    elif rule == "guided":
        dh = np.where(dy > 0, dy * derivative(family, h), 0.0)
    else:  # deconv
        dh = np.maximum(dy, 0.0)
    return dh @ W1.T


FUNCTIONS = {
    "tf.nn.relu": (tf.nn.relu, ReluFamily()),
    "keras.ops.relu": (keras.ops.relu, ReluFamily()),
    "keras.activations.relu": (keras.activations.relu, ReluFamily()),
    "tf.nn.relu6": (tf.nn.relu6, ReluFamily(max_value=6.0)),
    "keras.ops.relu6": (keras.ops.relu6, ReluFamily(max_value=6.0)),
    "leaky": (lambda t: tf.nn.leaky_relu(t, alpha=0.3), ReluFamily(negative_slope=0.3)),
    "keras.ops.leaky_relu": (lambda t: keras.ops.leaky_relu(t, negative_slope=0.1), ReluFamily(negative_slope=0.1)),
}


def gradient_with(model, rule, x=X):
    reports = []

    @tf.function
    def grad(x):
        with relu_rule(rule) as report:
            score = model(x)[:, 0]
        reports.append(report)
        return tf.gradients(score, x)[0]

    return grad(tf.constant(x)).numpy(), reports[0]


@pytest.mark.parametrize("name", FUNCTIONS)
@pytest.mark.parametrize("rule", ["guided", "deconv"])
def test_every_relu_op_in_a_custom_call_follows_the_rule(name, rule):
    fn, family = FUNCTIONS[name]
    model = tiny(fn)
    got, report = gradient_with(model, rule)
    np.testing.assert_allclose(got, hand_gradient(rule, family), rtol=1e-5, atol=1e-5)
    assert len(report.ops) == 1 and report.complete
    assert "hidden" in report.ops[0]
    # the hand formula is not trivially the plain gradient
    assert np.abs(hand_gradient(rule, family) - hand_gradient("plain", family)).max() > 1e-2


def test_relu6_gate_closes_above_six():
    h = X @ W1
    assert (h > 6).any() and (h < 0).any(), "the test data must cover all three pieces"


def test_a_custom_rule_gets_x_y_and_dy_of_each_op():
    seen = {}

    class Record(sk.ModifiedBackprop):
        def grad(self, x, y, dy):
            seen["activation"] = self.activation
            return dy * tf.cast(x > 1.0, dy.dtype)  # a gate no built-in rule has

    model = tiny(lambda t: tf.nn.leaky_relu(t, alpha=0.25))
    got, _ = gradient_with(model, Record())
    assert seen["activation"] == ReluFamily(negative_slope=0.25)
    h = X @ W1
    expected = (np.broadcast_to(W2[:, 0], h.shape) * (h > 1.0)) @ W1.T
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_ops_outside_the_block_and_other_traces_keep_plain_gradients():
    model = tiny(tf.nn.relu)

    @tf.function
    def mixed(x):
        with relu_rule("deconv"):
            hidden = model.get_layer("hidden")(x)
        outside = tf.nn.relu(x @ W1)  # not in the block
        score = (hidden + outside) @ W2
        return tf.gradients(score[:, 0], x)[0]

    plain = hand_gradient("plain", ReluFamily())
    deconv = hand_gradient("deconv", ReluFamily())
    np.testing.assert_allclose(mixed(tf.constant(X)).numpy(), plain + deconv, rtol=1e-5, atol=1e-5)

    @tf.function
    def later(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            score = model(x)[:, 0]
        return tape.gradient(score, x)

    np.testing.assert_allclose(later(tf.constant(X)).numpy(), plain, rtol=1e-5, atol=1e-5)


def test_a_tape_around_a_call_of_the_traced_function_follows_the_rule():
    model = tiny(tf.nn.relu)

    @tf.function
    def forward(x):
        with relu_rule("guided"):
            return model(x)[:, 0]

    x = tf.constant(X)
    with tf.GradientTape() as tape:  # eager tape, compiled forward
        tape.watch(x)
        score = forward(x)
    expected = hand_gradient("guided", ReluFamily())
    np.testing.assert_allclose(tape.gradient(score, x).numpy(), expected, rtol=1e-5, atol=1e-5)

    @tf.function
    def outer(x):  # a tape inside another tf.function, around the call
        with tf.GradientTape() as tape:
            tape.watch(x)
            score = forward(x)
        return tape.gradient(score, x)

    np.testing.assert_allclose(outer(x).numpy(), expected, rtol=1e-5, atol=1e-5)


def guided_relu_by_hand():
    @tf.custom_gradient
    def relu(t):
        def grad(dy):
            return tf.where((dy > 0) & (t > 0), dy, tf.zeros_like(dy))

        return tf.nn.relu(t), grad

    return relu


def test_relu_inside_a_recurrent_layer_reaches_the_while_loop_body():
    rnn = keras.layers.SimpleRNN(5, activation="relu", name="rnn")
    model = keras.Sequential([keras.Input((6, 3)), rnn, keras.layers.Dense(2, name="out")])
    x = RNG.normal(size=(3, 6, 3)).astype(np.float32)
    got, report = gradient_with(model, "guided", x)
    assert report.complete
    assert any("while" in name for name in report.ops), report.ops

    # independent twin: the recurrence unrolled in Python with a hand-written guided ReLU
    kernel, recurrent, bias = rnn.get_weights()
    out_w, out_b = model.get_layer("out").get_weights()
    relu = guided_relu_by_hand()
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        h = tf.zeros((3, 5))
        for t in range(6):
            h = relu(xt[:, t] @ kernel + h @ recurrent + bias)
        score = (h @ out_w + out_b)[:, 0]
    expected = tape.gradient(score, xt).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6)
    assert np.abs(expected).max() > 0


def test_relu_inside_map_fn_and_cond_is_reached():
    relu = guided_relu_by_hand()
    x = tf.constant(X)
    w = tf.constant(W1)

    def body(row):
        return tf.nn.relu(row[None] @ w)[0]

    @tf.function
    def nested(x):
        with relu_rule("guided") as report:
            y = tf.map_fn(body, x)
            y = tf.cond(tf.reduce_sum(x) > -1e9, lambda: tf.nn.relu(y - 0.5), lambda: y)
        nested.report = report
        return tf.gradients(tf.reduce_sum(y @ W2[:, :1]), x)[0]

    got = nested(x).numpy()
    assert nested.report.complete and len(nested.report.ops) >= 2
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = relu(relu(x @ w) - 0.5)
        score = tf.reduce_sum(y @ W2[:, :1])
    np.testing.assert_allclose(got, tape.gradient(score, x).numpy(), rtol=1e-5, atol=1e-6)


def test_a_nested_tf_function_is_reported_not_silently_left_plain():
    @tf.function
    def inner(x):
        return tf.nn.relu(x @ W1)

    @tf.function
    def outer(x):
        with relu_rule("guided") as report:
            y = inner(x)
        outer.report = report
        return tf.gradients(y @ W2[:, :1], x)[0]

    outer(tf.constant(X))
    assert not outer.report.complete
    assert "1 ReLU-family op" in outer.report.unreached[0]


def test_entering_eagerly_is_refused():
    with pytest.raises(RuntimeError, match="tf.function"):
        with relu_rule("guided"):
            pass


def test_gradient_functions_are_registered_once_not_per_trace():
    registry = tf_ops._gradient_registry._registry  # TF-private, read only by this test
    model = tiny(tf.nn.relu)
    gradient_with(model, "guided")
    before = len(registry)
    for _ in range(5):
        gradient_with(model, sk.GuidedBackprop())  # new function, new rule object: a new trace
        gradient_with(
            keras.Sequential(
                [
                    keras.Input((4,)),
                    keras.layers.Dense(3),
                    keras.layers.Activation(
                        lambda t: rule_activation(t, sk.GuidedBackprop().bind(ReluFamily(threshold=0.5)))
                    ),
                ]
            ),
            "deconv",
        )
    assert len(registry) == before


def test_another_thread_takes_plain_gradients_meanwhile():
    model = tiny(tf.nn.relu)
    plain = hand_gradient("plain", ReluFamily())
    errors = []

    def plain_worker():
        try:
            for _ in range(20):
                x = tf.constant(X)
                with tf.GradientTape() as tape:
                    tape.watch(x)
                    score = model(x)[:, 0]
                np.testing.assert_allclose(tape.gradient(score, x).numpy(), plain, rtol=1e-5, atol=1e-5)
        except Exception as error:  # reported in the main thread
            errors.append(error)

    thread = threading.Thread(target=plain_worker)
    thread.start()
    for _ in range(5):
        got, _ = gradient_with(model, "deconv")
        np.testing.assert_allclose(got, hand_gradient("deconv", ReluFamily()), rtol=1e-5, atol=1e-5)
    thread.join()
    assert not errors, errors


# -- rule_activation: composite activations under a rule -------------------------------------------
COMPOSITE = ReluFamily(negative_slope=0.1, max_value=2.0, threshold=0.5)


def composite_derivative(h):
    return np.where((h > 0.5) & (h < 2.0), 1.0, np.where(h < 0.5, 0.1, 0.0))


@pytest.mark.parametrize("rule", ["guided", "deconv"])
@pytest.mark.parametrize("mode", ["eager", "tape_in_function", "tf.gradients"])
def test_rule_activation_on_a_composite_relu(rule, mode):
    bound = as_rule(rule).bind(COMPOSITE)
    x = tf.constant(X)

    def score_of(x):
        h = x @ W1
        return (rule_activation(h, bound) @ W2)[:, 0], h

    if mode == "eager":
        with tf.GradientTape() as tape:
            tape.watch(x)
            score, h = score_of(x)
        got = tape.gradient(score, x)
    elif mode == "tape_in_function":

        @tf.function
        def fn(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                score, _ = score_of(x)
            return tape.gradient(score, x)

        got = fn(x)
    else:
        got = tf.function(lambda x: tf.gradients(score_of(x)[0], x)[0])(x)

    h = X @ W1
    assert ((h > 0.5) & (h < 2.0)).any() and (h > 2.0).any() and (h < 0.5).any()
    dy = np.broadcast_to(W2[:, 0], h.shape)
    dh = np.where(dy > 0, dy * composite_derivative(h), 0.0) if rule == "guided" else np.maximum(dy, 0)
    np.testing.assert_allclose(got.numpy(), dh @ W1.T, rtol=1e-5, atol=1e-5)
    # the forward pass is the activation's own, bit for bit (both products by TensorFlow: NumPy's
    # BLAS may round a matrix product differently on another CPU)
    forward = keras.activations.relu(x @ W1, negative_slope=0.1, max_value=2.0, threshold=0.5)
    np.testing.assert_array_equal(score_of(x)[0].numpy(), (forward @ W2)[:, 0].numpy())


def test_a_rule_activation_inside_a_block_is_not_counted_twice():
    bound = as_rule("deconv").bind(ReluFamily(max_value=6.0))

    @tf.function
    def fn(x):
        with relu_rule("guided") as report:
            y = rule_activation(x @ W1, bound)  # its forward Relu6 feeds only the rule activation
        fn.report = report
        return tf.gradients(y @ W2[:, :1], x)[0]

    got = fn(tf.constant(X)).numpy()
    assert fn.report.ops == []
    dy = np.broadcast_to(W2[:, 0], (len(X), 6))
    np.testing.assert_allclose(got, np.maximum(dy, 0) @ W1.T, rtol=1e-5, atol=1e-5)


# -- activations made of several ops, written in a custom call ----------------------------------------
COMPOSITES = {
    "relu(max_value=3)": (lambda t: keras.activations.relu(t, max_value=3.0), ReluFamily(max_value=3.0)),
    "relu(threshold=0.5)": (lambda t: keras.activations.relu(t, threshold=0.5), ReluFamily(threshold=0.5)),
    "relu(threshold, max_value)": (
        lambda t: keras.activations.relu(t, threshold=0.5, max_value=3.0),
        ReluFamily(max_value=3.0, threshold=0.5),
    ),
    "relu(slope, max_value)": (
        lambda t: keras.activations.relu(t, negative_slope=0.1, max_value=3.0),
        ReluFamily(0.1, 3.0),
    ),
    "relu(slope, threshold)": (
        lambda t: keras.activations.relu(t, negative_slope=0.1, threshold=0.5),
        ReluFamily(0.1, None, 0.5),
    ),
    "relu(slope, max_value=6)": (
        lambda t: keras.activations.relu(t, negative_slope=0.2, max_value=6.0),
        ReluFamily(0.2, 6.0),
    ),
    "relu(slope, threshold, max_value)": (
        lambda t: keras.activations.relu(t, negative_slope=0.1, threshold=0.5, max_value=3.0),
        ReluFamily(0.1, 3.0, 0.5),
    ),
    "keras.layers.ReLU(max_value, threshold)": (
        keras.layers.ReLU(max_value=3.0, threshold=0.5),
        ReluFamily(max_value=3.0, threshold=0.5),
    ),
    "tf.minimum(tf.nn.relu)": (lambda t: tf.minimum(tf.nn.relu(t), 3.0), ReluFamily(max_value=3.0)),
    "tf.clip_by_value(tf.nn.relu)": (lambda t: tf.clip_by_value(tf.nn.relu(t), 0.0, 3.0), ReluFamily(max_value=3.0)),
    "keras.ops.clip(keras.ops.relu)": (
        lambda t: keras.ops.clip(keras.ops.relu(t), 0.0, 3.0),
        ReluFamily(max_value=3.0),
    ),
    "tf.minimum(3, tf.nn.relu6)": (lambda t: tf.minimum(3.0, tf.nn.relu6(t)), ReluFamily(max_value=3.0)),
    "tf.where(t > 0.5, t, 0)": (lambda t: tf.where(t > 0.5, t, tf.zeros_like(t)), ReluFamily(threshold=0.5)),
    "t * cast(t > 0.5)": (lambda t: t * tf.cast(t > 0.5, t.dtype), ReluFamily(threshold=0.5)),
}


def plain_gradient(model, x=X):
    x = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        score = model(x)[:, 0]
    return tape.gradient(score, x).numpy()


@pytest.mark.parametrize("name", COMPOSITES)
def test_an_activation_made_of_several_ops_takes_the_rule_as_a_whole(name):
    fn, family = COMPOSITES[name]
    model = tiny(fn)
    h = X @ W1
    if family.max_value is not None:
        assert (h > family.max_value).any(), "the data must reach the ceiling"
    assert ((h > family.threshold) & (h < (family.max_value or np.inf))).any() and (h < family.threshold).any()
    # the table's family is what the function computes: its plain gradient is the hand-written one
    np.testing.assert_allclose(plain_gradient(model), hand_gradient("plain", family), rtol=1e-5, atol=1e-5)
    for rule in ("guided", "deconv"):
        got, report = gradient_with(model, rule)
        expected = hand_gradient(rule, family)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
        assert report.complete and len(report.ops) == 1, report
        assert report.families[report.ops[0]] == family


def test_a_custom_rule_gets_the_whole_composite_activation():
    seen = {}

    class Record(sk.ModifiedBackprop):
        def grad(self, x, y, dy):
            seen["activation"] = self.activation
            seen["y"], seen["x"] = y, x
            return dy * tf.cast(x > 1.0, dy.dtype)

    model = tiny(lambda t: keras.activations.relu(t, negative_slope=0.1, threshold=0.5, max_value=3.0))

    @tf.function
    def grad(x):
        with relu_rule(Record()):
            score = model(x)[:, 0]
        g = tf.gradients(score, x)[0]
        return g, seen["x"], seen["y"]

    got, x_seen, y_seen = (t.numpy() for t in grad(tf.constant(X)))
    h = X @ W1
    assert seen["activation"] == ReluFamily(0.1, 3.0, 0.5)
    np.testing.assert_allclose(x_seen, h, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(y_seen, np.asarray(keras.activations.relu(h, 0.1, 3.0, 0.5)), rtol=1e-5, atol=1e-5)
    expected = (np.broadcast_to(W2[:, 0], h.shape) * (h > 1.0)) @ W1.T
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_a_relu_whose_output_is_also_used_elsewhere_is_one_relu_not_a_composite():
    # y = min(r, 3) + 0.1 r with r = relu(h): the ReLU is r; the min is another operation on it
    model = tiny(lambda t: (lambda r: tf.minimum(r, 3.0) + 0.1 * r)(tf.nn.relu(t)))
    h = X @ W1
    dr = np.broadcast_to(W2[:, 0], h.shape) * ((np.maximum(h, 0) < 3.0) + 0.1)
    for rule, dh in (("guided", np.where((dr > 0) & (h > 0), dr, 0.0)), ("deconv", np.maximum(dr, 0.0))):
        got, report = gradient_with(model, rule)
        np.testing.assert_allclose(got, dh @ W1.T, rtol=1e-5, atol=1e-5)
        assert [report.families[op] for op in report.ops] == [ReluFamily()]


def test_a_threshold_that_is_not_a_constant_is_reported_not_guessed():
    model = tiny(lambda t: tf.where(t > tf.reduce_mean(t), t, tf.zeros_like(t)))
    _, report = gradient_with(model, "guided")
    assert not report.complete
    assert "threshold is not a constant" in report.unsupported[0]
    with pytest.raises(ValueError, match="threshold is not a constant"):
        report.check("model 'tiny'")


def test_a_prelu_keeps_its_plain_gradient_as_at_the_layer_level():
    # a PReLU's slope is learned (a variable, one per unit): it is not of the ReLU family, and its
    # two inner Relu ops are not ReLUs of the model. Guided passes the ReLU before it only.
    alpha = np.linspace(0.1, 0.6, 6).astype(np.float32)
    prelu = keras.layers.PReLU(alpha_initializer=keras.initializers.Constant(alpha))
    prelu.build((None, 6))
    model = tiny(lambda t: prelu(tf.nn.relu(t) - 1.0))
    h = X @ W1
    r = np.maximum(h, 0) - 1.0
    assert (r < 0).any() and (r > 0).any()
    dr = np.broadcast_to(W2[:, 0], h.shape) * np.where(r > 0, 1.0, alpha)
    got, report = gradient_with(model, "guided")
    np.testing.assert_allclose(got, np.where((dr > 0) & (h > 0), dr, 0.0) @ W1.T, rtol=1e-5, atol=1e-5)
    assert [report.families[op] for op in report.ops] == [ReluFamily()] and report.complete
    assert len(report.plain) == 1 and "PReLU" in report.plain[0]


def test_a_leaky_relu_written_by_hand_is_one_activation():
    for fn in (
        lambda t: tf.nn.relu(t) - 0.2 * tf.nn.relu(-t),
        lambda t: -0.2 * tf.nn.relu(-t) + tf.nn.relu(t),
        lambda t: tf.where(t > 0, t, 0.2 * t),
        lambda t: tf.maximum(0.2 * t, t),
    ):
        for rule in ("guided", "deconv"):
            got, report = gradient_with(tiny(fn), rule)
            np.testing.assert_allclose(got, hand_gradient(rule, ReluFamily(negative_slope=0.2)), rtol=1e-5, atol=1e-5)
            assert list(report.families.values()) == [ReluFamily(negative_slope=0.2)]
