"""The project's own exception for failures inside a compiled kernel, and one-line messages.

A method runs inside a ``tf.function``; an error raised while TensorFlow traces or runs it (a
dtype clash inside the model, an op the model cannot run on these inputs) would reach the user
wrapped in TensorFlow's trace, with file paths and graph node names. :func:`one_line` keeps what
the error says and drops where it was said; :func:`translated` turns any error raised inside a
kernel into the error the user sees: the project's own checks pass through (their messages are
already one line), anything else becomes a :class:`ComputeError` naming what was being done.
"""
from __future__ import annotations

import linecache
import os
import re

__all__ = ["ComputeError", "one_line", "translated"]

_PACKAGE = os.path.dirname(os.path.abspath(__file__))
_PATH = re.compile(r"""(?:[A-Za-z]:)?(?:[\\/][^\s'":,()\[\]]+)+\.py(?::\d+)?|File "[^"]*", line \d+(?:, in \S+)?""")
_NOISE = (
    "in user code:", "Graph execution error:", "Detected at node", "Traceback", "defined at",
    "[[{{node", "[Op:", "Stack trace", "Function call stack", "Captured ", "During handling",
)


class ComputeError(ValueError):
    """A method could not be computed on a model: TensorFlow refused an operation inside the
    compiled kernel (the cause's message is in this one's, on one line)."""


def one_line(error: BaseException) -> str:
    """``error``'s message on one line: TensorFlow's "in user code" frames, file paths, graph node
    names and traceback lines removed; the last meaningful line when there are several."""
    text = getattr(error, "message", None) or (str(error.args[0]) if error.args else str(error))
    kept = []
    for line in str(text).splitlines():
        stripped = line.strip()
        if not stripped or any(stripped.startswith(n) for n in _NOISE) or stripped.startswith("File "):
            continue
        if line.startswith((" ", "\t")) and kept and not stripped.endswith((".", ":")):
            continue  # a source line quoted under a frame
        kept.append(stripped)
    # an autograph message ends with "ErrorType: message" after the frames it quotes
    causes = [k for k in kept if re.match(r"^[A-Z]\w*(Error|Exception): ", k)]
    line = causes[-1].split(": ", 1)[1] if causes else " ".join(kept)
    line = re.sub(r"\s*\[\[.*?\]\]", "", line)
    line = re.sub(r"\s*\[Op:[^\]]*\]", "", line)
    line = _PATH.sub("", line)
    line = " ".join(line.split()).strip(" ,;")
    return line or type(error).__name__


def _own(error: BaseException) -> bool:
    """Whether ``error`` was raised by a ``raise`` statement of saliency_kit's own code (a check
    with a message of its own), not by TensorFlow or Keras called from it (TensorFlow hides its
    own frames from tracebacks, so the last frame shown may be the package's call into it)."""
    tb = error.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    filename = os.path.abspath(tb.tb_frame.f_code.co_filename)
    if not filename.startswith(_PACKAGE + os.sep):
        return False
    return linecache.getline(filename, tb.tb_lineno).strip().startswith("raise")


def translated(error: Exception, doing: str) -> Exception:
    """The error to raise for ``error``, raised while ``doing`` (e.g. ``"integrated_gradients on
    model 'm'"``) inside a compiled kernel: a one-line error, never TensorFlow's trace.

    saliency_kit's own ``ValueError``/``TypeError``/``RuntimeError`` keep their type and message;
    anything TensorFlow, Keras or the model's code raised becomes a :class:`ComputeError`."""
    message = one_line(error)
    if _own(error) and type(error) in (ValueError, TypeError, RuntimeError, ComputeError):
        return type(error)(message)
    return ComputeError(f"{doing} failed inside the compiled computation: {message}")
