"""SaliencyCallback during a real model.fit: TensorBoard event files and PNGs read back, training
untouched, the maps of each epoch's weights (checked against tf.GradientTape), one trace per run."""

import glob
import io

import keras
import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from saliency_kit import engine
from saliency_kit.callbacks import SaliencyCallback, _ImageEventFile


def _data(n=48):
    rng = np.random.default_rng(0)
    x = rng.uniform(-1.0, 1.0, (n, 12, 10, 3)).astype("float32")
    y = (x[:, :6, :, 0].mean(axis=(1, 2)) > x[:, 6:, :, 0].mean(axis=(1, 2))).astype("int64")
    return x, y


def _model(seed=7):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential(
        [
            keras.Input((12, 10, 3)),
            keras.layers.Conv2D(8, 3, activation="relu", name="conv"),
            keras.layers.Dropout(0.3),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(2, name="logits"),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(0.01), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    return model


class _Record(keras.callbacks.Callback):
    """After the saliency callback: the weights, its explanation, and the engine's trace count."""

    def __init__(self, watch):
        super().__init__()
        self.watch, self.weights, self.explained, self.traces = watch, [], [], []

    def on_epoch_end(self, epoch, logs=None):
        self.weights.append([w.copy() for w in self.model.get_weights()])
        self.explained.append(self.watch.last)
        self.traces.append(engine.trace_count())


def _events(log_dir):
    """(tag, step, PNG bytes) of every image summary in the event files, read with TensorFlow."""
    found = []
    for path in sorted(glob.glob(f"{log_dir}/events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.metadata.plugin_data.plugin_name == "images":
                    width, height, *pngs = tf.make_ndarray(value.tensor)
                    found.append((value.tag, event.step, int(width), int(height), pngs))
    return found


def test_tensorboard_images_and_pngs_per_explained_epoch_read_back(tmp_path):
    x, y = _data()
    watch = SaliencyCallback(
        x[:3],
        "guided_backprop",
        "top1",
        every_n_epochs=2,
        log_dir=tmp_path / "logs",
        out=tmp_path / "png",
        class_names=["top", "bottom"],
    )
    _model().fit(x, y, epochs=5, batch_size=16, verbose=0, callbacks=[watch])
    events = _events(tmp_path / "logs")
    assert [(tag, step) for tag, step, *_ in events] == [
        ("saliency/guided_backprop", 1),
        ("saliency/guided_backprop", 3),
    ]
    files = sorted(p.name for p in (tmp_path / "png").iterdir())
    assert files == ["guided_backprop-epoch-0002.png", "guided_backprop-epoch-0004.png"]
    for (_, _step, width, height, (png,)), name in zip(events, files):
        logged = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
        assert logged.shape == (height, width, 3) and width > 200 and height > 100
        with Image.open(tmp_path / "png" / name) as saved:
            assert (np.asarray(saved.convert("RGB")) == logged).all()  # the same grid in both
        assert logged.std() > 10  # a picture, not a blank
    # The PNG of one epoch is a grid of the three inputs side by side: one row of (input, map) x 3.
    assert events[0][2] > 3 * events[0][3]


def _records(folder):
    """The events of the one event file in ``folder``, read with TensorFlow."""
    (path,) = glob.glob(f"{folder}/events.out.tfevents.*")
    return list(tf.compat.v1.train.summary_iterator(path))


def test_image_records_are_those_tf_summary_image_writes(tmp_path):
    """The callback's event file holds what tf.summary.image writes for the same picture: the file
    version, then the tag, step, plugin metadata and ``[width, height, PNG]``, the PNG decoding to
    the same pixels; TensorBoard's EventAccumulator reads it as an image summary."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util

    picture = np.random.default_rng(2).integers(0, 256, (7, 9, 3), dtype=np.uint8)
    ours = _ImageEventFile(tmp_path / "ours")
    ours.write("saliency/gradient", picture, step=4)
    ours.close()
    writer = tf.summary.create_file_writer(str(tmp_path / "tf"))
    with writer.as_default():
        tf.summary.image("saliency/gradient", picture[np.newaxis], step=4, max_outputs=1)
    writer.close()

    written, expected = _records(tmp_path / "ours"), _records(tmp_path / "tf")
    assert [e.file_version for e in written] == [e.file_version for e in expected] == ["brain.Event:2", ""]
    (value,), (expected_value,) = written[1].summary.value, expected[1].summary.value
    assert written[1].step == expected[1].step == 4
    assert value.tag == expected_value.tag and value.metadata == expected_value.metadata
    assert (
        value.tensor.dtype == expected_value.tensor.dtype
        and value.tensor.tensor_shape == expected_value.tensor.tensor_shape
    )
    assert value.tensor.string_val[:2] == expected_value.tensor.string_val[:2] == [b"9", b"7"]
    for png in (value.tensor.string_val[2], expected_value.tensor.string_val[2]):
        with Image.open(io.BytesIO(png)) as decoded:
            np.testing.assert_array_equal(np.asarray(decoded), picture)

    accumulator = EventAccumulator(str(tmp_path / "ours"), size_guidance={"tensors": 0})
    accumulator.Reload()
    assert accumulator.Tags()["tensors"] == ["saliency/gradient"]
    assert accumulator.SummaryMetadata("saliency/gradient").plugin_data.plugin_name == "images"
    (event,) = accumulator.Tensors("saliency/gradient")
    width, height, png = tensor_util.make_ndarray(event.tensor_proto)
    assert (event.step, int(width), int(height)) == (4, 9, 7)
    with Image.open(io.BytesIO(png)) as decoded:
        np.testing.assert_array_equal(np.asarray(decoded), picture)


def test_training_is_unchanged_and_maps_follow_each_epochs_weights(tmp_path):
    x, y = _data()
    plain = _model()
    plain.fit(x, y, epochs=3, batch_size=16, verbose=0, shuffle=True)

    engine.clear_cache()
    watched = _model()
    watch = SaliencyCallback(x[:4], "gradient", targets=[[0, 1]] * 4, out=tmp_path)
    record = _Record(watch)
    watched.fit(x, y, epochs=3, batch_size=16, verbose=0, shuffle=True, callbacks=[watch, record])

    for a, b in zip(plain.get_weights(), watched.get_weights()):
        np.testing.assert_array_equal(a, b)  # bit for bit: dropout, shuffling and updates untouched
    # Kernels are traced at the first explained epoch and reused: the weights are refreshed, not retraced.
    assert record.traces[0] > 0 and record.traces[1:] == [record.traces[0]] * 2
    # Each epoch's maps are the gradients of that epoch's weights (an independent GradientTape).
    twin = keras.models.clone_model(watched)
    inputs = tf.constant(x[:4])
    previous = None
    for epoch, (weights, (explained_epoch, explanation)) in enumerate(zip(record.weights, record.explained)):
        assert explained_epoch == epoch
        twin.set_weights(weights)
        grads = []
        for k in (0, 1):
            with tf.GradientTape() as tape:
                tape.watch(inputs)
                score = twin(inputs, training=False)[:, k]
            grads.append(tape.gradient(score, inputs).numpy())
        expected = np.stack(grads, axis=1)  # [B, K, H, W, C]
        np.testing.assert_allclose(explanation.attributions, expected, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(explanation.maps, np.abs(expected).max(-1), rtol=1e-4, atol=1e-6)
        if previous is not None:
            assert np.abs(explanation.attributions - previous).max() > 1e-4  # training moved the maps
        previous = explanation.attributions


def test_arguments_are_checked():
    x = np.zeros((1, 4, 4, 3), "float32")
    with pytest.raises(ValueError, match="somewhere to write"):
        SaliencyCallback(x)
    with pytest.raises(ValueError, match="received 0"):
        SaliencyCallback(x, every_n_epochs=0, out="o")
    with pytest.raises(TypeError, match="received float"):
        SaliencyCallback(x, every_n_epochs=1.5, out="o")


def test_non_image_inputs_are_drawn_without_an_input_column(tmp_path):
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(4, activation="relu"), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse")
    x = np.random.default_rng(1).normal(size=(8, 5)).astype("float32")
    watch = SaliencyCallback(x[:2], "gradient_x_input", out=tmp_path)
    model.fit(x, np.zeros((8, 2), "float32"), epochs=1, verbose=0, callbacks=[watch])
    (png,) = tmp_path.iterdir()
    with Image.open(png) as picture:
        assert picture.format == "PNG" and picture.size[0] > 100
    assert watch.originals is None and watch.last[1].method == "gradient_x_input"
