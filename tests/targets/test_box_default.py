"""A box target's default score by method, on the shipped detector and the scene generator's own
boxes: the CAMs weighting channels by the gradient explain the class logit (their maps then fall
on the object), every other method the D-RISE score; an explicit ``score=`` is always used."""

import numpy as np
import pytest

import saliency_kit as sk
from saliency_kit.data import scenes
from saliency_kit.data.shapes import preprocess
from saliency_kit.pipeline.api import resolve_selection


@pytest.fixture(scope="module")
def detector():
    model, _ = sk.load_model("shapes_det")
    data = scenes.make_scenes(4, seed=14)  # unseen in training
    return model, preprocess(data.images), [scenes.scene_boxes(data, i) for i in range(4)]


def _iou(t, p):
    """IoU of box ``t`` [4] with each proposal ``p`` [N, 4], by hand."""
    w = np.clip(np.minimum(t[2], p[:, 2]) - np.maximum(t[0], p[:, 0]), 0, None)
    h = np.clip(np.minimum(t[3], p[:, 3]) - np.maximum(t[1], p[:, 1]), 0, None)
    inter = w * h
    union = (t[2] - t[0]) * (t[3] - t[1]) + (p[:, 2] - p[:, 0]) * (p[:, 3] - p[:, 1]) - inter
    return inter / union


def _by_hand(raw, boxes, labels):
    """``(D-RISE score, class logit of the best-overlapping proposal)`` per box, from raw [N, 10]."""
    o = 1 / (1 + np.exp(-raw[:, 4]))
    p = np.exp(raw[:, 5:] - raw[:, 5:].max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    drise, logit = [], []
    for t, c in zip(boxes, labels):
        overlaps = _iou(t, raw[:, :4])
        drise.append(np.max(overlaps * o * p[:, c]))
        logit.append(raw[np.argmax(overlaps), 5 + c])
    return np.array(drise), np.array(logit)


def _share_in_boxes(maps, boxes):
    """Fraction of each ``|map|`` [K, H, W]'s mass whose pixel centre lies in its box [K, 4]."""
    H, W = maps.shape[1:]
    ys, xs = np.mgrid[0:H, 0:W] + 0.5
    shares = []
    for mass, (x0, y0, x1, y1) in zip(np.abs(maps), boxes):
        inside = (xs >= x0) & (xs <= x1) & (ys >= y0) & (ys <= y1)
        shares.append(mass[inside].sum() / mass.sum())
    return shares


def test_gradcam_on_the_default_box_target_falls_on_the_object(detector):
    model, x, truth = detector
    shares = {None: [], "drise": []}
    for i, (boxes, labels) in enumerate(truth):
        for score in shares:
            expl = sk.explain(model, x[i : i + 1], "gradcam", sk.targets.box(boxes[None], labels[None], score=score))
            shares[score] += _share_in_boxes(expl.maps[0], boxes)
    area = np.mean([(b[2] - b[0]) * (b[3] - b[1]) / 64**2 for boxes, _ in truth for b in boxes])
    assert area < 0.12
    assert np.mean(shares[None]) >= 0.4
    assert np.mean(shares["drise"]) < 0.3  # the D-RISE score's Grad-CAM lights up the background


@pytest.mark.parametrize(
    ("method", "default"),
    [
        ("gradcam", "class"),
        ("gradcam_plus_plus", "class"),
        ("guided_gradcam", "class"),
        ("layercam", "drise"),
        ("gradient", "drise"),
        ("scorecam", "drise"),
    ],
)
def test_the_default_score_follows_the_method_and_a_given_score_is_always_used(detector, method, default):
    model, x, truth = detector
    boxes, labels = truth[0]
    drise, logit = _by_hand(np.asarray(model(x[:1]))[0], boxes, labels)
    expected = {"drise": drise, "class": logit}
    for score in (None, "drise", "class"):
        expl = sk.explain(model, x[:1], method, sk.targets.box(boxes[None], labels[None], score=score))
        np.testing.assert_allclose(expl.scores[0], expected[score or default], rtol=1e-4, atol=1e-6)
    assert sk.methods.get(method).gradient_channel_weights == (default == "class")


def test_a_box_target_resolved_without_a_method_uses_the_drise_score(detector):
    model, x, truth = detector
    boxes, labels = truth[1]
    resolved = resolve_selection(model, x[1:2], sk.targets.box(boxes[None], labels[None]))
    assert resolved.target.mode == "drise" and sk.targets.box(boxes).mode is None


def test_a_metric_given_a_method_resolves_the_box_score_as_explain_does(detector):
    """``sk.evaluate`` resolves its targets once for the method it re-explains: Grad-CAM's box
    target scores the class logit there as in ``sk.explain``, the gradient's the D-RISE score."""
    from saliency_kit.evaluate.explained import prepare

    model, x, truth = detector
    boxes, labels = truth[0]
    drise, logit = _by_hand(np.asarray(model(x[:1]))[0], boxes, labels)
    for method, expected in (("gradcam", logit), ("gradient", drise)):
        scored = prepare(model, x[:1], method, sk.targets.box(boxes[None], labels[None]))
        assert scored.selection.target.mode == ("class" if method == "gradcam" else "drise")
        explained = sk.explain(model, x[:1], method, sk.targets.box(boxes[None], labels[None]))
        np.testing.assert_allclose(explained.scores[0], expected, rtol=1e-4, atol=1e-6)
