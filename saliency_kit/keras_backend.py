"""saliency_kit runs on Keras' TensorFlow backend: find out which backend Keras will use, without
importing it, and refuse another one with one clear error.

Keras picks its backend once, when first imported: ``$KERAS_BACKEND``, else ``"backend"`` in
``$KERAS_HOME/keras.json`` (``~/.keras/keras.json``), else TensorFlow. With ``jax``, ``torch`` or
``numpy`` the package would fail deep inside (a ``ModuleNotFoundError`` for a backend that is not
installed, or TensorFlow ops handed foreign tensors); :func:`require_tensorflow` says so first.
"""

from __future__ import annotations

import json
import os
import sys

__all__ = ["selected_backend", "require_tensorflow", "BackendError"]


class BackendError(RuntimeError):
    """Keras is (or would be) running on a backend other than TensorFlow."""


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


def require_tensorflow() -> None:
    """Raise :class:`BackendError` unless Keras uses (or will use) TensorFlow."""
    backend, source = selected_backend()
    if backend.lower() != "tensorflow":
        raise BackendError(
            f"saliency_kit needs Keras' TensorFlow backend (its gradients, rewriting and compiled "
            f"kernels are TensorFlow code); unset KERAS_BACKEND or set KERAS_BACKEND=tensorflow "
            f"(set by {source}); received backend {backend!r}."
        )
