"""Target objects (``sk.targets.region``, ``box``, ``output``, ``unit``, ``Target``) against closed
forms, twin models cut or pruned by hand, and NumPy formulas; every registered method takes every
kind; results do not depend on ``batch_size``."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from method_support import ForwardCounter, input_methods, small_options

import saliency_kit as sk
from saliency_kit import engine

H = W = 6


# ------------------------------------------------------------------------------------- models
def one_by_one(bias=True):
    """``y = x · K + b``: a 1×1 convolution of a [6, 6, 3] input into 4 classes."""
    inputs = keras.Input((H, W, 3))
    conv = keras.layers.Conv2D(4, 1, use_bias=bias, name="head")
    model = keras.Model(inputs, conv(inputs))
    rng = np.random.default_rng(1)
    weights = [rng.normal(size=(1, 1, 3, 4)).astype("float32")]
    if bias:
        weights.append(rng.normal(size=4).astype("float32"))
    conv.set_weights(weights)
    return model, weights


def segmenter():
    inputs = keras.Input((H, W, 3))
    h = keras.layers.Conv2D(4, 3, padding="same", activation="relu", name="c1")(inputs)
    return keras.Model(inputs, keras.layers.Conv2D(5, 1, name="logits")(h))


N, C = 3, 2  # proposals, classes of the detectors


def linear_detector(classes=C):
    """Raw proposals [B, N, 4 + 1 + C] linear in the input: well-formed boxes from the bias."""
    inputs = keras.Input((4, 4, 1))
    dense = keras.layers.Dense(N * (5 + classes), name="dense")
    out = keras.layers.Reshape((N, 5 + classes))(dense(keras.layers.Flatten()(inputs)))
    model = keras.Model(inputs, out)
    rng = np.random.default_rng(2)
    kernel = (0.05 * rng.normal(size=(16, N * (5 + classes)))).astype("float32")
    bias = np.zeros((N, 5 + classes), np.float32)
    bias[:, :4] = [[0.2, 0.3, 2.1, 2.4], [1.1, 0.9, 3.3, 3.6], [0.4, 1.6, 2.8, 3.9]]
    bias[:, 4] = [0.8, 0.6, 0.7]
    bias[:, 5:] = rng.normal(size=(N, classes))
    dense.set_weights([kernel, bias.reshape(-1)])
    return model, kernel, bias.reshape(-1)


def conv_detector():
    inputs = keras.Input((H, W, 3))
    h = keras.layers.Conv2D(4, 3, padding="same", activation="relu", name="c1")(inputs)
    dense = keras.layers.Dense(N * (5 + C), name="dense")
    out = keras.layers.Reshape((N, 5 + C))(dense(keras.layers.Flatten()(h)))
    model = keras.Model(inputs, out)
    kernel, bias = dense.get_weights()
    bias = bias.reshape(N, 5 + C)
    bias[:, :4] = [[0.5, 0.5, 3.0, 3.5], [2.0, 1.0, 5.0, 4.5], [1.0, 2.5, 4.0, 5.5]]
    bias[:, 4] = [0.9, 0.5, 0.7]
    dense.set_weights([0.05 * kernel, bias.reshape(-1)])
    return model


def two_heads():
    inputs = keras.Input((H, W, 3))
    h = keras.layers.Conv2D(4, 3, padding="same", activation="relu", name="c1")(inputs)
    flat = keras.layers.GlobalAveragePooling2D()(h)
    a = keras.layers.Dense(3, name="a")(flat)
    b = keras.layers.Dense(2, name="b")(keras.layers.Dense(5, activation="relu")(flat))
    return keras.Model(inputs, [a, b])


def classifier_with_units():
    inputs = keras.Input((H, W, 3))
    h = keras.layers.Conv2D(4, 3, padding="same", activation="relu", name="c1")(inputs)
    h = keras.layers.Conv2D(3, 3, padding="same", name="c2")(h)
    d = keras.layers.Dense(4, activation="relu", name="d")(keras.layers.GlobalAveragePooling2D()(h))
    return keras.Model(inputs, keras.layers.Dense(3, activation="softmax")(d))


def images(count, shape=(H, W, 3), seed=0):
    return np.random.default_rng(seed).normal(size=(count, *shape)).astype("float32")


def tape_gradient(fn, x):
    x = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = fn(x)
    return tape.gradient(y, x).numpy()


# ---------------------------------------------------------------------------- closed forms
@pytest.mark.parametrize("reduce", ["mean", "sum"])
def test_region_gradient_of_a_one_by_one_convolution_is_the_mask_times_the_kernel_column(reduce):
    model, (kernel, bias) = one_by_one()
    x = images(3)
    masks = np.random.default_rng(3).random((3, H, W)) > 0.6
    classes = np.array([[1, 3], [0, 2], [2, 2]])
    e = sk.explain(model, x, "gradient_x_input", sk.targets.region(masks, classes, reduce=reduce))
    gradients = e.attributions / np.where(x[:, None] == 0, 1, x[:, None])
    for b in range(3):
        size = masks[b].sum() if reduce == "mean" else 1
        for k, c in enumerate(classes[b]):
            expected = masks[b][..., None] / size * kernel[0, 0, :, c]
            np.testing.assert_allclose(gradients[b, k], expected, rtol=1e-5, atol=1e-6)
            logits = x[b] @ kernel[0, 0] + bias
            np.testing.assert_allclose(e.scores[b, k], logits[masks[b], c].sum() / size, rtol=1e-5)
    assert e.targets.tolist() == classes.tolist()
    assert e.target_info[0][0] == {"kind": "region", "class": 1, "pixels": int(masks[0].sum()), "mask": "given"}


def test_a_one_pixel_region_explains_one_pixel():
    model, (kernel,) = one_by_one(bias=False)
    mask = np.zeros((H, W), bool)
    mask[2, 4] = True
    e = sk.explain(model, images(2), "gradient_x_input", sk.targets.region(mask, 3))
    expected = np.zeros((H, W, 3), np.float32)
    expected[2, 4] = kernel[0, 0, :, 3]
    np.testing.assert_allclose(e.attributions[:, 0], expected * images(2), rtol=1e-5, atol=1e-6)
    assert e.target_info[1][0]["pixels"] == 1


def test_predicted_regions_and_top_k_count_pixels_of_the_arg_max():
    model, (kernel, bias) = one_by_one()
    x = images(2, seed=5)
    logits = x @ kernel[0, 0] + bias
    winner = logits.argmax(-1)
    e = sk.explain(model, x, "gradient", sk.targets.region("predicted", "top2"))
    for b in range(2):
        counts = np.bincount(winner[b].ravel(), minlength=4)
        order = np.argsort(-counts, kind="stable")[:2]
        assert e.targets[b].tolist() == order.tolist()
        for k, c in enumerate(order):
            assert e.target_info[b][k]["pixels"] == counts[c]
            np.testing.assert_allclose(e.scores[b, k], logits[b][winner[b] == c, c].mean(), rtol=1e-5)


def _iou_and_derivatives(t, p):
    """IoU of target box t and proposal p, and ∂IoU/∂p (p's four coordinates), by hand."""
    w = min(t[2], p[2]) - max(t[0], p[0])
    h = min(t[3], p[3]) - max(t[1], p[1])
    if w <= 0 or h <= 0:
        return 0.0, np.zeros(4)
    inter = w * h
    area_t = (t[2] - t[0]) * (t[3] - t[1])
    area_p = (p[2] - p[0]) * (p[3] - p[1])
    union = area_t + area_p - inter
    dw = np.array([-float(p[0] > t[0]), 0.0, float(p[2] < t[2]), 0.0])
    dh = np.array([0.0, -float(p[1] > t[1]), 0.0, float(p[3] < t[3])])
    d_inter = h * dw + w * dh
    d_area = np.array([-(p[3] - p[1]), -(p[2] - p[0]), p[3] - p[1], p[2] - p[0]])
    d_iou = (d_inter * union - inter * (d_area - d_inter)) / union**2
    return inter / union, d_iou


def test_box_gradient_on_a_linear_detector_head_equals_the_hand_derivation():
    model, kernel, bias = linear_detector()
    x = images(2, (4, 4, 1), seed=7)
    boxes = [[[0.5, 0.5, 2.5, 2.6], [1.5, 1.4, 3.0, 3.2]], [[0.6, 1.9, 2.5, 3.5], [0.1, 0.2, 1.9, 2.2]]]
    classes = np.array([[0, 1], [1, 0]])
    e = sk.explain(model, x, "gradient", sk.targets.box(boxes, classes))
    g = sk.explain(model, x, "gradient_x_input", sk.targets.box(boxes, classes)).attributions / x[:, None]
    for b in range(2):
        y = (x[b].reshape(-1) @ kernel + bias).reshape(N, 5 + C)
        for k in range(2):
            t, c = np.array(boxes[b][k]), classes[b, k]
            p = np.exp(y[:, 5:] - y[:, 5:].max(-1, keepdims=True))
            p /= p.sum(-1, keepdims=True)
            ious = [_iou_and_derivatives(t, y[j, :4]) for j in range(N)]
            o = 1 / (1 + np.exp(-y[:, 4]))  # the objectness logit's probability
            similarity = np.array([ious[j][0] * o[j] * p[j, c] for j in range(N)])
            j = int(similarity.argmax())
            iou, d_iou = ious[j]
            dy = np.zeros((N, 5 + C))
            dy[j, :4] = d_iou * o[j] * p[j, c]
            dy[j, 4] = iou * p[j, c] * o[j] * (1 - o[j])
            dy[j, 5:] = iou * o[j] * p[j, c] * ((np.arange(C) == c) - p[j])
            expected = (kernel @ dy.reshape(-1)).reshape(4, 4, 1)
            np.testing.assert_allclose(e.scores[b, k], similarity.max(), rtol=1e-5)
            np.testing.assert_allclose(g[b, k], expected, rtol=1e-4, atol=1e-6)
    assert e.target_info[0][1]["box"] == (1.5, 1.4, 3.0, 3.2) and e.target_info[0][1]["class"] == 1


def test_box_gradient_on_a_dict_detector_keras_hubs_raw_form_equals_the_hand_derivation():
    """``{"boxes": [B, N, 4], "classification": [B, N, C]}``: no objectness (1), a sigmoid per class."""
    inputs = keras.Input((4, 4, 1))
    flat = keras.layers.Flatten()(inputs)
    box_head, class_head = keras.layers.Dense(N * 4), keras.layers.Dense(N * C)
    outputs = {
        "boxes": keras.layers.Reshape((N, 4))(box_head(flat)),
        "classification": keras.layers.Reshape((N, C))(class_head(flat)),
    }
    model = keras.Model(inputs, outputs)
    rng = np.random.default_rng(25)
    kb, kc = (0.05 * rng.normal(size=(16, N * 4))).astype("float32"), rng.normal(size=(16, N * C)).astype("float32")
    bb = np.array([[0.2, 0.3, 2.1, 2.4], [1.1, 0.9, 3.3, 3.6], [0.4, 1.6, 2.8, 3.9]], np.float32).reshape(-1)
    bc = rng.normal(size=N * C).astype("float32")
    box_head.set_weights([kb, bb])
    class_head.set_weights([kc, bc])
    x = images(2, (4, 4, 1), seed=26)
    boxes = [[[0.5, 0.5, 2.5, 2.6], [1.5, 1.4, 3.0, 3.2]], [[0.6, 1.9, 2.5, 3.5], [0.1, 0.2, 1.9, 2.2]]]
    classes = np.array([[0, 1], [1, 0]])
    e = sk.explain(model, x, "gradient", sk.targets.box(boxes, classes))
    for b in range(2):
        y_boxes = (x[b].reshape(-1) @ kb + bb).reshape(N, 4)
        p = 1 / (1 + np.exp(-(x[b].reshape(-1) @ kc + bc).reshape(N, C)))
        for k in range(2):
            t, c = np.array(boxes[b][k]), classes[b, k]
            ious = [_iou_and_derivatives(t, y_boxes[j]) for j in range(N)]
            similarity = np.array([ious[j][0] * p[j, c] for j in range(N)])
            j = int(similarity.argmax())
            iou, d_iou = ious[j]
            d_boxes, d_classes = np.zeros((N, 4)), np.zeros((N, C))
            d_boxes[j] = d_iou * p[j, c]
            d_classes[j, c] = iou * p[j, c] * (1 - p[j, c])
            expected = (kb @ d_boxes.reshape(-1) + kc @ d_classes.reshape(-1)).reshape(4, 4, 1)
            np.testing.assert_allclose(e.scores[b, k], similarity.max(), rtol=1e-5)
            np.testing.assert_allclose(e.attributions[b, k], expected, rtol=1e-4, atol=1e-6)


def test_conductance_takes_target_objects_and_keeps_its_completeness():
    """Conductance through layer ``c1`` summed over the layer: the score at the input minus at the
    baseline, for a region of a segmentation and for boxes of a detector."""
    from saliency_kit.pipeline.api import resolve_selection

    BASELINE = 2.0  # far from the inputs: the detector's score moves by more than 1e-3
    # the D-RISE maximum switches proposals along the path: the Riemann sum takes many steps there
    x = images(2, seed=27)
    masks = np.random.default_rng(27).random((2, H, W)) > 0.5
    for model, target in (
        (segmenter(), sk.targets.region(masks, [[1, 3], [0, 2]])),
        (conv_detector(), sk.targets.box([[[0, 0, 3, 3]], [[1, 2, 5, 6]]], 1)),
    ):
        e = sk.explain(model, x, "conductance", target, attribute_to="c1", steps=512, baseline=BASELINE)
        at_baseline = engine.target_scores(model, np.full_like(x, BASELINE), resolve_selection(model, x, target))
        total = e.attributions.reshape(*e.attributions.shape[:2], -1).sum(-1)
        assert np.all(np.abs(e.scores - at_baseline) > 1e-3)
        np.testing.assert_allclose(total, e.scores - at_baseline, rtol=1e-3, atol=1e-5)


def test_box_class_score_is_the_logit_of_the_best_matching_proposal_and_none_takes_its_class():
    model, kernel, bias = linear_detector()
    x = images(2, (4, 4, 1), seed=8)
    boxes = [[0.3, 0.3, 2.0, 2.3], [1.2, 1.0, 3.1, 3.5]]
    e = sk.explain(model, x, "gradient", sk.targets.box(boxes, score="class"))
    for b in range(2):
        y = (x[b].reshape(-1) @ kernel + bias).reshape(N, 5 + C)
        for k, t in enumerate(boxes):
            j = int(np.argmax([_iou_and_derivatives(np.array(t), y[i, :4])[0] for i in range(N)]))
            c = int(y[j, 5:].argmax())
            assert e.targets[b, k] == c
            np.testing.assert_allclose(e.scores[b, k], y[j, 5 + c], rtol=1e-5)
            expected = kernel.reshape(16, N, 5 + C)[:, j, 5 + c].reshape(4, 4, 1)
            np.testing.assert_allclose(e.attributions[b, k], expected, rtol=1e-5, atol=1e-7)


def test_unit_gradient_equals_the_twin_model_cut_at_that_layer():
    model = classifier_with_units()
    x = images(3, seed=9)
    cut = keras.Model(model.inputs, model.get_layer("c2").output)
    e = sk.explain(model, x, "gradient_x_input", [sk.targets.unit("c2", 1), sk.targets.unit("c2", (2, 3, 0))])
    channel = tape_gradient(lambda z: tf.reduce_mean(cut(z)[..., 1], axis=(1, 2)), x)
    element = tape_gradient(lambda z: cut(z)[:, 2, 3, 0], x)
    np.testing.assert_allclose(e.attributions[:, 0], channel * x, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(e.attributions[:, 1], element * x, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(e.scores[:, 0], cut(x).numpy()[..., 1].mean(axis=(1, 2)), rtol=1e-5)
    assert e.target_info[0] == [
        {"kind": "unit", "layer": "c2", "index": 1},
        {"kind": "unit", "layer": "c2", "index": (2, 3, 0)},
    ]
    dense = sk.explain(model, x, "gradient_x_input", sk.targets.unit(model.get_layer("d"), 2))
    cut_dense = keras.Model(model.inputs, model.get_layer("d").output)
    np.testing.assert_allclose(
        dense.attributions[:, 0], tape_gradient(lambda z: cut_dense(z)[:, 2], x) * x, rtol=1e-5, atol=1e-7
    )


def test_a_unit_inside_a_nested_model_is_reached_by_its_path():
    inner_in = keras.Input((H, W, 3))
    inner = keras.Model(inner_in, keras.layers.Conv2D(3, 3, activation="relu", name="conv")(inner_in), name="inner")
    outer_in = keras.Input((H, W, 3))
    model = keras.Model(outer_in, keras.layers.Dense(2)(keras.layers.Flatten()(inner(outer_in))))
    x = images(2, seed=10)
    e = sk.explain(model, x, "gradient_x_input", sk.targets.unit("inner/conv", 2))
    expected = tape_gradient(lambda z: tf.reduce_mean(inner(z)[..., 2], axis=(1, 2)), x) * x
    np.testing.assert_allclose(e.attributions[:, 0], expected, rtol=1e-5, atol=1e-7)


def test_output_target_equals_the_gradient_of_a_single_head_twin():
    model = two_heads()
    x = images(3, seed=11)
    twin = keras.Model(model.inputs, model.outputs[1])
    for head in ("b", 1):
        e = sk.explain(model, x, "gradient_x_input", sk.targets.output(head))
        assert e.targets.tolist() == [[0, 1]] * 3
        for k in range(2):
            expected = tape_gradient(lambda z: twin(z)[:, k], x) * x
            np.testing.assert_allclose(e.attributions[:, k], expected, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(e.scores, twin(x).numpy(), rtol=1e-5)
    top = sk.explain(model, x, "gradient", sk.targets.output("a", "top1"))
    assert top.targets[:, 0].tolist() == model(x)[0].numpy().argmax(-1).tolist()
    assert top.target_info[0][0]["kind"] == "output" and top.target_info[0][0]["output"] == "a"


@pytest.mark.parametrize("count", [1, 2, 3])
def test_output_classes_given_as_a_list_pick_those_components_whatever_the_batch_size(count):
    model = two_heads()
    x = images(count, seed=11)
    twin = keras.Model(model.inputs, model.outputs[0])
    e = sk.explain(model, x, "gradient", sk.targets.output("a", classes=[1]))
    assert e.targets.tolist() == [[1]] * count
    np.testing.assert_allclose(e.attributions[:, 0], tape_gradient(lambda z: twin(z)[:, 1], x), rtol=1e-5, atol=1e-7)
    both = sk.explain(model, x, "gradient", sk.targets.output("a", classes=[2, 0]))
    assert both.targets.tolist() == [[2, 0]] * count


class Smallest(sk.targets.Target):
    """The smallest target of one's own: ``score`` alone, its payload given as ``payload=``."""

    kind = "smallest"

    def score(self, outputs, payload):  # [n, D], [n, D] -> [n, 1]
        return keras.ops.sum(outputs * payload, axis=1, keepdims=True)


def test_the_smallest_target_of_ones_own_is_score_alone_with_a_payload():
    inputs = keras.Input((5,))
    dense = keras.layers.Dense(3, use_bias=False)
    model = keras.Model(inputs, dense(inputs))
    weights = np.random.default_rng(13).normal(size=(7, 3)).astype("float32")
    x = images(7, (5,), seed=13)
    e = sk.explain(model, x, "gradient_x_input", Smallest(payload=weights), batch_size=2)
    expected = (weights @ dense.get_weights()[0].T) * x
    np.testing.assert_allclose(e.attributions[:, 0], expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(e.scores[:, 0], np.sum(model(x).numpy() * weights, axis=1), rtol=1e-5, atol=1e-6)
    assert e.targets.tolist() == [[0]] * 7 and e.target_info[3] == [{"kind": "smallest"}]
    with pytest.raises(ValueError, match="one row per input"):
        sk.explain(model, x[:3], "gradient", Smallest(payload=weights))


class Weighted(sk.targets.Target):
    """A target of one's own: a weighted sum of the outputs, one weight vector per input."""

    kind = "weighted"

    def __init__(self, weights):
        self.weights = np.asarray(weights, np.float32)

    def resolve(self, request):
        B = request.num_inputs
        return sk.targets.Resolved(
            np.zeros((B, 1), np.int64),
            sk.targets.PerInput(self.weights),
            [[{"kind": "weighted"}] for _ in range(B)],
            self,
        )

    def score(self, outputs, payload):
        return tf.reduce_sum(outputs * payload, axis=1, keepdims=True)


def test_a_target_class_of_ones_own_carries_a_per_input_payload_through_the_chunks():
    inputs = keras.Input((5,))
    dense = keras.layers.Dense(3, use_bias=False)
    model = keras.Model(inputs, dense(inputs))
    weights = np.random.default_rng(12).normal(size=(7, 3)).astype("float32")
    x = images(7, (5,), seed=12)
    e = sk.explain(model, x, "gradient_x_input", Weighted(weights), batch_size=2)
    expected = (weights @ dense.get_weights()[0].T) * x
    np.testing.assert_allclose(e.attributions[:, 0], expected, rtol=1e-5, atol=1e-6)
    assert e.target_info[3] == [{"kind": "weighted"}]


def test_a_list_of_target_objects_puts_their_columns_side_by_side():
    model = segmenter()
    x = images(2, seed=13)
    mask = np.zeros((H, W), bool)
    mask[1:4, 2:5] = True
    parts = [sk.targets.region(mask, [[1], [3]]), sk.targets.unit("c1", [0, 2]), sk.targets.region("predicted", "top1")]
    both = sk.explain(model, x, "gradient", parts, batch_size=2)
    alone = [sk.explain(model, x, "gradient", part) for part in parts]
    np.testing.assert_allclose(
        both.attributions, np.concatenate([a.attributions for a in alone], axis=1), rtol=1e-5, atol=1e-7
    )
    np.testing.assert_allclose(both.scores, np.concatenate([a.scores for a in alone], axis=1), rtol=1e-5)
    assert [i["kind"] for i in both.target_info[0]] == ["region", "unit", "unit", "region"]


def test_predicted_regions_stay_frozen_at_the_clean_input_for_noisy_copies():
    model = segmenter()
    x = images(2, seed=14)
    winner = model(x).numpy().argmax(-1)
    top = np.array([np.bincount(w.ravel(), minlength=5).argmax() for w in winner])
    frozen = sk.explain(model, x, "smoothgrad", sk.targets.region("predicted", "top1"), samples=6, seed=3)
    given = sk.explain(
        model, x, "smoothgrad", sk.targets.region(winner == top[:, None, None], top[:, None]), samples=6, seed=3
    )
    assert frozen.targets[:, 0].tolist() == top.tolist() and np.all(frozen.attributions != 0)
    np.testing.assert_allclose(frozen.attributions, given.attributions, rtol=1e-6, atol=1e-7)


def test_new_masks_and_boxes_reuse_the_compiled_kernel():
    model = segmenter()
    x = images(4, seed=15)
    rng = np.random.default_rng(15)
    sk.explain(model, x, "gradient", sk.targets.region(rng.random((4, H, W)) > 0.5, [[1, 2]] * 4))
    traces = engine.trace_count()
    sk.explain(model, x, "gradient", sk.targets.region(rng.random((4, H, W)) > 0.5, [[0, 4]] * 4))
    assert engine.trace_count() == traces
    detector = conv_detector()
    sk.explain(detector, x, "gradient", sk.targets.box([[0, 0, 3, 3], [1, 1, 4, 5]], 1))
    traces = engine.trace_count()
    sk.explain(detector, x, "gradient", sk.targets.box([[1, 0, 2, 3], [2, 1, 4, 4]], 0))
    assert engine.trace_count() == traces


@pytest.mark.parametrize("kind", ["box", "region"])
def test_k_boxes_or_regions_of_one_image_share_its_forward_pass(kind):
    counter = ForwardCounter()
    inner = conv_detector() if kind == "box" else segmenter()
    inputs = keras.Input((H, W, 3))
    model = keras.Model(inputs, inner(counter(inputs)))
    x = images(1, seed=24)
    if kind == "box":
        target = sk.targets.box([[0, 0, 3, 3], [1, 2, 5, 6], [2, 1, 4, 4], [0, 1, 2, 5], [3, 3, 6, 6]], 1)
    else:
        target = sk.targets.region(np.random.default_rng(24).random((H, W)) > 0.5, [[0, 1, 2, 3, 4]])
    sk.explain(model, x, "gradient", target)  # tracing runs the model symbolically, not counted
    before = float(counter.runs.numpy())
    e = sk.explain(model, x, "gradient", target, batch_size=64)
    assert e.attributions.shape[:2] == (1, 5) and np.all(np.abs(e.attributions).sum(axis=(2, 3, 4)) > 0)
    assert float(counter.runs.numpy()) - before == 1.0


# -------------------------------------------------------------------------- batch_size
@pytest.mark.parametrize("method", input_methods())
def test_results_do_not_depend_on_batch_size_with_per_input_masks_and_boxes(method):
    x = images(5, seed=16)
    options = small_options(method, x.shape[1:])
    rng = np.random.default_rng(16)
    segment = sk.targets.region(rng.random((5, H, W)) > 0.4, rng.integers(0, 5, size=(5, 3)))
    boxes = [[[0, 0, 3, 3], [1, 2, 5, 6]], [[2, 1, 4, 4]], [[0, 1, 2, 5], [3, 3, 6, 6]], [[1, 1, 5, 5]], [[0, 0, 6, 6]]]
    for model, target in ((segmenter(), segment), (conv_detector(), sk.targets.box(boxes, 1))):
        one = sk.explain(model, x, method, target, batch_size=1, **options)
        many = sk.explain(model, x, method, target, batch_size=64, **options)
        np.testing.assert_allclose(one.attributions, many.attributions, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(one.scores, many.scores, rtol=1e-5, atol=1e-6)
    assert many.target_info[1][1].get("padding") is True  # a shorter list repeats its last box


# ------------------------------------------------------------ every method × every kind
def _region_case():
    model = segmenter()
    masks = np.zeros((2, H, W), bool)
    masks[0, :3, :4] = masks[1, 2:, 1:] = True
    classes = np.array([[1, 4], [0, 2]])

    def reference(x):
        logits = model(x).numpy()
        return np.array([[logits[b][masks[b], c].mean() for c in classes[b]] for b in range(2)])

    return model, sk.targets.region(masks, classes), reference


def _box_case():
    model = conv_detector()
    boxes = np.array([[[0, 0, 3, 3], [2, 1, 5, 4]], [[1, 2, 4, 6], [0, 0, 6, 6]]], np.float32)

    def reference(x):
        y = model(x).numpy()
        p = np.exp(y[..., 5:]) / np.exp(y[..., 5:]).sum(-1, keepdims=True)
        out = np.zeros((2, 2))
        for b in range(2):
            for k in range(2):
                t = boxes[b, k]
                for j in range(N):
                    q = y[b, j, :4]
                    w = max(0, min(t[2], q[2]) - max(t[0], q[0]))
                    h = max(0, min(t[3], q[3]) - max(t[1], q[1]))
                    union = (t[2] - t[0]) * (t[3] - t[1]) + max(0, q[2] - q[0]) * max(0, q[3] - q[1]) - w * h
                    o = 1 / (1 + np.exp(-y[b, j, 4]))  # the objectness logit's probability
                    out[b, k] = max(out[b, k], w * h / union * o * p[b, j, 1])
        return out

    return model, sk.targets.box(boxes, 1, score="drise"), reference  # every method: the D-RISE score


def _output_case():
    model = two_heads()
    return model, sk.targets.output("b"), lambda x: model(x)[1].numpy()


def _unit_case():
    model = classifier_with_units()
    cut = keras.Model(model.inputs, model.get_layer("c2").output)
    return model, sk.targets.unit("c2", [0, 2]), lambda x: cut(x).numpy()[..., [0, 2]].mean(axis=(1, 2))


CASES = {"region": _region_case, "box": _box_case, "output": _output_case, "unit": _unit_case}


@pytest.mark.parametrize("method", input_methods())
@pytest.mark.parametrize("kind", sorted(CASES))
def test_every_method_explains_every_target_kind(method, kind):
    model, target, reference = CASES[kind]()
    x = images(2, seed=17)
    e = sk.explain(model, x, method, target, **small_options(method, x.shape[1:]))
    assert e.attributions.shape[:2] == (2, 2) and e.maps.shape[:2] == (2, 2)
    assert np.all(np.isfinite(e.attributions))
    assert np.any(e.attributions != 0)
    np.testing.assert_allclose(e.scores, reference(x), rtol=1e-4, atol=1e-6)
    assert all(info["kind"] == kind for row in e.target_info for info in row)


# ------------------------------------------------------------------------- the refusals
def test_class_targets_on_other_outputs_name_the_kind_to_use():
    x = images(2)
    with pytest.raises(ValueError, match=r"sk\.targets\.region"):
        sk.explain(segmenter(), x, "gradient", "top1")
    with pytest.raises(ValueError, match=r"sk\.targets\.box"):
        sk.explain(conv_detector(), x, "gradient", 0)
    with pytest.raises(ValueError, match=r"sk\.targets\.output"):
        sk.explain(two_heads(), x, "gradcam", "top1")
    with pytest.raises(ValueError, match=r"region targets need a model with one dense output"):
        sk.explain(classifier_with_units(), x, "gradient", sk.targets.region("predicted"))
    with pytest.raises(ValueError, match=r"box targets need a detector"):
        sk.explain(segmenter(), x, "gradient", sk.targets.box([[0, 0, 2, 2]]))


def test_bad_target_objects_are_refused_before_any_work():
    model = segmenter()
    x = images(2)
    calls = engine.call_count()
    with pytest.raises(ValueError, match=r"spatial shape \[6, 6\]"):
        sk.explain(model, x, "gradient", sk.targets.region(np.ones((5, 5), bool), 1))
    with pytest.raises(TypeError, match="bool"):
        sk.targets.region(np.ones((H, W)), 1)
    with pytest.raises(ValueError, match="out of range"):
        sk.explain(model, x, "gradient", sk.targets.region(np.ones((H, W), bool), 7))
    with pytest.raises(ValueError, match="x0 ≤ x1"):
        sk.explain(conv_detector(), x, "gradient", sk.targets.box([[3, 0, 1, 2]], 0))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        sk.explain(conv_detector(), x, "gradient", sk.targets.box([[0, 0, 1, 2]], 2))
    with pytest.raises(ValueError, match="outputs"):
        sk.explain(two_heads(), x, "gradient", sk.targets.output("c"))
    with pytest.raises(ValueError, match=r"unit channel must lie in \[0, 3\]"):
        sk.explain(model, x, "gradient", sk.targets.unit("c1", 4))
    with pytest.raises(TypeError, match="unit index"):
        sk.targets.unit("c1", 1.5)
    assert engine.call_count() == calls


# ------------------------------------------------------------------ Xplique's operators
# Xplique's own task operators (installed without its TensorFlow pin, see the Makefile).


def test_region_scores_equal_xpliques_segmentation_operator():
    from xplique.commons.operators import semantic_segmentation_operator

    model = segmenter()
    x = images(3, seed=18)
    masks = np.random.default_rng(18).random((3, H, W)) > 0.5
    e = sk.explain(model, x, "gradient", sk.targets.region(masks, 3), score="output")
    onehot = (masks[..., None] * (np.arange(5) == 3)).astype("float32")
    want = semantic_segmentation_operator(model, tf.constant(x), tf.constant(onehot)).numpy()
    np.testing.assert_allclose(e.scores[:, 0], want, rtol=1e-5)


def detector_with_fixed_classes(class_vectors):
    """Raw proposals ``[B, N, 4 + 1 + 3]`` whose boxes and objectness (a probability) move with
    the input and whose class vectors are ``class_vectors`` ``[N, 3]`` whatever the input."""
    inputs = keras.Input((4, 4, 1))
    dense = keras.layers.Dense(N * 8, name="dense")
    model = keras.Model(inputs, keras.layers.Reshape((N, 8))(dense(keras.layers.Flatten()(inputs))))
    kernel = (0.05 * np.random.default_rng(23).normal(size=(16, N, 8))).astype("float32")
    kernel[..., :4] *= SCALE
    kernel[..., 5:] = 0.0
    bias = np.zeros((N, 8), np.float32)
    bias[:, :4] = SCALE * np.array([[0.2, 0.3, 2.1, 2.4], [1.1, 0.9, 3.3, 3.6], [0.4, 1.6, 2.8, 3.9]])
    bias[:, 4] = [0.8, 0.6, 0.7]
    bias[:, 5:] = class_vectors
    dense.set_weights([kernel.reshape(16, -1), bias.reshape(-1)])
    return model


#: Xplique divides by the union plus 1e-4: boxes of areas in the hundreds keep that below 1e-6.
SCALE = 10.0
BOXES = SCALE * np.array([[0.5, 0.5, 2.5, 2.6], [1.5, 1.4, 3.0, 3.2], [0.0, 1.0, 2.0, 4.0]], np.float32)


def xplique_detection(model, x, classes, include_classification_score):
    """Xplique's D-RISE score of each input's reference box (``BOXES``) of class ``classes``."""
    from xplique.commons.operators import object_detection_operator

    reference = np.concatenate([BOXES, np.ones((3, 1), np.float32), np.eye(3, dtype=np.float32)[classes]], axis=1)
    return object_detection_operator(
        model, tf.constant(x), tf.constant(reference), include_classification_score=include_classification_score
    ).numpy()


def test_box_scores_match_xpliques_detection_operator_on_localisation_and_objectness():
    """The class term aside (Xplique's is a cosine of class vectors, the box target's the class
    probability): proposals whose class-1 value is 1, the other classes varying by proposal."""
    model = detector_with_fixed_classes([[0.3, 1.0, 0.9], [0.0, 1.0, 0.2], [0.7, 1.0, 0.0]])
    x = images(3, (4, 4, 1), seed=19)
    target = sk.targets.box(BOXES[:, None], 1, class_activation="none", objectness="probability")
    e = sk.explain(model, x, "gradient", target)
    want = xplique_detection(model, x, [1, 1, 1], include_classification_score=False)
    np.testing.assert_allclose(e.scores[:, 0], want, rtol=1e-5)


def test_box_scores_and_xpliques_class_similarity_meet_on_one_hot_classes():
    """With one-hot class vectors Xplique's cosine is ``[class = c] / (1 + 1e-4)`` (its ε in the
    norm) and the class probability ``[class = c]``: the scores differ by that factor alone."""
    model = detector_with_fixed_classes(np.eye(3, dtype=np.float32)[[2, 0, 2]])
    x = images(3, (4, 4, 1), seed=22)
    classes = [2, 0, 2]
    target = sk.targets.box(
        BOXES[:, None], np.array(classes)[:, None], class_activation="none", objectness="probability"
    )
    e = sk.explain(model, x, "gradient", target)
    want = xplique_detection(model, x, classes, include_classification_score=True)
    assert np.all(want > 0)
    np.testing.assert_allclose(e.scores[:, 0] / (1 + 1e-4), want, rtol=1e-5)


def test_target_scores_of_perturbed_copies_keep_each_inputs_payload():
    model = segmenter()
    x = images(3, seed=20)
    masks = np.random.default_rng(20).random((3, H, W)) > 0.5
    from saliency_kit.pipeline.api import resolve_selection

    selection = resolve_selection(model, x, sk.targets.region(masks, [[1], [2], [3]]))
    rows = np.array([2, 0, 0, 1, 2])
    copies = x[rows] + 0.1
    scores = engine.target_scores(model, copies, selection.take(rows), batch_size=2)
    logits = model(copies).numpy()
    expected = [logits[i][masks[r], r + 1].mean() for i, r in enumerate(rows)]
    np.testing.assert_allclose(scores[:, 0], expected, rtol=1e-5)


def test_box_targets_read_a_detector_ending_in_a_sigmoid_as_it_is():
    inputs = keras.Input((4, 4, 1))
    dense = keras.layers.Dense(N * (5 + C))
    raw = keras.layers.Reshape((N, 5 + C))(dense(keras.layers.Flatten()(inputs)))
    model = keras.Model(inputs, keras.layers.Activation("sigmoid")(raw))  # boxes in [0, 1] units
    bias = np.zeros((N, 5 + C), np.float32)
    bias[:, :4] = [-1.0, -1.2, 1.0, 1.1]  # well-formed boxes after the sigmoid
    dense.set_weights([0.1 * dense.get_weights()[0], bias.reshape(-1)])
    x = images(2, (4, 4, 1), seed=21)
    box = [[0.0, 0.0, 1.0, 1.0]]
    e = sk.explain(model, x, "gradient", sk.targets.box(box, 1, class_activation="none", objectness="probability"))
    y = model(x).numpy()
    for b in range(2):
        best = max(_iou_and_derivatives(np.array(box[0]), y[b, j, :4])[0] * y[b, j, 4] * y[b, j, 6] for j in range(N))
        assert best > 0
        np.testing.assert_allclose(e.scores[b, 0], best, rtol=1e-5)


def test_a_negative_objectness_logit_is_a_low_probability_not_a_sign_flip():
    """A raw head's objectness logit goes through a sigmoid: with negative logits everywhere the
    best-matching proposal still wins (multiplying the logit itself would pick the worst)."""
    model, kernel, bias = linear_detector()
    x = images(1, (4, 4, 1), seed=9)
    y = (x[0].reshape(-1) @ kernel + bias).reshape(N, 5 + C)
    shifted = bias.reshape(N, 5 + C).copy()
    shifted[:, 4] -= y[:, 4].max() + 3.0  # every objectness logit below -3
    model.get_layer("dense").set_weights([kernel, shifted.reshape(-1)])
    y = model(x).numpy()[0]
    assert (y[:, 4] < 0).all()
    t = y[0, :4].copy()  # the target box is proposal 0 itself
    e = sk.explain(model, x, "gradient", sk.targets.box([[list(t)]], 0))
    p = np.exp(y[:, 5:] - y[:, 5:].max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    o = 1 / (1 + np.exp(-y[:, 4]))
    expected = max(_iou_and_derivatives(t, y[j, :4])[0] * o[j] * p[j, 0] for j in range(N))
    np.testing.assert_allclose(e.scores[0, 0], expected, rtol=1e-5)
    assert e.scores[0, 0] > 0


# ------------------------------------------------------------------ evaluation with target objects
def test_localisation_and_deletion_take_box_targets_each_box_its_own_object():
    model = conv_detector()
    x = images(2, seed=28)
    target = sk.targets.box([[[0, 0, 3, 3], [2, 1, 6, 5]], [[1, 2, 4, 6]]], 1)
    e = sk.explain(model, x, "gradient", target)
    masks = np.zeros((2, 2, H, W), bool)  # pixels whose centre is in the box; rows are y, columns x
    masks[0, 0, 0:3, 0:3] = True
    masks[0, 1, 1:5, 2:6] = True
    masks[1, :, 2:6, 1:4] = True  # the second input's one box, repeated
    np.testing.assert_array_equal(target.pixel_masks(2, H, W), masks)
    hits = sk.evaluate.pointing_game(e, target)
    by_hand = [[masks[b, k].reshape(-1)[np.argmax(e.maps[b, k])] for k in range(2)] for b in range(2)]
    np.testing.assert_array_equal(hits, by_hand)
    mass = sk.evaluate.relevance_mass_accuracy(maps=e.maps, masks=target, normalise=False)
    np.testing.assert_allclose(mass, (e.maps * masks).sum((2, 3)) / e.maps.sum((2, 3)), rtol=1e-5)
    curves = sk.evaluate.deletion_insertion(model, x, e, targets=target, steps=4)
    np.testing.assert_allclose(curves["deletion_curve"][:, :, 0], e.scores, rtol=1e-5, atol=1e-6)
