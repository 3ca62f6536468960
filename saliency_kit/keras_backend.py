"""Which Keras backend saliency_kit runs on: found without importing Keras, and one clear error
for a backend it does not run on.

Keras picks its backend once, when first imported: ``$KERAS_BACKEND``, else ``"backend"`` in
``$KERAS_HOME/keras.json`` (``~/.keras/keras.json``), else TensorFlow. saliency_kit runs on
:data:`SUPPORTED` (TensorFlow, JAX and PyTorch); on another one (``numpy``, ``openvino``) the package would
fail deep inside, so :func:`require_supported_backend` says so first, naming the backend and what
to use. Nothing here imports a framework.
"""

from __future__ import annotations

import json
import os
import sys

__all__ = ["SUPPORTED", "selected_backend", "backend", "require_supported_backend", "BackendError"]

#: The Keras backends saliency_kit runs on.
SUPPORTED = ("tensorflow", "jax", "torch")


class BackendError(RuntimeError):
    """Keras is (or would be) running on a backend saliency_kit does not run on."""


def _config_backend() -> str | None:
    home = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    try:
        with open(os.path.join(home, "keras.json"), encoding="utf-8") as handle:
            value = json.load(handle).get("backend")
    except (OSError, ValueError, AttributeError):
        return None
    return str(value) if value else None


def selected_backend() -> tuple[str, str]:
    """``(backend, where it comes from)``: the running Keras' backend if Keras is imported, else
    the one it would choose."""
    keras = sys.modules.get("keras")
    backend = getattr(getattr(keras, "backend", None), "backend", None)
    if callable(backend):
        return str(backend()), "the running Keras"
    if os.environ.get("KERAS_BACKEND"):
        return os.environ["KERAS_BACKEND"].strip(), "$KERAS_BACKEND"
    configured = _config_backend()
    if configured:
        return configured, "keras.json"
    return "tensorflow", "Keras' default"


def backend() -> str:
    """The Keras backend saliency_kit runs on (or will, once Keras is imported): ``"tensorflow"``
    ``"jax"`` or ``"torch"``; :class:`BackendError` for another one."""
    require_supported_backend()
    return selected_backend()[0].lower()


def require_supported_backend() -> None:
    """Raise :class:`BackendError` unless Keras uses (or will use) a backend in :data:`SUPPORTED`."""
    name, source = selected_backend()
    if name.lower() not in SUPPORTED:
        raise BackendError(
            f"saliency_kit runs on Keras' TensorFlow, JAX or PyTorch backend, not on {name!r} (set by {source}): "
            f"its gradients, backward rules and kernels exist for those three; set "
            f"KERAS_BACKEND=tensorflow, KERAS_BACKEND=jax or KERAS_BACKEND=torch; received backend {name!r}."
        )
