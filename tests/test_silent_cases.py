"""Models written the way users write them, each explained correctly or refused in one line.

Every case is checked against an independent reference built here: a twin model cut before the
final squash, a channels-last twin of a model converted from PyTorch (same layers, input
transposed), a float32 twin of a half-precision model (same weights), gradients taken with a
plain ``tf.GradientTape``.
"""

import os
import re
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf
from method_support import input_methods, small_options

import saliency_kit as sk
from saliency_kit import errors, methods
from saliency_kit.pipeline import api

RNG = np.random.default_rng(24)


def tape_gradient(model, x, column):
    """∂model(x)[:, column]/∂x with a plain tape: the reference for the gradient method."""
    z = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(z)
        value = model(z, training=False)[:, column]
    return tape.gradient(value, z).numpy()


def assert_one_clean_line(message: str):
    assert "\n" not in message.strip(), message
    assert "in user code" not in message, message
    assert not re.search(r"[\\/][\w.-]+\.py\b|File \"", message), message


# -- 1. a final squash however it is written ----------------------------------------------------------
def sigmoid(t):
    """A function of the user's called ``sigmoid`` that is not the plain sigmoid: its logits are 2t."""
    return tf.nn.sigmoid(2.0 * t)


class SigmoidHead(keras.layers.Layer):
    """A head of one's own whose call ends in a sigmoid."""

    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.dense = keras.layers.Dense(units)

    def call(self, t):
        return tf.sigmoid(self.dense(t))


def softmax_by_hand(t):
    e = tf.exp(t - tf.reduce_max(t, axis=-1, keepdims=True))
    return e / tf.reduce_sum(e, axis=-1, keepdims=True)


def sigmoid_by_hand(t):
    return 1.0 / (1.0 + keras.ops.exp(-t))


SQUASHES = {
    "lambda_tf_sigmoid": (lambda: keras.layers.Lambda(lambda t: tf.nn.sigmoid(t)), lambda h: h),
    "keras_ops_sigmoid": (lambda: keras.ops.sigmoid, lambda h: h),
    "lambda_tf_softmax": (lambda: keras.layers.Lambda(lambda t: tf.nn.softmax(t)), lambda h: h),
    "lambda_keras_softmax": (lambda: keras.layers.Lambda(lambda t: keras.ops.softmax(t)), lambda h: h),
    "activation_lambda": (lambda: keras.layers.Activation(lambda t: keras.ops.sigmoid(t)), lambda h: h),
    "named_sigmoid_scaled": (lambda: keras.layers.Lambda(sigmoid), lambda h: 2.0 * h),
    "softmax_by_hand": (lambda: keras.layers.Lambda(softmax_by_hand), lambda h: h),
    "sigmoid_by_hand": (lambda: keras.layers.Lambda(sigmoid_by_hand), lambda h: h),
}


def _backbone():
    inputs = keras.Input((6, 6, 2))
    h = keras.layers.Conv2D(3, 3, activation="relu")(inputs)
    h = keras.layers.GlobalAveragePooling2D()(h)
    return inputs, keras.layers.Dense(4)(h)


@pytest.mark.parametrize("kind", list(SQUASHES))
def test_a_final_squash_written_as_a_lambda_or_op_is_looked_behind(kind):
    make, logits_of = SQUASHES[kind]
    inputs, h = _backbone()
    model = keras.Model(inputs, make()(h))
    twin = keras.Model(inputs, h)  # cut before the squash, the same layers
    x = RNG.normal(size=(3, 6, 6, 2)).astype("float32")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        expl = sk.explain(model, x, "gradient", targets=2)
    assert expl.options["score"] == "logits"
    scale = logits_of(1.0)
    np.testing.assert_allclose(expl.scores[:, 0], scale * np.asarray(twin(x))[:, 2], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(expl.attributions[:, 0], scale * tape_gradient(twin, x, 2), rtol=1e-4, atol=1e-6)


def test_a_layer_of_ones_own_ending_in_a_sigmoid_is_looked_behind():
    inputs = keras.Input((5,))
    hidden = keras.layers.Dense(6, activation="tanh")(inputs)
    head = SigmoidHead(3)
    model = keras.Model(inputs, head(hidden))
    twin = keras.Model(inputs, head.dense(hidden))
    x = RNG.normal(size=(4, 5)).astype("float32")
    expl = sk.explain(model, x, "integrated_gradients", targets=1, steps=8)
    reference = sk.explain(twin, x, "integrated_gradients", targets=1, steps=8)
    assert expl.options["score"] == "logits"
    np.testing.assert_allclose(expl.scores, np.asarray(twin(x))[:, 1:2], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(expl.attributions, reference.attributions, rtol=1e-5, atol=1e-6)
    # the scores are the logits: completeness holds for them, not for the probabilities
    np.testing.assert_allclose(expl.completeness_gap, reference.completeness_gap, atol=1e-5)


class SoftmaxInCall(keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.hidden = keras.layers.Dense(6, activation="relu")
        self.head = keras.layers.Dense(3)

    def call(self, x):
        return keras.ops.softmax(self.head(self.hidden(x)))


def test_a_subclassed_model_whose_call_ends_in_a_softmax_is_scored_on_its_logits():
    net = SoftmaxInCall(name="softmax_in_call")
    x = RNG.normal(size=(3, 5)).astype("float32")
    net(x)
    twin = keras.Sequential([keras.Input((5,)), net.hidden, net.head])
    expl = sk.explain(net, x, "gradient", targets=0)
    assert expl.options["score"] == "logits"
    np.testing.assert_allclose(expl.scores[:, 0], np.asarray(twin(x))[:, 0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(expl.attributions[:, 0], tape_gradient(twin, x, 0), rtol=1e-4, atol=1e-6)


_compiled_sigmoid = tf.function(tf.nn.sigmoid, autograph=False)


def test_a_squash_that_cannot_be_looked_behind_warns_once_and_the_scores_are_what_was_differentiated():
    inputs = keras.Input((5,))
    model = keras.Model(inputs, keras.layers.Lambda(lambda t: _compiled_sigmoid(t))(keras.layers.Dense(3)(inputs)))
    x = RNG.normal(size=(2, 5)).astype("float32")
    with pytest.warns(UserWarning, match="cannot be reached") as caught:
        expl = sk.explain(model, x, "gradient", targets=1)
    assert len([w for w in caught if "cannot be reached" in str(w.message)]) == 1
    assert expl.options["score"] == "output"
    np.testing.assert_allclose(expl.scores[:, 0], np.asarray(model(x))[:, 1], rtol=1e-6)
    np.testing.assert_allclose(expl.attributions[:, 0], tape_gradient(model, x, 1), rtol=1e-4, atol=1e-7)


# -- 2. channels-first input converted inside the model -----------------------------------------------
def _converted_pair(convert):
    """A model taking [B, C, H, W] converted by ``convert`` before channels-last layers, and its
    channels-last twin: the same layers (shared weights) on [B, H, W, C]."""
    conv = keras.layers.Conv2D(4, 3, activation="relu", name="conv")
    pool, dense = keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(3)
    last = keras.Input((10, 7, 3))
    twin = keras.Model(last, dense(pool(conv(last))))
    first = keras.Input((3, 10, 7))
    model = keras.Model(first, dense(pool(conv(convert(first)))))
    return model, twin


CONVERSIONS = {
    "permute": lambda t: keras.layers.Permute((2, 3, 1))(t),
    "lambda_transpose": lambda t: keras.layers.Lambda(lambda u: tf.transpose(u, [0, 2, 3, 1]))(t),
    "ops_transpose": lambda t: keras.ops.transpose(keras.layers.Rescaling(1.0)(t), (0, 2, 3, 1)),
}
CHANNEL_METHODS = [
    ("gradient", {}),
    ("integrated_gradients", {"steps": 4}),
    ("gradcam", {"layer": "conv"}),
    ("occlusion", {"window": 3, "stride": 2}),
    ("layercam", {"layer": "conv"}),
    ("scorecam", {"layer": "conv"}),
    ("guided_backprop", {}),
]


@pytest.mark.parametrize("conversion", list(CONVERSIONS))
def test_a_model_converted_from_pytorch_gets_the_maps_of_its_channels_last_twin(conversion):
    model, twin = _converted_pair(CONVERSIONS[conversion])
    x = RNG.normal(size=(2, 10, 7, 3)).astype("float32")
    first = np.ascontiguousarray(np.transpose(x, (0, 3, 1, 2)))
    for method, options in CHANNEL_METHODS:
        expl = sk.explain(model, first, method, targets=1, **options)
        reference = sk.explain(twin, x, method, targets=1, **options)
        assert expl.maps.shape == (2, 1, 10, 7), method
        np.testing.assert_allclose(expl.maps, reference.maps, rtol=1e-4, atol=1e-6, err_msg=method)
        if expl.attributions.ndim == 5:
            np.testing.assert_allclose(
                expl.attributions,
                np.transpose(reference.attributions, (0, 1, 4, 2, 3)),
                rtol=1e-4,
                atol=1e-6,
                err_msg=method,
            )


def test_a_conversion_that_cannot_be_followed_is_refused_until_channels_axis_is_given():
    # BGR -> RGB by a gather after the transpose: where the channels go cannot be followed
    model, twin = _converted_pair(
        lambda t: keras.layers.Lambda(lambda u: tf.gather(tf.transpose(u, [0, 2, 3, 1]), [2, 1, 0], axis=-1))(t)
    )
    x = RNG.normal(size=(1, 10, 7, 3)).astype("float32")
    first = np.ascontiguousarray(np.transpose(x, (0, 3, 1, 2)))
    with pytest.raises(ValueError, match="pass channels_axis=1") as caught:
        sk.explain(model, first, "gradient", targets=0)
    assert_one_clean_line(str(caught.value))
    expl = sk.explain(model, first, "gradient", targets=0, channels_axis=1)
    reference = sk.explain(twin, x[..., ::-1].copy(), "gradient", targets=0)  # the twin sees RGB
    np.testing.assert_allclose(expl.maps, reference.maps, rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match="channels_axis must be 1 .* or -1"):
        sk.explain(model, first, "gradient", targets=0, channels_axis=2)
    # the check made before any work (the command line's pre-flight) takes the same axis
    with pytest.raises(ValueError, match="pass channels_axis=1"):
        api.check(model, first, "gradcam")
    assert api.check(model, first, "smoothgrad", channels_axis=1, samples=2)["samples"] == 2
    with pytest.raises(ValueError, match="channels_axis must be 1 .* or -1"):
        api.check(model, first, "gradient", channels_axis=2)


def test_channels_in_a_middle_axis_are_refused():
    inputs = keras.Input((10, 3, 7))  # [B, H, C, W]
    h = keras.layers.Permute((1, 3, 2))(inputs)
    model = keras.Model(inputs, keras.layers.Dense(2)(keras.layers.Flatten()(keras.layers.Conv2D(2, 3)(h))))
    with pytest.raises(ValueError, match="input axis 2") as caught:
        sk.explain(model, RNG.normal(size=(1, 10, 3, 7)).astype("float32"), "gradient", targets=0)
    assert_one_clean_line(str(caught.value))


# -- 3. half precision --------------------------------------------------------------------------------
def _half_pair(dtype):
    """A model whose layers are ``dtype`` and its float32 twin with the same weights."""

    def build(d):
        inputs = keras.Input((8, 8, 3), dtype=d)
        h = keras.layers.Conv2D(4, 3, activation="relu", dtype=d, name="conv")(inputs)
        h = keras.layers.GlobalAveragePooling2D(dtype=d)(h)
        return keras.Model(inputs, keras.layers.Dense(3, dtype=d)(h))

    keras.utils.set_random_seed(7)
    half, full = build(dtype), build("float32")
    full.set_weights([np.asarray(w, np.float32) for w in half.get_weights()])
    return half, full


#: the relative error one 16-bit rounding brings (unit roundoff: 2^-11 for float16, 2^-8 for
#: bfloat16), times the ~20 roundings a value meets through this small network and its gradient
TOLERANCE = {"float16": 20 * 2.0**-11, "bfloat16": 20 * 2.0**-8}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_every_method_works_on_a_half_precision_model_and_agrees_with_its_float32_twin(dtype):
    half, full = _half_pair(dtype)
    x = np.random.default_rng(3).uniform(0, 1, size=(2, 8, 8, 3)).astype("float32")
    x = x.astype(dtype if dtype == "float16" else "float32")  # bfloat16 inputs are cast by the model
    for name in input_methods():
        options = small_options(name, x.shape[1:])
        if name == "expected_gradients":
            options["baselines"] = np.zeros((2, 8, 8, 3), np.float32)
        if name in ("xrai",):  # region ranking is discrete: compare the method's input, IG, below
            expl = sk.explain(half, x, name, targets=1, **options)
            assert np.isfinite(expl.maps).all()
            continue
        expl = sk.explain(half, x, name, targets=1, **options)
        reference = sk.explain(full, np.asarray(x, np.float32), name, targets=1, **options)
        assert expl.attributions.dtype == np.float32 and np.isfinite(expl.attributions).all(), name
        size = max(np.abs(reference.maps).max(), 1e-3)
        if {"seed", "steps", "samples"} & set(methods.get(name).defaults):
            # the model runs at many points (a path, noisy copies drawn in the input's dtype): a point
            # whose rounding lands it on the other side of a ReLU's kink moves a few pixels, not the
            # map, so the map is compared as a whole
            error = np.abs(expl.maps - reference.maps).sum() / np.abs(reference.maps).sum()
            assert error <= TOLERANCE[dtype], (name, error)
        else:
            np.testing.assert_allclose(expl.maps, reference.maps, rtol=0, atol=TOLERANCE[dtype] * size, err_msg=name)
        np.testing.assert_allclose(
            expl.scores, reference.scores, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype], err_msg=name
        )


# -- 4. errors inside the compiled kernel are one line ------------------------------------------------
def _tanh_model():
    inputs = keras.Input((6, 6, 2))
    h = keras.layers.Conv2D(3, 3, activation="tanh", name="conv")(inputs)
    return keras.Model(inputs, keras.layers.Dense(2)(keras.layers.GlobalAveragePooling2D()(h)))


class TinyNet(keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.conv = keras.layers.Conv2D(3, 3, activation="relu", name="conv")
        self.pool = keras.layers.GlobalAveragePooling2D()
        self.head = keras.layers.Dense(2)

    def call(self, x):
        return self.head(self.pool(self.conv(x)))


@pytest.fixture
def clashing_method():
    """A method of one's own that mixes float32 and float64 inside its formula."""

    @methods.register("float64_gradient", summary="a dtype clash inside the kernel", reduce="sum")
    def float64_gradient(ctx):
        return ctx.gradients(ctx.inputs) * tf.constant(2.0, tf.float64)

    yield "float64_gradient"
    methods.unregister("float64_gradient")


def test_errors_inside_the_kernel_reach_the_user_as_one_line(clashing_method):
    x = RNG.normal(size=(2, 6, 6, 2)).astype("float32")
    net = TinyNet(name="tiny_net")
    net(x)
    cases = [
        (lambda: sk.explain(_tanh_model(), x, "guided_backprop", targets=0), ValueError, "no ReLU-family"),
        (lambda: sk.explain(net, x, "gradcam", targets=0, layer="conv"), ValueError, "subclassed"),
        (
            lambda: sk.explain(_tanh_model(), x, clashing_method, targets=0),
            errors.ComputeError,
            "float64_gradient on model .* failed inside the compiled computation: .*float64",
        ),
    ]
    for run, kind, pattern in cases:
        with pytest.raises(kind, match=pattern) as caught:
            run()
        assert_one_clean_line(str(caught.value))
        assert caught.value.__cause__ is None


def test_an_op_failing_at_run_time_is_one_line_too():
    def at_most_ten(t):
        with tf.control_dependencies([tf.debugging.assert_less(t, 10.0, message="inputs too large")]):
            return tf.identity(t)

    inputs = keras.Input((3,))
    checked = keras.layers.Lambda(at_most_ten, output_shape=(3,))
    model = keras.Model(inputs, keras.layers.Dense(2)(checked(inputs)))
    with pytest.raises(errors.ComputeError, match="inputs too large") as caught:
        sk.explain(model, np.full((1, 3), 50.0, np.float32), "gradient", targets=0)
    assert_one_clean_line(str(caught.value))


def test_one_line_strips_tensorflows_frames_and_paths():
    text = (
        'in user code:\n\n    File "/x/y/engine/tf.py", line 472, in kernel  *\n        out = compute(ctx)\n\n'
        "    ValueError: model 'm' has no ReLU; received model 'm'.\n"
    )
    assert errors.one_line(ValueError(text)) == "model 'm' has no ReLU; received model 'm'."
    graph = (
        "Graph execution error:\n\nDetected at node foo defined at (most recent call last):\n"
        '  File "/usr/lib/python3.11/a.py", line 1, in <module>\n\ncondition failed: x < 10\n'
        "\t [[{{node foo}}]] [Op:__inference_kernel_9]"
    )
    assert errors.one_line(ValueError(graph)) == "condition failed: x < 10"


# -- 5. the ImageNet class list most users have --------------------------------------------------------
def imagenet_like_names():
    """1,000 names with "crane" (134, 517) and "maillot" (638, 639) twice, as the common list has."""
    names = [f"class {i}" for i in range(1000)]
    names[134] = names[517] = "crane"
    names[638] = names[639] = "maillot"
    return names


def test_a_class_list_with_repeated_names_is_accepted_with_one_warning(tmp_path):
    from saliency_kit import targets, zoo

    (tmp_path / "imagenet_classes.txt").write_text("\n".join(imagenet_like_names()) + "\n")
    (tmp_path / "net.toml").write_text(
        'constructor = "MobileNetV2"\ninput_size = [32, 32]\nclasses = "imagenet_classes.txt"\n'
    )
    with pytest.warns(UserWarning) as caught:
        spec = zoo.get_spec(str(tmp_path / "net.toml"))
    assert len(caught) == 1
    assert "'crane' (classes 134, 517)" in str(caught[0].message)
    assert "'maillot' (classes 638, 639)" in str(caught[0].message)
    assert len(spec.class_names) == 1000
    assert targets.parse_string("class 5", 1000, spec.class_names).parts == (("class", 5),)
    assert targets.parse_string("517", 1000, spec.class_names).parts == (("class", 517),)
    for name, indices in (("crane", "134, 517"), ("Maillot", "638, 639")):
        with pytest.raises(ValueError, match=f"names several classes \\({indices}\\)") as refused:
            targets.parse_string(name, 1000, spec.class_names)
        assert_one_clean_line(str(refused.value))
    with pytest.raises(ValueError, match="names several classes"):
        targets.parse(["crane"], 1, 1000, spec.class_names)


def test_the_command_line_keeps_outputs_of_repeated_names_apart(tmp_path, capsys):
    from cli_support import save_tiny_model
    from PIL import Image

    from saliency_kit.cli import main

    model = save_tiny_model(tmp_path / "wide.keras", classes=1000)
    (tmp_path / "imagenet_classes.txt").write_text("\n".join(imagenet_like_names()) + "\n")
    (tmp_path / "wide.keras.toml").write_text('classes = "imagenet_classes.txt"\n')
    image = tmp_path / "photo.png"
    Image.fromarray(RNG.integers(0, 255, (32, 32, 3), dtype=np.uint8)).save(image)
    out = tmp_path / "out"
    assert (
        main(
            [
                "explain",
                str(image),
                "--model",
                str(model),
                "--method",
                "gradient",
                "--target",
                "134",
                "--target",
                "517",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert len([line for line in err.splitlines() if "several classes" in line]) == 1
    written = sorted(p.name for p in (out / "photo").iterdir() if p.name.endswith("heatmap.png"))
    assert len(written) == 2 and any("c134" in n for n in written) and any("c517" in n for n in written)
    assert main(["explain", str(image), "--model", str(model), "--target", "crane", "--out", str(out)]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(lines) == 1 and "134, 517" in lines[0]


def test_the_command_line_prints_a_kernel_error_as_one_line(tmp_path, capsys):
    from PIL import Image

    from saliency_kit.cli import main

    path = tmp_path / "tanh.keras"
    inputs = keras.Input((16, 16, 3))
    h = keras.layers.Conv2D(3, 3, activation="tanh")(inputs)
    keras.Model(inputs, keras.layers.Dense(2)(keras.layers.GlobalAveragePooling2D()(h))).save(path)
    image = tmp_path / "photo.png"
    Image.fromarray(RNG.integers(0, 255, (16, 16, 3), dtype=np.uint8)).save(image)
    code = main(
        ["explain", str(image), "--model", str(path), "--method", "guided_backprop", "--out", str(tmp_path / "out")]
    )
    err = capsys.readouterr().err
    errors_printed = [line for line in err.splitlines() if ": error:" in line]
    # refused before any work, in flags (a usage error), since the model shows no ReLU at the layer level
    assert code == 2 and len(errors_printed) == 1, err
    assert "ReLU" in errors_printed[0] and "--method gradient" in errors_printed[0]
    assert "in user code" not in err and not re.search(r"File \"|[\\/]\w+\.py\b", err.replace(str(tmp_path), ""))
    assert os.path.exists(path)


def test_the_command_line_feeds_a_converted_model_channels_first_and_writes_maps_of_the_image_shape(tmp_path, capsys):
    from PIL import Image

    from saliency_kit.cli import main

    model, _ = _converted_pair(CONVERSIONS["permute"])  # [B, 3, 10, 7], a Permute: safe to save
    path = tmp_path / "converted.keras"
    model.save(path)
    image = tmp_path / "photo.png"
    Image.fromarray(RNG.integers(0, 255, (40, 28, 3), dtype=np.uint8)).save(image)
    out = tmp_path / "out"
    assert (
        main(
            [
                "explain",
                str(image),
                "--model",
                str(path),
                "--method",
                "gradient",
                "--target",
                "1",
                "--format",
                "both",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert "input 10x7" in capsys.readouterr().out
    loaded, spec = sk.load_model(str(path))
    x, _ = sk.load_images([str(image)], spec)
    assert x.shape == (1, 3, 10, 7)
    reference = sk.explain(loaded, x, "gradient", targets=1).maps[0, 0]
    (npz,) = (out / "photo").glob("gradient-*.npz")
    np.testing.assert_allclose(np.load(npz)["map"], reference, rtol=1e-5, atol=1e-7)
    (heat,) = (out / "photo").glob("gradient-*heatmap.png")
    with Image.open(heat) as picture:
        assert picture.size == (7, 10)  # width, height: the input's W and H, not (C, H)


def test_evaluation_of_a_converted_model_equals_that_of_its_channels_last_twin():
    from saliency_kit import evaluate

    model, twin = _converted_pair(CONVERSIONS["permute"])
    x = RNG.uniform(0, 1, size=(2, 10, 7, 3)).astype("float32")
    first = np.ascontiguousarray(np.transpose(x, (0, 3, 1, 2)))
    expl = sk.explain(model, first, "gradient", targets=1)
    reference = sk.explain(twin, x, "gradient", targets=1)
    for got, want in zip(evaluate.comparison_maps(expl), evaluate.comparison_maps(reference)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    curves = evaluate.deletion_insertion(model, first, expl, steps=4, score="logits")
    expected = evaluate.deletion_insertion(twin, x, reference, steps=4, score="logits")
    for name in ("deletion_curve", "insertion_curve", "random_deletion_curve"):
        np.testing.assert_allclose(curves[name], expected[name], rtol=1e-4, atol=1e-5, err_msg=name)


def test_an_overlay_refuses_a_map_reduced_over_the_wrong_axis():
    from saliency_kit import render

    image = RNG.integers(0, 255, (16, 12, 3), dtype=np.uint8)
    with pytest.raises(ValueError, match=r"a map of shape \(3, 16\) does not fit an image of 16x12") as caught:
        render.overlay(image, RNG.normal(size=(3, 16)))
    assert_one_clean_line(str(caught.value))
    assert render.overlay(image, RNG.normal(size=(4, 3))).shape == (16, 12, 3)  # a coarse CAM of the same aspect
    assert render.overlay(image, RNG.normal(size=(16, 12))).shape == (16, 12, 3)


def test_a_converted_model_around_a_channels_last_backbone_is_followed_through_its_front_only():
    from saliency_kit.model import input_axes

    backbone = keras.Sequential(
        [
            keras.Input((10, 7, 3)),
            keras.layers.Conv2D(4, 3, activation="relu", name="conv"),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(3),
        ],
        name="backbone",
    )
    first = keras.Input((3, 10, 7))
    model = keras.Model(first, backbone(keras.layers.Permute((2, 3, 1))(first)), name="converted")
    assert input_axes.front_of(model) is not None  # the backbone is not traced to find the axes
    assert input_axes.traced_channel_axis(model, (3, 10, 7), "float32").axis == 1
    x = RNG.normal(size=(2, 10, 7, 3)).astype("float32")
    expl = sk.explain(
        model, np.ascontiguousarray(np.transpose(x, (0, 3, 1, 2))), "gradcam", targets=2, layer="backbone/conv"
    )
    np.testing.assert_allclose(
        expl.maps, sk.explain(backbone, x, "gradcam", targets=2, layer="conv").maps, rtol=1e-4, atol=1e-6
    )
