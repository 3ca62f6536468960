"""The reference side of the tests against PAIR's ``saliency`` package: its
``call_model_function``, written plainly with a ``GradientTape``."""

import tensorflow as tf
from saliency import core as saliency_core


def pair_gradients(model, cls):
    """PAIR's call_model_function: per-image input gradients of one class."""

    def call(x, call_model_args=None, expected_keys=None):
        x = tf.constant(x)
        with tf.GradientTape() as tape:
            tape.watch(x)
            score = model(x)[:, cls]
        return {saliency_core.INPUT_OUTPUT_GRADIENTS: tape.gradient(score, x).numpy()}

    return call
