"""Start Keras for a command: on its TensorFlow backend, without TensorFlow's start-up log noise.

TensorFlow's C++ runtime writes to file descriptor 2 while it is imported: on some CPUs a oneDNN
banner, elsewhere a note about CPU instructions, absl's "log messages before InitializeLog", CUDA
factory registrations. None of it is about the user's command, so :func:`import_tensorflow` sets
``TF_CPP_MIN_LOG_LEVEL`` (unless the user set it) and runs the import with descriptor 2 pointed
at a temporary file, then forwards every line that is not such noise. Numerics are untouched
(``TF_ENABLE_ONEDNN_OPTS`` is left alone). ``--debug`` imports without any of this.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import tempfile

from ..keras_backend import BackendError, require_supported_backend, selected_backend

#: Lines TensorFlow (and the libraries it loads) print at import time, whatever the command.
_NOISE = re.compile(
    r"^[IWEF]\d{4} [\d:.]+\s+\d+ [\w./-]+:\d+\]"  # C++ (glog / absl) log lines
    r"|oneDNN custom operations are on|TF_ENABLE_ONEDNN_OPTS"
    r"|This TensorFlow binary is optimized to use available CPU instructions"
    r"|To enable the following instructions:.*rebuild TensorFlow"
    r"|All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    r"|Unable to register cu(DNN|FFT|BLAS) factory|TF-TRT Warning|Could not find cuda drivers"
    r"|computation placer already registered"
)


def is_noise(line: str) -> bool:
    """Whether ``line`` (as written to stderr) is TensorFlow start-up logging."""
    return bool(_NOISE.search(line))


def import_tensorflow(debug: bool = False) -> None:
    """Check the Keras backend, then import Keras and its framework, TensorFlow quietly (see the
    module docstring); on JAX, Keras alone (it imports JAX, which prints nothing).

    Raises :class:`saliency_kit.keras_backend.BackendError` for another backend, before importing.
    """
    require_supported_backend()
    if selected_backend()[0].lower() != "tensorflow":
        import keras  # noqa: F401

        return
    if "tensorflow" in sys.modules and "keras" in sys.modules:
        return
    if debug:
        import keras  # noqa: F401
        import tensorflow  # noqa: F401

        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    sys.stderr.flush()
    with tempfile.TemporaryFile() as capture:
        saved = os.dup(2)
        try:
            os.dup2(capture.fileno(), 2)
            import keras  # noqa: F401
            import tensorflow  # noqa: F401
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        capture.seek(0)
        text = capture.read().decode("utf-8", errors="replace")
    kept = [line for line in text.splitlines() if line.strip() and not is_noise(line)]
    if kept:
        print("\n".join(kept), file=sys.stderr)

    import tensorflow as tf

    tf.get_logger().setLevel(logging.ERROR)  # its Python-side notices (e.g. retracing) likewise


__all__ = ["import_tensorflow", "is_noise", "BackendError"]
