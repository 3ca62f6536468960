"""ImageNet weights, offline-safe: Keras' cache, a quick probe of the download server, and
:class:`WeightsUnavailableError` naming the expected file before Keras starts a download.
"""

from __future__ import annotations

import os
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from .config import ModelSpec

__all__ = [
    "KERAS_WEIGHTS_URL",
    "OFFLINE_ENV",
    "WeightsUnavailableError",
    "check_imagenet_weights",
    "keras_cache_dir",
    "load_weights_into",
]


OFFLINE_ENV = "SALIENCY_KIT_OFFLINE"


KERAS_WEIGHTS_URL = "https://storage.googleapis.com/tensorflow/keras-applications/"


class WeightsUnavailableError(FileNotFoundError):
    """Pretrained weights are neither cached nor downloadable (no network)."""


# ---------------------------------------------------------------------- imagenet, offline-safe
def keras_cache_dir() -> Path:
    """Where ``keras.utils.get_file`` keeps downloaded models: ``$KERAS_HOME/models``, else
    ``~/.keras/models`` (``/tmp/.keras/models`` when the home directory is not writable)."""
    given = os.environ.get("KERAS_HOME")
    if given is None:
        base = Path("~").expanduser()
        home = (base if os.access(base, os.W_OK) else Path("/tmp")) / ".keras"
    else:
        home = Path(given).expanduser()
    if home.exists() and not os.access(home, os.W_OK):
        home = Path("/tmp") / ".keras"
    return home / "models"


def _server_reachable(url: str | None = None, timeout: float = 3.0) -> bool:
    """True when an HTTP request to ``url`` (Keras' weights server) gets any answer within
    ``timeout`` seconds; False at once when ``$SALIENCY_KIT_OFFLINE`` is set."""
    if os.environ.get(OFFLINE_ENV, "").strip() not in ("", "0"):
        return False
    url = url or KERAS_WEIGHTS_URL

    result = []

    def probe() -> None:
        try:
            urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout)
            result.append(True)
        except urllib.error.HTTPError:  # the server answered: the network works
            result.append(True)
        except (OSError, ValueError):  # no route, no DNS, a timeout, TLS trouble: offline
            result.append(False)

    thread = threading.Thread(target=probe, daemon=True)  # DNS look-ups ignore socket timeouts
    thread.start()
    thread.join(timeout + 1)
    return bool(result and result[0])


def check_imagenet_weights(spec: ModelSpec) -> None:
    """Raise WeightsUnavailableError unless the weights are cached or downloadable."""
    if not spec.weights_file:
        return  # nothing to check against: let Keras try
    expected = keras_cache_dir() / spec.weights_file
    if expected.is_file() or _server_reachable():
        return
    raise WeightsUnavailableError(
        f"ImageNet weights for {spec.name} are not cached at {expected} and cannot be downloaded "
        f"(no network). Copy the file there, pass it with --weights PATH (weights=PATH), use "
        f'--weights random (weights="random") for an untrained network, or use the shipped '
        f"offline model: --model shapes."
    )


def load_weights_into(model: Any, weights: Any, name: str) -> None:
    path = Path(os.fspath(weights)) if isinstance(weights, (str, os.PathLike)) else None
    if path is None:
        raise ValueError(f"weights must be 'imagenet', 'random' or a file path, got {weights!r}")
    if not path.is_file():
        raise FileNotFoundError(
            f"weights file {path} does not exist (weights= accepts 'imagenet', 'random' or the path of a weights file)"
        )
    try:
        if path.suffix == ".keras":
            import keras

            source = keras.saving.load_model(path, compile=False)
            model.set_weights(source.get_weights())
        else:
            model.load_weights(path)
    except (ValueError, OSError, KeyError, TypeError, IndexError) as e:  # what Keras and h5py raise for a
        # file that does not fit the model; one clear message is what users need (--debug: the cause)
        raise ValueError(f"cannot load weights from {path} into {name}: {type(e).__name__}: {e}") from e
