"""The command line's error and the values of its flags: :class:`UsageError` (every problem
with what was asked, one line, exit status 2), an exception's one-line :func:`message` (an array
in it elided), :func:`did_you_mean`, and the argparse types of the flags' values."""

from __future__ import annotations

import argparse
import difflib
import math
from collections.abc import Callable, Sequence
from typing import Any

__all__ = [
    "UsageError",
    "message",
    "without_arrays",
    "did_you_mean",
    "positive_int",
    "fraction",
    "percentile",
    "colormap",
    "FLAG_TYPES",
]


class UsageError(Exception):
    """A problem with what was asked (exit status 2), reported as one line."""


def message(error: BaseException) -> str:
    """An exception's message on one line (a KeyError without its quotes), any NumPy array in it
    shown as ``array(...)``: an error line never prints an array's values."""
    text = error.args[0] if isinstance(error, KeyError) and error.args else str(error)
    return without_arrays(" ".join(str(text).split())) or type(error).__name__


def without_arrays(text: str) -> str:
    """``text`` with the contents of every ``array(...)`` (a NumPy repr) elided."""
    parts, start = [], 0
    while (at := text.find("array(", start)) >= 0:
        depth, end = 0, at + len("array")
        while end < len(text):
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            end += 1
            if depth == 0:
                break
        parts.append(text[start:at] + "array(...)")
        start = end
    return "".join(parts) + text[start:]


def did_you_mean(name: str, known: Sequence[str], *, n: int = 3) -> str:
    """`` (did you mean 'a', 'b'?)`` with the closest few of ``known`` (case-insensitive), or ``""``."""
    lowered = {str(k).lower(): str(k) for k in known}
    close = difflib.get_close_matches(str(name).lower(), list(lowered), n=n, cutoff=0.6)
    return f" (did you mean {', '.join(repr(lowered[c]) for c in close)}?)" if close else ""


# ------------------------------------------------------------------------------ value types
def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive whole number; received {text!r}.") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number; received {text!r}.")
    return value


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number; received {text!r}.") from None


def _real(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number such as 0.5; received {text!r}.") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number; received {text!r}.")
    return value


def fraction(text: str) -> float:
    value = _real(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number from 0 to 1; received {text!r}.")
    return value


def percentile(text: str) -> float:
    value = _real(text)
    if not 0 < value <= 100:
        raise argparse.ArgumentTypeError(f"expected a percentile in (0, 100]; received {text!r}.")
    return value


def colormap(text: str) -> str:
    from matplotlib import colormaps  # no TensorFlow; matplotlib's registry only

    if text not in colormaps:
        hint = did_you_mean(text, list(colormaps))
        raise argparse.ArgumentTypeError(f"not a matplotlib colormap{hint}; received {text!r}.")
    return text


FLAG_TYPES: dict[type, Callable[[str], Any]] = {int: _whole, float: _real, str: str}
