"""Saliency maps during training: a Keras callback that explains fixed inputs as the model learns.

    import saliency_kit as sk
    watch = sk.callbacks.SaliencyCallback(x_val[:4], "guided_backprop", targets="top1",
                                          log_dir="logs/run1", out="maps/run1",
                                          originals=images[:4], class_names=names)
    model.fit(x, y, epochs=10, callbacks=[watch])
    # tensorboard --logdir logs/run1   ->  IMAGES tab, tag "saliency/guided_backprop", one step per epoch

At the end of every ``every_n_epochs``-th epoch the callback calls :func:`saliency_kit.explain` on
the model as it is then, draws :func:`saliency_kit.render.grid`, and writes it as a TensorBoard
image summary (``log_dir``) and/or as ``out/<method>-epoch-0003.png`` (epochs counted from 1, as
Keras prints them). The event files hold the records ``tf.summary.image`` writes (tag, step, and
the tensor ``[width, height, PNG]`` of TensorBoard's ``images`` plugin), written with the
``tensorboard`` package alone on every Keras backend: no TensorFlow is imported for them.

What it does not do: change the model, its weights, its optimizer state or the course of training.
Explaining only reads the model (the engine's rewritten copies refresh their weights from it on
every call, and its compiled kernels are reused from one epoch to the next: one trace for the
whole run). The NumPy and ``random`` global generators are restored after each explanation, so a
seeded run trains to the same weights with or without the callback.
"""

from __future__ import annotations

import io
import itertools
import os
import random
import socket
import time
from typing import Any

import keras
import numpy as np

from . import files, render

__all__ = ["SaliencyCallback"]


class SaliencyCallback(keras.callbacks.Callback):
    """Explain ``inputs`` at the end of every ``every_n_epochs``-th epoch; log the grid.

    Args:
        inputs: the model inputs to explain, ``[B, ...]`` (a few: every one is a row of the grid).
        method: a method name (see ``saliency methods``); ``**options`` are its options.
        targets: what to explain, as in :func:`saliency_kit.explain` (``"top1"``, class indices, ...).
        every_n_epochs: explain after epochs ``n, 2n, ...`` (1: every epoch).
        log_dir: folder of TensorBoard event files (image summaries under ``tag``); created if missing.
        out: folder for one grid PNG per explained epoch; created if missing.
        originals: the images to draw the maps beside (uint8 ``[B, H, W, 3]`` as loaded). By
            default image-like inputs are shown, each scaled to 0-255 by its own min and max;
            other inputs (sequences, tables) are drawn without an input column.
        class_names: names for the grid's titles.
        tag: the TensorBoard tag; ``"saliency/<method>"`` by default.
        batch_size: passed to :func:`saliency_kit.explain`.

    ``self.last`` is ``(epoch, Explanation)`` of the last explained epoch (0-based epoch, as Keras
    passes it), or None: only the last, so that a long run does not keep every map in memory.
    """

    def __init__(
        self,
        inputs,
        method: str = "guided_backprop",
        targets="top1",
        *,
        every_n_epochs: int = 1,
        log_dir=None,
        out=None,
        originals=None,
        class_names=None,
        tag: str | None = None,
        batch_size: int | None = None,
        **options,
    ):
        super().__init__()
        if isinstance(every_n_epochs, bool) or not isinstance(every_n_epochs, (int, np.integer)):
            raise TypeError(f"every_n_epochs must be an int; received {type(every_n_epochs).__name__}.")
        if every_n_epochs < 1:
            raise ValueError(f"every_n_epochs must be at least 1; received {every_n_epochs}.")
        if log_dir is None and out is None:
            raise ValueError(
                "SaliencyCallback needs somewhere to write: log_dir (TensorBoard) and/or out "
                "(PNG files); received neither."
            )
        if not isinstance(method, str):
            raise TypeError(f"method must be a method name (str); received {type(method).__name__}.")
        self.inputs = inputs
        self.method = method
        self.targets = targets
        self.every_n_epochs = int(every_n_epochs)
        self.log_dir = None if log_dir is None else os.fspath(log_dir)
        self.out = None if out is None else os.fspath(out)
        self.originals = originals if originals is not None else _as_pictures(inputs)
        self.class_names = class_names
        self.tag = tag or f"saliency/{method}"
        self.batch_size = batch_size
        self.options = options
        self.last: tuple[int, object] | None = None
        self._writer: _ImageEventFile | None = None  # made on the first image

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        if (epoch + 1) % self.every_n_epochs:
            return
        explanation = self._explain()
        self.last = (epoch, explanation)

        figure = render.grid(explanation, self.originals, self.class_names, dpi=100)
        png = files.png_bytes(figure)
        if self.out is not None:
            os.makedirs(self.out, exist_ok=True)
            files.write_atomic(os.path.join(self.out, f"{self.method}-epoch-{epoch + 1:04d}.png"), png, durable=False)
        if self.log_dir is not None:
            self._log_image(png, step=epoch)

    def on_train_end(self, logs: dict | None = None) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def _explain(self):
        """``sk.explain`` on the model as it is, leaving the global random generators as they were."""
        from .pipeline.api import explain

        numpy_state, python_state = np.random.get_state(), random.getstate()
        try:
            kwargs = {} if self.batch_size is None else {"batch_size": self.batch_size}
            return explain(self.model, self.inputs, self.method, self.targets, **kwargs, **self.options)
        finally:
            np.random.set_state(numpy_state)
            random.setstate(python_state)

    def _log_image(self, png: bytes, *, step: int) -> None:
        from PIL import Image

        if self.log_dir is None:
            raise ValueError("SaliencyCallback writes TensorBoard images only with a log_dir; received log_dir=None.")
        if self._writer is None:
            self._writer = _ImageEventFile(self.log_dir)
        picture = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
        self._writer.write(self.tag, picture, step=int(step))


_FILE_NUMBERS = itertools.count()


class _ImageEventFile:
    """A new TensorBoard event file in the local folder ``log_dir`` (created if missing), holding
    image summaries as ``tf.summary.image`` records them, written with the ``tensorboard`` package
    alone (its protocol buffers and record framing; no TensorFlow, on any Keras backend).

    ``write(tag, picture, step=...)`` appends one summary of one uint8 ``[H, W, 3]`` picture and
    flushes it to disk; ``close()`` closes the file.
    """

    def __init__(self, log_dir: str | os.PathLike):
        try:
            from tensorboard.compat.proto import event_pb2
            from tensorboard.summary.writer.record_writer import RecordWriter
        except ImportError as error:
            raise ImportError(
                "SaliencyCallback(log_dir=...) writes TensorBoard event files with the tensorboard "
                "package: pip install tensorboard (or saliency_kit[tensorboard]); or pass out=... for "
                "PNG files instead."
            ) from error
        log_dir = os.fspath(log_dir)
        os.makedirs(log_dir, exist_ok=True)
        name = (
            f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.{next(_FILE_NUMBERS)}.v2"
        )
        self.path = os.path.join(log_dir, name)
        self._file = open(self.path, "wb")  # noqa: SIM115 - open until close()
        self._records = RecordWriter(self._file)
        self._append(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2"))

    def write(self, tag: str, picture: np.ndarray, *, step: int) -> None:
        """Append the image summary of ``picture`` (uint8 ``[H, W, 3]``) under ``tag`` at ``step``."""
        from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2

        height, width = picture.shape[:2]
        tensor = tensor_pb2.TensorProto(
            dtype=types_pb2.DT_STRING,
            tensor_shape=tensor_shape_pb2.TensorShapeProto(dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=3)]),
            string_val=[str(width).encode(), str(height).encode(), files.png_bytes(picture)],
        )
        metadata = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="images"))
        value = summary_pb2.Summary.Value(tag=tag, tensor=tensor, metadata=metadata)
        self._append(event_pb2.Event(wall_time=time.time(), step=int(step), summary=summary_pb2.Summary(value=[value])))

    def close(self) -> None:
        self._file.close()

    def _append(self, event: Any) -> None:
        self._records.write(event.SerializeToString())
        self._file.flush()


def _as_pictures(inputs):
    """Image-like inputs ``[B, H, W, 1|3|4]`` as uint8, each scaled by its own min and max; else None."""
    array = np.asarray(inputs)
    if array.ndim != 4 or array.shape[-1] not in (1, 3, 4) or not np.issubdtype(array.dtype, np.number):
        return None
    values = array.astype(np.float64)
    low = values.min(axis=(1, 2, 3), keepdims=True)
    span = values.max(axis=(1, 2, 3), keepdims=True) - low
    scaled = np.where(span > 0, (values - low) / np.where(span > 0, span, 1.0), 0.0)
    return np.round(scaled * 255.0).astype(np.uint8)
