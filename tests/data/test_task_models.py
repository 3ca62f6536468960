"""The shipped shapes_seg and shapes_det models: they load offline with their task, classes and
decoding, the detector's box layer is the closed form it documents, and both are good on scenes
no training saw (seed 14 / 24; floors a little under what was measured: pixel accuracy 0.989, mean
IoU 0.882 on 200 scenes; box recall 0.990, precision 0.926, matched IoU 0.873 on 200 scenes, 1 false
detection on 200 scenes without a shape)."""

import keras
import numpy as np
import pytest

import saliency_kit as sk
from saliency_kit import zoo
from saliency_kit.data import scene_models, scenes
from saliency_kit.data.shapes import CLASS_NAMES, preprocess
from saliency_kit.targets import detections

N = 200


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path):
    monkeypatch.setenv("SALIENCY_KIT_OFFLINE", "1")
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras_home"))
    monkeypatch.delenv("SALIENCY_KIT_CONFIGS", raising=False)


@pytest.fixture(scope="module")
def segmenter():
    return sk.load_model("shapes_seg")


@pytest.fixture(scope="module")
def detector():
    return sk.load_model("shapes_det")


def test_both_load_offline_with_their_task_and_classes(segmenter, detector):
    assert {"shapes", "shapes_seg", "shapes_det"} <= set(sk.list_models())
    model, spec = segmenter
    assert spec.task == "segmentation" and spec.class_names == ["background", *CLASS_NAMES]
    assert model.output_shape == (None, 64, 64, 6) and spec.input_size == (64, 64)
    assert spec.gradcam_layer == "decoder" and len(model.get_layer("decoder").output.shape) == 4
    model, spec = detector
    assert spec.task == "detection" and spec.class_names == list(CLASS_NAMES)
    assert model.output_shape == (None, 64, 4 + 1 + 5)
    assert (spec.score_threshold, spec.iou_threshold) == (0.5, 0.45)
    assert zoo.get_spec("shapes").task == "classification"
    for name, (model, _) in (("shapes_seg", segmenter), ("shapes_det", detector)):  # tiny: a few hundred kB
        assert model.count_params() < 60_000
        path = zoo.config.resolve_path(f"package:{name}.keras", None)
        assert 100_000 < path.stat().st_size < 400_000


def test_segmentation_on_unseen_scenes(segmenter):
    model, spec = segmenter
    data = scenes.make_scenes(N, seed=14)
    predicted = np.asarray(model.predict(preprocess(data.images), batch_size=100, verbose=0)).argmax(-1)
    truth = data.label_maps
    assert np.mean(predicted == truth) >= 0.98
    ious = [np.sum((predicted == k) & (truth == k)) / np.sum((predicted == k) | (truth == k)) for k in range(6)]
    assert np.mean(ious) >= 0.85 and min(ious) >= 0.7, ious


def test_detection_on_unseen_scenes(detector):
    model, spec = detector
    data = scenes.make_scenes(N, seed=24)
    found = detections.decode(
        model.predict(preprocess(data.images), batch_size=100, verbose=0),
        score_threshold=spec.score_threshold,
        iou_threshold=spec.iou_threshold,
    )
    matched, ious = 0, []
    for i, image_found in enumerate(found):
        boxes, labels = scenes.scene_boxes(data, i)
        free = list(image_found)
        for box, label in zip(boxes, labels):
            same = [d for d in free if d.label == label]
            overlap = detections.box_iou([box], [d.box for d in same])[0] if same else np.zeros(0)
            if overlap.size and overlap.max() >= 0.5:
                matched += 1
                ious.append(overlap.max())
                free.remove(same[int(overlap.argmax())])
    total = sum(len(f) for f in found)
    assert matched / data.counts.sum() >= 0.97  # box recall
    assert matched / total >= 0.9  # precision
    assert np.mean(ious) >= 0.85


def test_detector_finds_nothing_where_there_is_no_shape(detector):
    model, spec = detector
    empty = scenes.make_scenes(N, seed=27, objects=(0, 0))
    blank = np.full((1, 64, 64, 3), 128, np.uint8)
    found = detections.decode(
        model.predict(preprocess(np.concatenate([empty.images, blank])), verbose=0),
        score_threshold=spec.score_threshold,
        iou_threshold=spec.iou_threshold,
    )
    assert sum(len(f) for f in found) <= 3 and not found[-1]


def test_cell_boxes_is_its_closed_form_and_serialises(tmp_path):
    layer = scene_models.CellBoxes(8)
    distances = np.random.default_rng(0).uniform(0, 3, (2, 3, 4, 4)).astype("float32")
    boxes = np.asarray(layer(distances))
    assert boxes.shape == (2, 12, 4)
    for b in range(2):
        for i in range(3):
            for j in range(4):
                left, top, right, bottom = distances[b, i, j]
                cx, cy = 8 * (j + 0.5), 8 * (i + 0.5)
                np.testing.assert_allclose(
                    boxes[b, i * 4 + j], [cx - 8 * left, cy - 8 * top, cx + 8 * right, cy + 8 * bottom], rtol=1e-6
                )
    inputs = keras.Input((3, 4, 4))
    model = keras.Model(inputs, scene_models.CellBoxes(8)(inputs))
    model.save(tmp_path / "boxes.keras")
    loaded = keras.saving.load_model(tmp_path / "boxes.keras", safe_mode=True)
    np.testing.assert_allclose(np.asarray(loaded(distances)), boxes)


def test_a_config_whose_output_does_not_fit_its_task_is_refused(tmp_path, monkeypatch):
    inputs = keras.Input((8, 8, 3))
    model = keras.Model(inputs, keras.layers.Dense(4)(keras.layers.Flatten()(inputs)))
    model.save(tmp_path / "flat.keras")
    (tmp_path / "flat.keras.toml").write_text('task = "segmentation"\n')
    with pytest.raises(ValueError, match=r"task 'segmentation' needs an output \[B, H', W', C\]; received"):
        sk.load_model(tmp_path / "flat.keras")
    (tmp_path / "flat.keras.toml").write_text('task = "tracking"\n')
    with pytest.raises(ValueError, match=r"task must be one of 'classification', 'segmentation', 'detection'"):
        sk.load_model(tmp_path / "flat.keras")
    (tmp_path / "flat.keras.toml").write_text("score_threshold = 0.3\n")
    with pytest.raises(ValueError, match=r"score_threshold applies to task = \"detection\" only"):
        sk.load_model(tmp_path / "flat.keras")
