"""What this machine's TensorFlow runs, for the tests that need a kernel some CPUs lack: such a test
is skipped there, saying why, so that the suite passes on any CPU.

TensorFlow's own CPU convolutions take channels-last tensors only; channels-first ones run through
its oneDNN kernels, which TensorFlow turns on only on some CPUs (seen: on with AVX-512, off on an
AMD EPYC with AVX2). Where they are off, Keras' ``Conv2D(data_format="channels_first")`` fails on
its own, before any saliency_kit code runs."""

from __future__ import annotations

import functools

CHANNELS_FIRST_REASON = (
    "TensorFlow on this CPU runs no channels-first convolution (only its oneDNN kernels do, and "
    "TensorFlow has them off here): Keras' own channels_first Conv2D fails on this machine"
)


@functools.cache
def channels_first_convolutions_run() -> bool:
    """Whether the active backend runs a channels-first 2-D convolution, eagerly and its gradient
    inside ``tf.function`` (always, off TensorFlow)."""
    import keras

    if keras.backend.backend() != "tensorflow":
        return True
    import tensorflow as tf

    x, kernel = tf.ones((1, 1, 3, 3)), tf.ones((2, 2, 1, 1))

    @tf.function
    def gradient():
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.nn.conv2d(x, kernel, 1, "VALID", data_format="NCHW")
        return tape.gradient(y, x)

    try:
        tf.nn.conv2d(x, kernel, 1, "VALID", data_format="NCHW")
        gradient()
    except (tf.errors.UnimplementedError, tf.errors.InvalidArgumentError):
        return False
    return True
