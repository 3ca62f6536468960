"""Element-wise activations outside the ReLU family (GELU, tanh, sigmoid, SiLU, ...) as the
propagation rules see them.

An :class:`Elementwise` has the interface of a :class:`~saliency_kit.rules.ReluFamily` that the
gates use (``forward``, ``backward``, ``is_plain``, ``nonnegative``, ``name``), so the same
gates serve both: LRP passes relevance through it unchanged (``Pass``, the identity rule of Ali
et al. 2022 and AttnLRP), DeepLIFT takes the Rescale multiplier ``(f(x) − f(x₀)) / (x − x₀)``.

Only functions known to act on each value alone are recognised (:func:`activation_family`), by
identity: Keras' activations, their ``keras.ops`` twins and the backend's own (``tf.nn``,
``jax.nn``, ``torch.nn.functional``), ``functools.partial`` of ``gelu`` with ``approximate=``,
and KerasHub's ``gelu_approximate``. ``softmax``, ``log_softmax``, ``glu`` and ``sparsemax`` mix values along
an axis and are not element-wise.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
from collections.abc import Callable
from typing import Any

import keras

from ..rules.relu import ReluFamily, relu_family_of_function
from .autodiff import pullback

__all__ = ["Elementwise", "activation_family", "elementwise_of_function"]

_KERAS_NAMES = (
    "celu",
    "elu",
    "exponential",
    "gelu",
    "hard_shrink",
    "hard_sigmoid",
    "hard_silu",
    "hard_swish",
    "hard_tanh",
    "log_sigmoid",
    "mish",
    "selu",
    "sigmoid",
    "silu",
    "soft_shrink",
    "softplus",
    "softsign",
    "sparse_plus",
    "sparse_sigmoid",
    "squareplus",
    "swish",
    "tanh",
    "tanh_shrink",
)
_TF_FUNCTIONS = {  # TensorFlow's twins, recognised on TensorFlow
    "gelu": ("nn.gelu",),
    "tanh": ("tanh", "math.tanh", "nn.tanh"),
    "sigmoid": ("sigmoid", "math.sigmoid", "nn.sigmoid"),
    "silu": ("nn.silu", "nn.swish"),
    "elu": ("nn.elu",),
    "selu": ("nn.selu",),
    "softplus": ("nn.softplus", "math.softplus"),
    "softsign": ("nn.softsign", "math.softsign"),
    "exponential": ("exp", "math.exp"),
}
_JAX_FUNCTIONS = {  # JAX's twins, recognised on JAX
    "gelu": ("nn.gelu",),
    "tanh": ("numpy.tanh",),
    "sigmoid": ("nn.sigmoid",),
    "silu": ("nn.silu", "nn.swish"),
    "elu": ("nn.elu",),
    "selu": ("nn.selu",),
    "softplus": ("nn.softplus",),
    "softsign": ("nn.soft_sign",),
    "exponential": ("numpy.exp",),
}
_TORCH_FUNCTIONS = {  # PyTorch's twins, recognised on PyTorch
    "gelu": ("nn.functional.gelu",),
    "tanh": ("tanh", "nn.functional.tanh"),
    "sigmoid": ("sigmoid", "nn.functional.sigmoid"),
    "silu": ("nn.functional.silu",),
    "elu": ("nn.functional.elu",),
    "selu": ("selu", "nn.functional.selu"),
    "softplus": ("nn.functional.softplus",),
    "softsign": ("nn.functional.softsign",),
    "exponential": ("exp",),
}
_FRAMEWORK_FUNCTIONS = {"tensorflow": _TF_FUNCTIONS, "jax": _JAX_FUNCTIONS, "torch": _TORCH_FUNCTIONS}


@functools.cache
def _known() -> dict:
    """``{function: name}`` of the element-wise activations recognised by identity."""
    known: dict = {}
    for name in _KERAS_NAMES:
        for namespace in (keras.activations, keras.ops):
            fn = getattr(namespace, name, None)
            if callable(fn):
                known[fn] = name
    backend = keras.backend.backend()
    if backend in _FRAMEWORK_FUNCTIONS:
        framework = importlib.import_module(backend)
        for name, functions in _FRAMEWORK_FUNCTIONS[backend].items():
            for dotted in functions:
                known[functools.reduce(getattr, dotted.split("."), framework)] = name
    return known


def _is_kerashub_gelu(fn: Any) -> bool:
    return getattr(fn, "__name__", "") == "gelu_approximate" and (getattr(fn, "__module__", "") or "").startswith(
        "keras_hub."
    )


@dataclasses.dataclass(frozen=True)
class Elementwise:
    """An element-wise activation ``y = f(x)`` (same shape, each value on its own).

    ``function``: the activation itself (what the layer calls); ``name``: for messages.
    ``backward(x, dy)`` is ``dy · f'(x)`` by automatic differentiation of ``function``.
    """

    function: Callable
    name: str

    is_plain = False  # not a plain ReLU (Pass's shortcut)
    nonnegative = False  # not relied on: GELU and SiLU dip below zero, sigmoid's f(0) ≠ 0

    def forward(self, x: Any) -> Any:
        return self.function(x)

    def backward(self, x: Any, dy: Any) -> Any:
        _, pull = pullback(self.function, x)
        return pull(dy)


def elementwise_of_function(fn: Any) -> Elementwise | None:
    """The :class:`Elementwise` activation ``fn`` is (see the module docstring), or ``None``."""
    if isinstance(fn, functools.partial) and not fn.args:
        base = elementwise_of_function(fn.func)
        if base is not None and base.name == "gelu" and set(fn.keywords) <= {"approximate"}:
            return Elementwise(fn, f"gelu(approximate={fn.keywords.get('approximate', False)})")
        return None
    if _is_kerashub_gelu(fn):
        return Elementwise(fn, "gelu(approximate=True)")
    try:
        name = _known().get(fn)
    except TypeError:  # unhashable callables are not activations we know
        return None
    return None if name is None else Elementwise(fn, name)


def activation_family(fn: Any) -> ReluFamily | Elementwise | None:
    """The ReLU family or :class:`Elementwise` activation ``fn`` computes, or ``None`` (a linear
    activation, an unknown function, or one that mixes values: softmax)."""
    if fn is None:
        return None
    return relu_family_of_function(fn) or elementwise_of_function(fn)
