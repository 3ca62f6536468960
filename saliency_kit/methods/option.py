"""One option of a method: its name, type, default, help, choices and range, checked in one place.

The declaration drives everything an option needs: ``Option.check`` gives typed errors for wrong
values, :attr:`Option.range_text` states the range in ``--help`` and in the docs, and a seed
option (:meth:`Option.seed`) draws a seed when none is given. This module imports neither
TensorFlow nor Keras.
"""

from __future__ import annotations

import builtins
import math
import numbers
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Option", "SEED_LIMIT"]

_TYPES = (bool, int, float, str)

#: Seeds lie in ``[0, SEED_LIMIT)`` (they are int64 on the way to the stateless generators).
SEED_LIMIT = 2**63
_DRAWN_SEEDS = 2**31  # a seed drawn for a call that gave none


@dataclass(frozen=True)
class Option:
    """One option of a method.

    ``type`` (``int``, ``float``, ``str`` or ``bool``) is inferred from ``default`` when not
    given; a ``None`` default needs an explicit ``type``. ``choices`` restricts the value.
    ``low``/``high`` bound a number (inclusive; ``low_open``/``high_open`` exclude the bound);
    a bounded float must also be finite. ``array=True``: besides a value of ``type``, the
    method accepts an array (a baseline, a window per axis); such values are checked by the
    method itself. ``layer=True``: besides a value of ``type`` (a layer's name or path), a
    ``keras.layers.Layer`` object, which the method's ``prepare`` resolves (to its path).
    ``kind="seed"`` (see :meth:`seed`): a random seed, drawn by :meth:`resolve` when ``None``.
    The command line offers the option as ``--name-with-dashes`` of ``type``.
    """

    name: str
    default: Any
    type: type | None = None
    help: str = ""
    choices: tuple | None = None
    array: bool = False
    layer: bool = False
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    kind: str = "value"

    @property
    def value_type(self) -> builtins.type:
        """``type``: always set once the option is made (taken from the default when not given)."""
        if self.type is None:
            raise TypeError(f"option {self.name!r} has no type; received an option whose type was unset.")
        return self.type

    @classmethod
    def seed(cls, name: str = "seed", help: str = "random seed, for repeatable maps") -> Option:
        """A seed option: an int in ``[0, 2**63)``, or ``None`` (the default) for a seed drawn
        at random when the method is called (:meth:`resolve`)."""
        return cls(name, None, type=int, help=help, low=0, high=SEED_LIMIT - 1, kind="seed")

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"an option name must be a Python identifier; received {self.name!r}.")
        kind = self.type
        if kind is None:
            if self.default is None:
                raise ValueError(f"option {self.name!r} has default None: give its type (int, float, str or bool).")
            kind = next((t for t in _TYPES if type(self.default) is t), None)
            if kind is None:
                raise TypeError(
                    f"option {self.name!r}: cannot infer a type from default {self.default!r}; "
                    f"give type= one of int, float, str, bool; received {type(self.default).__name__}."
                )
            object.__setattr__(self, "type", kind)
        elif kind not in _TYPES:
            raise TypeError(f"option {self.name!r}: type must be int, float, str or bool; received {kind!r}.")
        if self.choices is not None:
            object.__setattr__(self, "choices", tuple(self.choices))
        if self.kind not in ("value", "seed"):
            raise ValueError(f"option {self.name!r}: kind must be 'value' or 'seed'; received {self.kind!r}.")
        bounded = self.low is not None or self.high is not None
        if bounded and self.type not in (int, float):
            raise TypeError(
                f"option {self.name!r}: only int and float options take low=/high=; received type {kind.__name__}."
            )
        if self.low is not None and self.high is not None and self.low > self.high:
            raise ValueError(
                f"option {self.name!r}: low must not exceed high; received low={self.low}, high={self.high}."
            )
        if bounded and self.default is not None and not self.array:
            self.check(self.default)  # a default outside its own range is a declaration error

    @property
    def flag(self) -> str:
        """The command-line flag: ``steps`` → ``--steps``, ``max_sigma`` → ``--max-sigma``."""
        return "--" + self.name.replace("_", "-")

    @property
    def range_text(self) -> str:
        """The range in words (``"a positive int"``, ``"a number in (0, 1]"``), ``""`` if unbounded."""
        if self.kind == "seed":
            return "a non-negative int; None draws one at random"
        low, high = self.low, self.high
        noun = "int" if self.type is int else "number"
        article = "an" if noun == "int" else "a"
        if low is None and high is None:
            return ""
        if high is None:
            if low == 0:
                return f"a {'positive' if self.low_open else 'non-negative'} {noun}"
            if self.type is int and low == 1 and not self.low_open:
                return "a positive int"
            return f"{article} {noun} {'>' if self.low_open else '≥'} {_number(low)}"
        if low is None:
            return f"{article} {noun} {'<' if self.high_open else '≤'} {_number(high)}"
        left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
        return f"{article} {noun} in {left}{_number(low)}, {_number(high)}{right}"

    def check(self, value: Any, method: str = "") -> Any:
        """``value`` checked against the declaration (``TypeError``/``ValueError``), returned.

        ``None`` is accepted when it is the default. ints are accepted for floats.
        """
        where = f"{method}: " if method else ""
        if value is None and self.default is None:
            return value
        if self.array and not isinstance(value, (str, bool)) and not _is_scalar(value):
            return value  # an array: the method checks its shape and values
        if self.layer and _is_keras_layer(value):
            return value  # a layer object: the method's prepare finds it in the model
        kind = self.value_type
        if kind is bool:
            ok = isinstance(value, bool) or type(value).__name__ == "bool_"
        elif kind is int:
            ok = isinstance(value, numbers.Integral) and not isinstance(value, bool) and type(value).__name__ != "bool_"
        elif kind is float:
            ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and type(value).__name__ != "bool_"
        else:
            ok = isinstance(value, str)
        if not ok:
            extra = " or an array" if self.array else ""
            extra += " or a keras layer" if self.layer else ""
            extra += " or None" if self.default is None else ""
            raise TypeError(f"{where}option {self.name!r} must be {kind.__name__}{extra}; received {value!r}.")
        if self.choices is not None and value not in self.choices:
            raise ValueError(
                f"{where}option {self.name!r} must be one of {', '.join(map(repr, self.choices))}; received {value!r}."
            )
        if not self._in_range(value):
            tail = " or None" if self.default is None and self.kind != "seed" else ""
            raise ValueError(f"{where}{self.name} must be {self.range_text}{tail}; received {value!r}.")
        return value

    def _in_range(self, value: Any) -> bool:
        if self.low is None and self.high is None:
            return True
        if self.type is float and not math.isfinite(float(value)):
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or not (value >= self.high if self.high_open else value > self.high)

    def resolve(self, value: Any) -> Any:
        """The value a call uses: a seed option's ``None`` becomes a seed drawn at random (a
        given seed a plain ``int``); any other value is returned as it is."""
        if self.kind == "seed":
            return int(np.random.default_rng().integers(_DRAWN_SEEDS)) if value is None else int(value)
        return value


def _number(value: Any) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _is_keras_layer(value: Any) -> bool:
    keras = sys.modules.get("keras")  # a layer object exists only once Keras is imported: never import it here
    return keras is not None and isinstance(value, keras.layers.Layer)


def _is_scalar(value: Any) -> bool:
    return isinstance(value, (numbers.Number, str)) or (hasattr(value, "ndim") and value.ndim == 0)
