"""The engine's backend interface: what :mod:`saliency_kit.engine` asks of a tensor framework.

:class:`Backend` declares it; :func:`active` returns the backend in use, Keras' own
(:mod:`saliency_kit.engine.tf`, :mod:`saliency_kit.engine.jax` or :mod:`saliency_kit.engine.torch`,
modules satisfying the protocol). The engine reaches the framework, and the model machinery built
on it (score views, rewrites), only through :func:`active`; the methods reach it only through the
:class:`~saliency_kit.engine.tf_context.Context` the kernels hand them (and ``keras.ops``). A second
backend is a module with these names, returned by :func:`active`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..keras_backend import require_supported_backend
from .spec import KernelSpec

__all__ = ["Backend", "active"]


@runtime_checkable
class Backend(Protocol):
    """The functions (and the context class) a backend module offers the engine."""

    Context: type
    """What a method's function sees inside a kernel: the chunk's inputs and targets and the
    primitives (gradients, scores, layer taps, running sums, seeded draws, resizing, host steps)."""

    ScoreView: type
    """``ScoreView(model, score)``: ``view(x) -> [n, C]`` the model's scores (``"logits"`` or
    ``"output"``), the score view a kernel evaluates."""

    def build_kernel(self, spec: KernelSpec) -> Callable:
        """The compiled ``kernel(x, targets, index, keys, seed, payload, *arrays)`` returning
        ``{name: [n, K, ...]}``: ``spec.compute(ctx, **spec.options)`` run on one chunk (what it is
        built from: :class:`~saliency_kit.engine.spec.KernelSpec`); an error inside it leaves as
        one line naming ``spec.doing``. ``x [n, ...]``, ``targets`` int32 ``[n, group]``,
        ``index`` int32 ``[n]``; ``keys`` uint32 ``[n, 2]`` and ``seed`` uint32 ``[2]``: the
        (hi, lo) words of the int64 noise keys and seed (:func:`saliency_kit.engine.draws.words`),
        the key words of the backend-neutral generator :mod:`saliency_kit.engine.draws`."""

    def build_values_kernel(
        self,
        views: Callable,
        n: int,
        shape: tuple,
        dtype: Any,
        traced: Callable[[], None],
        doing: str = "the forward pass",
        raw: bool | str = False,
        taps: tuple = (),
    ) -> Callable:
        """The compiled ``kernel(x [n, ...]) -> [n, C]``: the whole score vector, forward only
        (``raw``: the model's outputs instead, ``"unstripped"`` with a final squash kept; ``taps``:
        the activations of those layers); ``x`` a tuple of arrays for a multi-input model."""

    def rewrite(self, model: Any, rule: Any) -> Any:
        """A copy of ``model`` whose backward pass follows ``rule`` (``sk.rewrite``)."""

    def weight_sync(self, source: Any, copy: Any) -> Callable[[], None]:
        """``sync()`` copying the weights of ``source`` (a model) into its rewritten ``copy``."""

    def derived_state(self, layer: Any) -> tuple:
        """The state ``layer`` derives from its variables outside them (part of the cache keys)."""

    def score_columns(self, model: Any) -> int | None:
        """``C`` of a model whose output is ``[batch, C]`` scores, else ``None``."""

    def vectorise_classes(self, model: Any) -> bool:
        """Whether the K backward passes of a kernel run vectorised rather than in a loop."""

    def eagerly(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` run eagerly, even while a kernel is being traced."""

    def array_spec(self, value: np.ndarray) -> Any:
        """The kernel argument spec of an array option (a baseline) of ``value``'s shape and dtype."""

    def to_numpy(self, tensor: Any) -> np.ndarray:
        """A kernel's output as NumPy."""


def active() -> Backend:
    """The backend in use, Keras' own: :mod:`saliency_kit.engine.tf` on TensorFlow,
    :mod:`saliency_kit.engine.jax` on JAX, :mod:`saliency_kit.engine.torch` on PyTorch
    (:class:`~saliency_kit.keras_backend.BackendError` on another)."""
    import keras

    name = keras.backend.backend()
    if name == "jax":
        from . import jax

        return jax  # type: ignore[return-value]  # a module implementing the protocol
    if name == "torch":
        from . import torch

        return torch  # type: ignore[return-value]
    if name != "tensorflow":
        require_supported_backend()
    from . import tf

    return tf  # type: ignore[return-value]
