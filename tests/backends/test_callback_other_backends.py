"""SaliencyCallback in a model.fit on Keras' JAX and PyTorch backends: TensorBoard event files
written without TensorFlow and read back with TensorBoard's EventAccumulator (tag, step, size, the grid's picture),
PNGs beside them, and the maps of each epoch's weights against their closed form."""

import keras
import pytest

BACKEND = keras.backend.backend()
pytestmark = pytest.mark.skipif(
    BACKEND == "tensorflow",
    reason="runs in the JAX and PyTorch processes: KERAS_BACKEND=jax (or torch) pytest tests/backends",
)

import io  # noqa: E402
import sys  # noqa: E402
import types  # noqa: E402

import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402

import saliency_kit as sk  # noqa: E402
from saliency_kit import files, render  # noqa: E402
from saliency_kit.explanation import Explanation  # noqa: E402

SHAPE = (6, 5, 3)


def _data(n=32):
    rng = np.random.default_rng(0)
    x = rng.uniform(-1.0, 1.0, (n, *SHAPE)).astype("float32")
    y = (x[:, :3, :, 0].mean(axis=(1, 2)) > x[:, 3:, :, 0].mean(axis=(1, 2))).astype("int64")
    return x, y


def _linear_model():
    """logits = flatten(x) @ kernel + bias: the gradient of logit k is ``kernel[:, k]`` reshaped."""
    model = keras.Sequential([keras.Input(SHAPE), keras.layers.Flatten(), keras.layers.Dense(2, name="logits")])
    model.compile(
        optimizer=keras.optimizers.SGD(0.1), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    return model


def _given_explanation(epoch, batch):
    """A gradient-like explanation whose maps depend on the epoch: a bright block that moves."""
    maps = np.zeros((batch, 1, *SHAPE[:2]), "float32")
    maps[:, 0, epoch % SHAPE[0], :] = 1.0
    return Explanation(
        attributions=np.repeat(maps[..., np.newaxis], SHAPE[2], axis=-1),
        maps=maps,
        targets=np.zeros((batch, 1), "int64"),
        scores=np.ones((batch, 1), "float32"),
        method="gradient",
    )


class _GivenMaps(sk.callbacks.SaliencyCallback):
    """The callback with its explanation given, so that its drawing and writing run on the backend alone."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.epoch = 0

    def on_epoch_end(self, epoch, logs=None):
        self.epoch = epoch
        super().on_epoch_end(epoch, logs)

    def _explain(self):
        return _given_explanation(self.epoch, len(self.inputs))


def _image_events(log_dir):
    """``[(tag, step, width, height, picture)]`` of the image summaries under ``log_dir``, read with
    TensorBoard's EventAccumulator. Its reader loads TensorFlow when TensorFlow is installed; the
    stub it ships reads local files and keeps this process free of TensorFlow."""
    sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("tensorboard.compat.notf"))
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util

    events = EventAccumulator(str(log_dir), size_guidance={"tensors": 0})
    events.Reload()
    found = []
    for tag in events.Tags()["tensors"]:
        assert events.SummaryMetadata(tag).plugin_data.plugin_name == "images"
        for event in events.Tensors(tag):
            width, height, png = tensor_util.make_ndarray(event.tensor_proto)
            with Image.open(io.BytesIO(png)) as picture:
                assert picture.format == "PNG"
                found.append((tag, event.step, int(width), int(height), np.asarray(picture.convert("RGB"))))
    return sorted(found, key=lambda event: event[1])


def _picture(explanation, originals):
    """The grid the callback draws, as an RGB array: rendered here independently of its writer."""
    png = files.png_bytes(render.grid(explanation, originals, None, dpi=100))
    with Image.open(io.BytesIO(png)) as picture:
        return np.asarray(picture.convert("RGB"))


def test_fit_writes_each_explained_epochs_grid_to_tensorboard_and_png(tmp_path):
    x, y = _data()
    watch = _GivenMaps(x[:2], "gradient", every_n_epochs=2, log_dir=tmp_path / "logs", out=tmp_path / "png")
    _linear_model().fit(x, y, epochs=4, batch_size=16, verbose=0, callbacks=[watch])
    # written by the tensorboard package alone: tests/backends/test_*_no_tensorflow.py check it in a
    # fresh process (here Keras' own serialiser may have loaded TensorFlow for other tests)

    events = _image_events(tmp_path / "logs")
    assert [(tag, step) for tag, step, *_ in events] == [("saliency/gradient", 1), ("saliency/gradient", 3)]
    saved = sorted((tmp_path / "png").iterdir())
    assert [path.name for path in saved] == ["gradient-epoch-0002.png", "gradient-epoch-0004.png"]
    for (_, step, width, height, logged), path in zip(events, saved):
        assert logged.shape == (height, width, 3) and width > 100 and height > 50
        np.testing.assert_array_equal(logged, _picture(_given_explanation(step, 2), watch.originals))
        with Image.open(path) as png:
            np.testing.assert_array_equal(np.asarray(png.convert("RGB")), logged)
    assert np.abs(events[0][4].astype(int) - events[1][4]).max() > 100  # the moved block shows


def test_maps_are_each_epochs_gradients(tmp_path):
    x, y = _data()
    model = _linear_model()
    kernels = []
    record = keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: kernels.append(model.get_weights()[0]))
    watch = sk.callbacks.SaliencyCallback(x[:3], "gradient", targets=[[0, 1]] * 3, log_dir=tmp_path, batch_size=2)
    explained = []
    keep = keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: explained.append(watch.last))
    model.fit(x, y, epochs=2, batch_size=16, verbose=0, callbacks=[watch, record, keep])

    for epoch, (kernel, (explained_epoch, explanation)) in enumerate(zip(kernels, explained)):
        assert explained_epoch == epoch
        gradient = kernel.T.reshape(2, *SHAPE)  # d logit_k / d x, the same for every input
        expected = np.broadcast_to(gradient, (3, 2, *SHAPE))
        np.testing.assert_allclose(explanation.attributions, expected, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(explanation.maps, np.abs(expected).max(-1), rtol=1e-4, atol=1e-6)
    events = _image_events(tmp_path)
    assert [(tag, step) for tag, step, *_ in events] == [("saliency/gradient", 0), ("saliency/gradient", 1)]
    for (*_, logged), (_, explanation) in zip(events, explained):
        np.testing.assert_array_equal(logged, _picture(explanation, watch.originals))
