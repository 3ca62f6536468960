"""The PyTorch backend of the engine: the kernels are Python functions running the model eagerly
under autograd.

This module is the backend object :func:`saliency_kit.engine.backend.active` returns on Keras'
PyTorch backend; its ``__all__`` is the backend's surface (:class:`saliency_kit.engine.backend.Backend`),
as :mod:`saliency_kit.engine.tf`'s is on TensorFlow. PyTorch runs operations as they are called, so
a kernel is the method's function itself over a chunk: built once per (model, method, options,
shapes) and reused (the engine's cache), with nothing rebuilt per call. It runs under
``torch.no_grad()``; the :class:`Context` (:mod:`saliency_kit.engine.torch_context`) enables
autograd only around the forward passes it differentiates, so forward-only work records nothing.
The model's variables are read where they live, so a kernel sees later training.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import torch

from ..errors import translated
from ..model import inspect
from ..model.inspect import derived_state
from ..model.scores import ScoreView, score_columns
from .context import run_method, run_values
from .spec import KernelSpec
from .torch_context import Context

__all__ = [
    "Context",
    "ScoreView",
    "build_kernel",
    "build_values_kernel",
    "vectorise_classes",
    "eagerly",
    "array_spec",
    "to_numpy",
    "rewrite",
    "weight_sync",
    "derived_state",
    "score_columns",
]


def vectorise_classes(model: keras.Model) -> bool:
    """The K backward passes of a kernel run one after another over the shared forward pass."""
    return False


def eagerly(fn: Callable) -> Any:
    """``fn()``: PyTorch runs everything eagerly."""
    return fn()


def rewrite(model: keras.Model, rule: Any) -> keras.Model:
    """``sk.rewrite`` on PyTorch. A ReLU-family rule: a :class:`~saliency_kit.engine.ruled_model.RuledModel`
    (the model itself, called under the function mode of
    :func:`saliency_kit.engine.torch_rules.with_rule`). A rule that rewrites the linear layers too
    (an LRP composite, DeepLIFT): ``rule.rewrite_model(model)``, a copy whose weights
    :func:`weight_sync` refreshes from the model before each use."""
    if not hasattr(rule, "rewrite_model"):
        from .ruled_model import rewrite_relus
        from .torch_rules import with_rule

        return rewrite_relus(model, rule, with_rule)
    return rule.rewrite_model(model)


def weight_sync(source: keras.Model, copy: keras.Model) -> Callable[[], None]:
    """``sync()`` copying ``source``'s weights into its rewritten ``copy`` when one has changed
    since the last sync: a weight whose tensor was replaced, or written in place (PyTorch counts
    each in-place write of a tensor in its ``_version``: ``assign``, ``set_weights`` and the
    optimizers all write so). A sync with nothing changed costs one look at each weight, not a
    copy of the model."""
    assign = inspect.weight_sync(source, copy)
    synced: list = []  # (tensor, version) of each weight at the last sync

    def sync() -> None:
        now = [(v.value, v.value._version) for v in source.weights]
        if len(now) == len(synced) and all(a is b and m == n for (a, m), (b, n) in zip(now, synced)):
            return
        assign()
        synced[:] = now

    return sync


def _tensor(value: Any) -> Any:
    """A kernel argument as a tensor on Keras' device: uint32 words as int64 (PyTorch has no
    uint32 arithmetic, :mod:`saliency_kit.engine.draws`), tuples element by element."""
    if isinstance(value, tuple):
        return tuple(_tensor(v) for v in value)
    if isinstance(value, np.ndarray) and value.dtype == np.uint32:
        value = value.astype(np.int64)
    return keras.ops.convert_to_tensor(value)


def _eager(body: Callable, doing: str, traced: Callable[[], None]) -> Callable:
    """``call(*args)``: ``body`` on the arguments as tensors, under ``torch.no_grad()``;
    ``traced()`` is called at the first call only (it counts the compilations the other backends
    make); an error reaches the user as one line (:func:`saliency_kit.errors.translated`)."""
    first = [True]

    def call(*args: Any) -> Any:
        try:
            if first[0]:
                traced()
                first[0] = False
            with torch.no_grad():
                return body(*(_tensor(a) for a in args))
        except Exception as error:  # noqa: BLE001 - every error leaves as the project's one line
            raise translated(error, doing) from None

    return call


def build_kernel(spec: KernelSpec) -> Callable:
    """The ``kernel(x, targets, index, keys, seed, payload, *arrays) -> dict`` of one method, with
    the contract of :func:`saliency_kit.engine.tf.build_kernel`."""
    traced = spec.traced
    spec = dataclasses.replace(spec, traced=lambda: None)

    def kernel(x: Any, targets: Any, index: Any, keys: Any, seed: Any, leaves: Any, *arrays: Any) -> dict:
        return run_method(spec, Context, (x, targets, index, keys, seed, leaves, arrays))

    return _eager(kernel, spec.doing, traced)


def build_values_kernel(
    views: Any,
    n: int,
    shape: tuple,
    dtype: Any,
    traced: Any,
    doing: str = "the forward pass",
    raw: bool | str = False,
    taps: tuple = (),
) -> Callable:
    """The ``kernel(x [n, ...]) -> [n, C]``, with the contract of
    :func:`saliency_kit.engine.tf.build_values_kernel`."""
    several = isinstance(shape, list)

    def kernel(x: Any) -> Any:
        return run_values(views(), x, several, raw, taps)

    return _eager(kernel, doing, traced)


def array_spec(value: np.ndarray) -> tuple:
    """``(shape, dtype)`` of an array option (PyTorch kernels take any array)."""
    return tuple(value.shape), value.dtype


def to_numpy(tensor: Any) -> np.ndarray:
    if isinstance(tensor, torch.Tensor):
        return tensor.detach().cpu().numpy()
    return np.asarray(tensor)
