"""Bounded caches of compiled kernels, score views and rewritten models, and the engine's counters.

Every cache is held per model through a weak reference (a model that is no longer used is
forgotten with everything compiled for it) and is an LRU of :data:`KERNELS_PER_MODEL` entries
per model, so a long-running process that explains with a new rule object, a new lambda target
or a new input size on every call keeps a bounded number of kernels.

Keys are values wherever the value is hashable: a rule by its class and settings, a callable by
its code, defaults and closure contents. No key is the ``id()`` of an object the cache does not
keep alive (an ``id`` can be reused once its object is gone, which would hand back a stale
kernel).

:data:`KERNELS` holds every kernel the engine compiles; :func:`trace_count` and
:func:`call_count` count its traces and compiled calls (tests use them to prove reuse).
"""

from __future__ import annotations

import functools
import types
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import keras

__all__ = [
    "ModelCache",
    "KERNELS_PER_MODEL",
    "value_key",
    "KERNELS",
    "traced",
    "count_call",
    "trace_count",
    "call_count",
    "kernel_count",
]

#: The most compiled kernels kept per model (least recently used dropped first).
KERNELS_PER_MODEL = 32


class ModelCache:
    """``get(model, key, build)``: per-model LRU of ``size`` entries, the model held weakly."""

    def __init__(self, size: int = KERNELS_PER_MODEL):
        self.size = size
        self._entries: weakref.WeakKeyDictionary[object, OrderedDict] = weakref.WeakKeyDictionary()

    def get(self, model: keras.Model, key: Any, build: Callable) -> Any:
        try:
            entries = self._entries.setdefault(model, OrderedDict())
        except TypeError:  # not weak-referenceable: build every time rather than leak
            return build()
        if key in entries:
            entries.move_to_end(key)
            return entries[key]
        value = entries[key] = build()
        while len(entries) > self.size:
            entries.popitem(last=False)
        return value

    def count(self, model: keras.Model | None = None) -> int:
        """Entries kept for ``model`` (or for every model)."""
        if model is not None:
            return len(self._entries.get(model, ()))
        return sum(len(entries) for entries in self._entries.values())

    def clear(self) -> None:
        self._entries.clear()


#: Every kernel the engine compiles (:func:`saliency_kit.engine.run`, the forward passes), per model.
KERNELS = ModelCache(KERNELS_PER_MODEL)


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def value_key(value: Any, depth: int = 3) -> Any:
    """A hashable key equal for equal values.

    Strings, numbers and tuples are themselves; a plain function (a lambda included) is keyed by
    its code, defaults and closure contents, so a new but identical lambda on every call finds the
    same kernel; another object by its class and its attributes (``vars``) when they are
    hashable. Anything else is its own key (the cache then holds it, within its LRU bound).
    """
    if value is None or isinstance(value, (str, int, float, bool, bytes)):
        return value
    if depth <= 0:
        return value
    if isinstance(value, tuple):
        return tuple(value_key(v, depth - 1) for v in value)
    if isinstance(value, (types.ModuleType, type)):
        return value
    if isinstance(value, list):
        return ("list", tuple(value_key(v, depth - 1) for v in value))
    if isinstance(value, functools.partial):
        keywords = tuple(sorted((k, value_key(v, depth - 1)) for k, v in (value.keywords or {}).items()))
        key = ("partial", value_key(value.func, depth - 1), value_key(value.args, depth - 1), keywords)
        return key if _hashable(key) else value
    code = getattr(value, "__code__", None)
    if isinstance(value, types.FunctionType) and code is not None:
        cells = tuple(cell.cell_contents if _has_contents(cell) else None for cell in (value.__closure__ or ()))
        used = value.__globals__
        # the globals it reads are part of what it computes (a module-level k in out[:, k])
        names = tuple((name, value_key(used[name], depth - 1)) for name in code.co_names if name in used)
        parts = (
            code,
            value_key(value.__defaults__ or (), depth - 1),
            tuple(value_key(c, depth - 1) for c in cells),
            names,
        )
        if all(_hashable(p) for p in parts):
            return ("function", *parts)
        return value
    attributes = getattr(value, "__dict__", None)
    if attributes is not None and not isinstance(value, type):
        items = tuple(sorted((k, value_key(v, depth - 1)) for k, v in attributes.items()))
        if _hashable(items):
            return ("object", type(value), items)
    return value


def _has_contents(cell: Any) -> bool:
    try:
        _ = cell.cell_contents
    except ValueError:
        return False
    return True


# ------------------------------------------------------------------ the engine's compiled kernels
_stats = {"traces": 0, "calls": 0}


def trace_count() -> int:
    """How many times the engine has traced (compiled) a kernel since the process started."""
    return _stats["traces"]


def call_count() -> int:
    """How many compiled kernel calls the engine has made since the process started."""
    return _stats["calls"]


def kernel_count(model: keras.Model | None = None) -> int:
    """Compiled kernels kept for ``model`` (or for every model): at most ``KERNELS_PER_MODEL`` each."""
    return KERNELS.count(model)


def traced() -> None:
    """Count a trace: kernels call it while being traced (a compiled call does not re-run it)."""
    _stats["traces"] += 1


def count_call() -> None:
    """Count one compiled kernel call."""
    _stats["calls"] += 1
