"""The project's own exception for failures inside a compiled kernel, and one-line messages.

A method runs inside a ``tf.function``; an error raised while TensorFlow traces or runs it (a
dtype clash inside the model, an op the model cannot run on these inputs) would reach the user
wrapped in TensorFlow's trace, with file paths and graph node names. :func:`one_line` keeps what
the error says and drops where it was said; :func:`translated` turns any error raised inside a
kernel into the error the user sees: an error raised on purpose (the project's own checks, a
``raise`` in a method of the user's) keeps its type with its message on one line; anything
TensorFlow or Keras raised becomes a :class:`ComputeError` naming what was being done.
"""

from __future__ import annotations

import dis
import linecache
import os
import re

__all__ = ["ComputeError", "one_line", "translated"]

_PATH = re.compile(r"""(?:[A-Za-z]:)?(?:[\\/][^\s'":,()\[\]]+)+\.py(?::\d+)?|File "[^"]*", line \d+(?:, in \S+)?""")
_NOISE = (
    "in user code:",
    "Graph execution error:",
    "Detected at node",
    "Traceback",
    "defined at",
    "[[{{node",
    "[Op:",
    "Stack trace",
    "Function call stack",
    "Captured ",
    "During handling",
)


class ComputeError(ValueError):
    """A method could not be computed on a model: TensorFlow refused an operation inside the
    compiled kernel (the cause's message is in this one's, on one line)."""


def one_line(error: BaseException) -> str:
    """``error``'s message on one line: TensorFlow's "in user code" frames, file paths, graph node
    names and traceback lines removed; the last meaningful line when there are several."""
    text = getattr(error, "message", None) or (str(error.args[0]) if error.args else str(error))
    kept: list[str] = []
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


def _raised_on_purpose(error: BaseException) -> bool:
    """Whether ``error`` was raised by a ``raise`` statement outside TensorFlow and Keras: a check
    of saliency_kit's own or of the user's code (a method of their own), whose message says what it
    means. TensorFlow hides its own frames from tracebacks, so an error TensorFlow raised shows the
    line that called into it, not a ``raise``."""
    tb = error.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    filename = os.path.abspath(tb.tb_frame.f_code.co_filename)
    if any(
        f"{os.sep}{package}{os.sep}" in filename for package in ("tensorflow", "keras", "tf_keras", "jax", "jaxlib")
    ):
        return False
    code = tb.tb_frame.f_code.co_code
    if 0 <= tb.tb_lasti < len(code):
        return code[tb.tb_lasti] in _RAISING
    return linecache.getline(filename, tb.tb_lineno).strip().startswith("raise")


_RAISING = {dis.opmap[name] for name in ("RAISE_VARARGS", "RERAISE") if name in dis.opmap}


def translated(error: Exception, doing: str) -> Exception:
    """The error to raise for ``error``, raised while ``doing`` (e.g. ``"integrated_gradients on
    model 'm'"``) inside a compiled kernel: a one-line error, never TensorFlow's trace.

    An error raised on purpose (by saliency_kit's checks or the user's own method code) keeps its
    type, its message made one line; anything TensorFlow or Keras raised becomes a
    :class:`ComputeError` naming what was being done."""
    message = one_line(error)
    if _raised_on_purpose(error):
        if str(error) == message:
            return error
        try:
            return type(error)(message)
        except Exception:  # noqa: BLE001 - an exception class that takes other arguments
            pass
    return ComputeError(f"{doing} failed inside the compiled computation: {message}")
