"""A final softmax/sigmoid recognised from what a layer computes, not from a function's name.

A layer (a ``Lambda``, an ``Activation`` holding a lambda, a ``keras.ops`` node, a layer of the
user's own, a subclassed model) is traced on symbolic inputs by the active backend: into a
TensorFlow graph (:mod:`.tf_squash`) or a JAX program (:mod:`.jax_squash`), or run on PyTorch under a
function mode noting its calls (:mod:`.torch_squash`). Its output ends in a
squash when the last operations are a sigmoid or a softmax over the last axis (an op, or written
out in ops), followed only by operations that keep values (casts, reshapes). The values before it
are taken from the computation the layer runs in (the engine's compiled kernel), so the layer is
not re-written and its variables are its own. Importing this module imports no framework.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import keras

__all__ = ["traced_squash", "eager_or_traced"]


def traced_squash(call: Callable, specs: Sequence[tuple], variables: Sequence[Any] = ()) -> tuple[str, str] | None:
    """``(kind, squash)`` for ``call(*inputs)``'s single output, else ``None``.

    ``specs``: each input's ``(shape, dtype)`` (``None`` for an unknown size); ``variables``: the
    ``keras.Variable`` objects ``call`` reads (the JAX trace takes them as arguments). ``squash``
    is ``"sigmoid"`` or ``"softmax"``; ``kind`` is ``"traced"`` (:func:`eager_or_traced` reaches the
    values before it) or ``"opaque"`` (the squash cannot be looked behind: it ends a separately
    compiled ``tf.function``, or a JAX call with a differentiation rule of its own).
    """
    if keras.backend.backend() == "jax":
        from . import jax_squash

        return jax_squash.traced_squash(call, specs, variables)
    if keras.backend.backend() == "torch":
        from . import torch_squash

        return torch_squash.traced_squash(call, specs, variables)
    from . import tf_squash

    return tf_squash.traced_squash(call, specs)


def eager_or_traced(call: Callable, variables: Sequence[Any] = ()) -> Callable:
    """``run(*args)``: ``call(*args)``'s values before its final softmax/sigmoid, passed through
    the value-keeping operations after it; eagerly or inside the backend's compiled function
    (``ValueError`` when the output does not end in one). ``variables`` as :func:`traced_squash`."""
    if keras.backend.backend() == "jax":
        from . import jax_squash

        return jax_squash.eager_or_traced(call, variables)
    if keras.backend.backend() == "torch":
        from . import torch_squash

        return torch_squash.eager_or_traced(call, variables)
    from . import tf_squash

    return tf_squash.eager_or_traced(call)
