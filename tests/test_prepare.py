"""The prepare step every explanation goes through: one float input is a space of one part, laid
out as the engine's plain rows; the same input named with ``attribute_to`` runs in a space and
gives the same numbers; checks come before any work; nothing it builds can be edited.

References are hand-written: a linear model's gradient is its weight column, and integrated
gradients of a linear score from a zero baseline is ``x · w`` exactly."""

import dataclasses
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras
import numpy as np
import pytest

import saliency_kit as sk
from saliency_kit import engine, methods
from saliency_kit.pipeline.prepare import check_options, prepare
from saliency_kit.pipeline.request import ExplainCall

W = np.array([[1.0, -2.0], [0.5, 0.25], [-1.5, 3.0]], np.float32)


@pytest.fixture(scope="module")
def linear():
    """``s = x W`` for ``x [3]``, two classes."""
    inputs = keras.Input((3,), name="x")
    dense = keras.layers.Dense(2, use_bias=False, name="dense")
    model = keras.Model(inputs, dense(inputs), name="linear")
    dense.kernel.assign(W)
    return model


X = np.array([[1.0, 2.0, 3.0], [-1.0, 0.5, 2.0]], np.float32)


def _call(model, inputs, method="gradient", targets=0, **options):
    request = {name: options.pop(name) for name in ("attribute_to", "baseline_token") if name in options}
    return ExplainCall(model, inputs, method, methods.get(method), targets, options=options, **request)


def test_one_float_input_is_one_part_run_on_the_plain_rows(linear):
    prepared = prepare(_call(linear, X))
    assert prepared.parts.plain and len(prepared.runs) == 1
    (run,) = prepared.runs
    assert [part.shape for part in run.parts] == [(3,)]
    assert run.job.space is None and run.job.held is None
    np.testing.assert_array_equal(run.job.rows, X)
    np.testing.assert_array_equal(prepared.selection.columns, [[0], [0]])


def test_the_input_named_runs_in_a_space_with_the_same_numbers(linear):
    named = prepare(_call(linear, X, attribute_to="x"))
    assert not named.parts.plain and named.runs[0].job.space is not None
    for method, reference in (("gradient", np.broadcast_to(W[:, 1], X.shape)), ("integrated_gradients", X * W[:, 1])):
        plain = sk.explain(linear, X, method, targets=1, **({"baseline": 0.0} if method != "gradient" else {}))
        spaced = sk.explain(
            linear, X, method, targets=1, attribute_to="x", **({"baseline": 0.0} if method != "gradient" else {})
        )
        np.testing.assert_allclose(plain.attributions[:, 0], reference, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(spaced.attributions[:, 0], reference, rtol=1e-5, atol=1e-6)
        assert plain.parts is None and spaced.parts == {"x": "input"}


def test_request_options_come_through_the_options_and_are_checked_before_any_work(linear):
    calls = engine.call_count()
    with pytest.raises(ValueError, match="baseline_token must be a non-negative token id"):
        sk.explain(linear, X, "integrated_gradients", baseline_token=-1)
    with pytest.raises(ValueError, match="layer_start must be one of"):
        sk.explain(linear, X, "integrated_gradients", attribute_to="dense", layer_start="middle")
    with pytest.raises(ValueError, match="has no option .stepz."):
        sk.explain(linear, X, "gradient", targets="top1", stepz=3)
    assert engine.call_count() == calls


def test_check_gives_the_options_explain_records(linear):
    checked = check_options(_call(linear, X, "integrated_gradients", steps=8, baseline=0.0))
    explained = sk.explain(linear, X, "integrated_gradients", targets=0, steps=8, baseline=0.0)
    assert checked["steps"] == explained.options["steps"] == 8
    assert sk.pipeline.api.check(linear, X, "integrated_gradients", steps=8)["steps"] == 8


def test_what_prepare_builds_cannot_be_edited(linear):
    prepared = prepare(_call(linear, X))
    for frozen in (prepared, prepared.runs[0], prepared.runs[0].job):
        with pytest.raises(dataclasses.FrozenInstanceError):
            frozen.call = None  # type: ignore[misc]
