"""sk.targets.task_targets, as a Python user calls it: each image's targets for a classifier, a
segmentation model, a detector and one head, from one forward pass in the engine, checked against
the model's outputs read by hand."""

import pickle

import numpy as np
import pytest

import saliency_kit as sk
from saliency_kit import engine
from saliency_kit.data import scenes
from saliency_kit.data.shapes import preprocess
from saliency_kit.targets import AskError, Request, TaskPlan, detections, task_targets


@pytest.fixture(scope="module")
def scene_inputs():
    """Three scenes (seed 14, unseen in training) and a blank picture: ``[4, 64, 64, 3]``."""
    data = scenes.make_scenes(3, seed=14)
    images = np.concatenate([data.images, np.full((1, 64, 64, 3), 128, np.uint8)])
    return preprocess(images)


def test_a_classifier_gets_its_classes_side_by_side_and_runs_no_model_unless_asked():
    model, spec = sk.load_model("shapes")
    x = np.random.default_rng(0).random((3, 64, 64, 3)).astype(np.float32)
    plan = TaskPlan("classification", (Request("top2", "top", count=2), Request("star", "class", index=3)))
    found = task_targets(model, x, plan, spec)
    logits = engine.all_scores(model, x, score="logits")
    expected = np.concatenate([np.argsort(-logits, axis=1, kind="stable")[:, :2], np.full((3, 1), 3)], axis=1)
    np.testing.assert_array_equal(found.targets, expected)
    assert found.rows == [0, 1, 2] and [s.index for s in found.subjects[0]] == list(expected[0])
    assert found.subjects[0][2].class_name == "star" and found.subjects[0][2].fields() == {}
    np.testing.assert_allclose(found.outputs, engine.all_scores(model, x, score="output"), rtol=1e-6)
    before = engine.call_count()
    only_star = task_targets(model, x, TaskPlan("classification", plan.requests[1:]), spec, with_outputs=False)
    assert engine.call_count() == before  # a class index needs no forward pass
    np.testing.assert_array_equal(only_star.targets, np.full((3, 1), 3))


def test_a_detector_gets_its_detections_as_one_box_target(scene_inputs):
    model, spec = sk.load_model("shapes_det")
    plan = TaskPlan("detection", boxes=2)
    found = task_targets(model, scene_inputs, plan, spec)
    raw = np.asarray(model(scene_inputs))
    decoded = detections.decode(raw, score_threshold=spec.score_threshold, iou_threshold=spec.iou_threshold)
    np.testing.assert_allclose(found.outputs, raw, rtol=1e-5, atol=1e-5)
    assert found.detections == decoded and not decoded[3]  # the blank picture: no detection
    assert found.rows == [0, 1, 2] and found.subjects[3] == []
    for row in found.rows:
        assert [(s.index, s.box, s.name) for s in found.subjects[row]] == [
            (d.label, d.box, f"box{rank}") for rank, d in enumerate(decoded[row][:2], start=1)
        ]
    assert isinstance(found.targets, sk.targets.Box)
    expl = sk.explain(model, scene_inputs[found.rows], "gradient", found.targets)
    assert expl.maps.shape == (3, 2, 64, 64)
    # A given box, in the pixels of a file twice the model's input, is scaled to the input.
    given = TaskPlan("detection", (Request("star@2,4,40,60", "box", index=3, box=(2.0, 4.0, 40.0, 60.0)),))
    found = task_targets(model, scene_inputs[:1], given, spec, image_sizes=[(128, 128)])
    assert found.subjects[0][0].box == (1.0, 2.0, 20.0, 30.0) and found.subjects[0][0].name == "box-2-4-40-60"
    with pytest.raises(AskError, match=r"the box reaches beyond the image \(32x64 pixels\)"):
        task_targets(model, scene_inputs[:1], given, spec, image_sizes=[(64, 32)])


def test_a_segmentation_model_gets_each_predicted_region_but_the_background(scene_inputs):
    model, spec = sk.load_model("shapes_seg")
    found = task_targets(model, scene_inputs, TaskPlan("segmentation"), spec)
    predicted = np.asarray(model(scene_inputs)).argmax(-1)
    for row in range(4):
        present = {int(c) for c in np.unique(predicted[row]) if spec.class_names[c] != "background"}
        assert {s.index for s in found.subjects[row]} == present
        for s in found.subjects[row]:
            np.testing.assert_array_equal(s.mask, predicted[row] == s.index)
            assert s.fields() == {"region": "predicted", "pixels": int(s.mask.sum()), "target": "region"}
    assert found.rows == [row for row in range(4) if found.subjects[row]]
    k = max(len(found.subjects[row]) for row in found.rows)
    assert len(found.targets) == k and all(isinstance(t, sk.targets.Region) for t in found.targets)


def test_one_head_gets_its_components_and_a_wrong_head_or_component_is_an_ask_error():
    import keras

    keras.utils.set_random_seed(0)
    inputs = keras.Input((8, 8, 3))
    x = keras.layers.GlobalAveragePooling2D()(inputs)
    model = keras.Model(inputs, {"age": keras.layers.Dense(1)(x), "kind": keras.layers.Dense(3)(x)})
    spec = sk.ModelSpec("multi", (8, 8), preprocess=lambda x: x, class_names=None, gradcam_layer=None)
    images = np.random.default_rng(1).random((2, 8, 8, 3)).astype(np.float32)
    found = task_targets(model, images, TaskPlan("output", (Request("all", "all"),), output="kind"), spec)
    np.testing.assert_allclose(found.outputs, np.asarray(model(images)["kind"]), rtol=1e-5, atol=1e-6)
    assert [s.index for s in found.subjects[0]] == [0, 1, 2] and found.subjects[0][0].name == "out-kind"
    np.testing.assert_array_equal(found.targets.classes, [[0, 1, 2], [0, 1, 2]])
    with pytest.raises(AskError, match=r"output 'knd': .*no such output \(did you mean 'kind'\?\)"):
        task_targets(model, images, TaskPlan("output", (Request("all", "all"),), output="knd"), spec)
    with pytest.raises(AskError, match=r"target '5': output 'kind' has 3 components"):
        task_targets(model, images, TaskPlan("output", (Request("5", "class", index=5),), output="kind"), spec)


def test_a_request_that_does_not_fit_survives_pickling_and_reads_as_its_option():
    error = AskError("target", "star@15,12,340,320", "the box lies outside the 64×64 image")
    again = pickle.loads(pickle.dumps(error))
    assert (again.option, again.text, again.reason, str(again)) == (error.option, error.text, error.reason, str(error))
    assert again.as_option == "--target 'star@15,12,340,320': the box lies outside the 64×64 image"
