"""detections.decode, box_iou and its keras.ops twin iou, and the detector-output split, against
hand-computed cases."""

import math

import numpy as np
import pytest

from saliency_kit.targets import detections


def proposal(box, objectness, logits):
    return [*box, objectness, *logits]


def sigmoid(x):
    return 1 / (1 + math.exp(-x))


def test_box_iou_by_hand():
    a = [[0, 0, 10, 10]]
    b = [[5, 5, 15, 15], [10, 10, 20, 20], [0, 0, 10, 10], [3, 3, 3, 8]]
    np.testing.assert_allclose(detections.box_iou(a, b), [[25 / 175, 0.0, 1.0, 0.0]])


def test_the_keras_iou_is_the_numpy_iou():
    """The differentiable IoU of the box score and the NumPy one of decode: the hand value, and the
    same numbers on random boxes with batch axes (empty boxes included: 0, not NaN)."""
    from keras import ops

    a = [[0, 0, 10, 10]]
    b = [[5, 5, 15, 15], [10, 10, 20, 20], [0, 0, 10, 10], [3, 3, 3, 8]]
    by_hand = ops.convert_to_numpy(detections.iou(ops.convert_to_tensor(np.float32(a)), np.float32(b)))
    np.testing.assert_allclose(by_hand, [[25 / 175, 0.0, 1.0, 0.0]], rtol=1e-6)
    rng = np.random.default_rng(0)
    corners = rng.uniform(0, 30, (2, 3, 7, 4)).astype(np.float32)
    boxes = np.concatenate([corners[..., :2], corners[..., :2] + rng.uniform(0, 10, (2, 3, 7, 2))], axis=-1)
    boxes[0, 0, 0, 2] = boxes[0, 0, 0, 0]  # an empty box
    targets, proposals = boxes[:, :, :3], boxes[:, :, 3:]  # [2, 3, 3, 4] and [2, 3, 4, 4]
    expected = detections.box_iou(targets, proposals)
    assert expected.shape == (2, 3, 3, 4) and np.isfinite(expected).all()
    got = ops.convert_to_numpy(detections.iou(ops.convert_to_tensor(targets), ops.convert_to_tensor(proposals)))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_both_forms_of_a_detector_output_split_alike():
    raw = np.arange(2 * 3 * 8, dtype=np.float32).reshape(2, 3, 8)
    boxes, objectness, logits = detections.split(raw)
    np.testing.assert_array_equal(boxes, raw[..., :4])
    np.testing.assert_array_equal(objectness, raw[..., 4])
    np.testing.assert_array_equal(logits, raw[..., 5:])
    as_dict = {"boxes": raw[..., :4], "classification": raw[..., 5:]}
    boxes, objectness, logits = detections.split(as_dict)
    assert objectness is None and boxes.dtype == np.float64
    np.testing.assert_array_equal(logits, raw[..., 5:])
    one = detections.split(raw[0])  # one input: a batch axis added
    assert one[0].shape == (1, 3, 4) and one[2].shape == (1, 3, 3)
    with pytest.raises(ValueError, match=r"4 \+ 1 \+ C"):
        detections.split(raw[..., :5])


def test_scores_threshold_and_nms_per_class():
    raw = np.array(
        [
            [
                proposal((0, 0, 10, 10), 3.0, (2.0, 0.0)),  # class 0, score sigmoid(3) * e^2/(e^2+1) = 0.838
                proposal((1, 1, 11, 11), 2.0, (2.0, 0.0)),  # class 0, overlaps the first (IoU 0.68): suppressed
                proposal((1, 1, 11, 11), 2.0, (0.0, 4.0)),  # class 1 at the same place: kept, the best
                proposal((30, 30, 40, 40), -1.0, (5.0, 0.0)),  # below the threshold
                proposal((40, 40, 50, 50), 1.0, (4.0, 0.0)),  # far away: kept
            ]
        ]
    )
    found = detections.decode(raw)[0]
    assert [d.proposal for d in found] == [2, 0, 4]
    assert [d.label for d in found] == [1, 0, 0]
    expected = sigmoid(3.0) * math.exp(2) / (math.exp(2) + 1)
    assert found[1].score == pytest.approx(expected) and found[1].box == (0.0, 0.0, 10.0, 10.0)
    assert found[0].score == pytest.approx(sigmoid(2.0) * math.exp(4) / (math.exp(4) + 1))
    assert len(detections.decode(raw, iou_threshold=0.9)[0]) == 4  # IoU 0.68 is not enough to suppress
    assert [d.proposal for d in detections.decode(raw, max_detections=2)[0]] == [2, 0]
    assert detections.decode(raw, score_threshold=1.0) == [[]]


def test_one_input_without_batch_axis_and_the_dict_form():
    rows = np.array([proposal((0, 0, 4, 4), 10.0, (0.0, 1.0, 0.0))])
    assert detections.decode(rows)[0][0].label == 1
    found = detections.decode({"boxes": rows[None, :, :4], "classification": rows[None, :, 5:]}, score_threshold=0.5)
    assert found[0][0].score == pytest.approx(math.e / (math.e + 2))  # no objectness: softmax alone


@pytest.mark.parametrize(
    "raw, kwargs, match",
    [
        (np.zeros((1, 3, 5)), {}, r"\[B, N, 4 \+ 1 \+ C\].*received shape \(1, 3, 5\)"),
        ({"boxes": np.zeros((1, 2, 4))}, {}, r"'boxes' and 'classification'; received the keys \['boxes'\]"),
        (np.zeros((1, 2, 7)), {"score_threshold": 1.5}, "score_threshold must be from 0 to 1"),
        (np.zeros((1, 2, 7)), {"iou_threshold": -0.1}, "iou_threshold must be from 0 to 1"),
        (np.zeros((1, 2, 7)), {"max_detections": 0}, "max_detections must be a positive whole number"),
    ],
)
def test_refusals(raw, kwargs, match):
    with pytest.raises(ValueError, match=match):
        detections.decode(raw, **kwargs)
