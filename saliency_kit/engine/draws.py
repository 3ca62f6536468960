"""Seeded draws that are the same numbers on every backend: a counter-based generator in ``keras.ops``.

The generator is Threefry-2x32 with 20 rounds (Salmon et al. 2011, the generator of
Random123 and of ``jax.random``): a key of two 32-bit words and a counter of two words give
two words. It uses only uint32 addition, xor and rotation, which wrap identically on every
backend, so the bits are the same wherever it runs, and no state: draw ``(b, s)`` is a pure
function of its keys, whatever the chunking.

Keys are chained, each level keyed by the one above:

* input key ``K_b = F(seed, keys[b])`` (``seed`` and ``keys[b]`` the (hi, lo) words of the int64
  seed and input key, :func:`words`); the draws every input shares use the input key of
  ``(2³² − 1, 2³² − 1)`` (the key −1) instead;
* draw key ``D_bs = F(K_b, (ids[s], stream))``, the stream ``0`` for :func:`normal`, ``1`` for
  :func:`uniform`, ``2`` for :func:`shared_uniform` (so the streams never meet, whatever the keys);
* element words ``F(D_bs, (j, 0))`` for the ``j``-th pair of the draw's elements (flattened,
  row-major): words ``2j`` and ``2j + 1``.

Words become floats exactly: a uniform number is ``⌊w / 2^(32−p)⌋ · 2^−p`` with ``p`` the
dtype's significand bits, at most 24 (so it is the same number in float32, float64 and on a
backend without float64); a normal pair is Box–Muller's, ``r = √(−2 ln u₁)`` with
``u₁ = (⌊w₀ / 2⁸⌋ + 1) · 2⁻²⁴`` on ``(0, 1]``, and the angle's cosine and sine taken on
``[0, π/4)`` (``θ = ⌊w₁ / 2⁵⌋ mod 2²⁴ · π/2²⁶``) and placed in the octant the top three bits of
``w₁`` choose (a swap and two signs, exact). Only ``log``, ``sin`` and ``cos`` of well-conditioned
arguments may differ between backends, in the last bits (a few float32 ulps relative).

Every draw is computed in float32 and cast to the dtype asked for. Tensors are built with
``keras.ops`` only: the same code runs inside ``tf.function``, ``jax.jit`` and on PyTorch. PyTorch
has no uint32 arithmetic (its additions and shifts are not defined on that dtype), so there the
words are int64 tensors holding values below 2³², masked back to 32 bits after each addition and
left shift: the same bits.
"""

from __future__ import annotations

import math
from typing import Any

import keras
import numpy as np
from keras import ops

__all__ = ["words", "threefry", "normal", "uniform", "shared_uniform", "NORMAL", "UNIFORM", "SHARED"]

NORMAL, UNIFORM, SHARED = 0, 1, 2  # the streams
ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)
PARITY = 0x1BD11BDA  # the key schedule's constant
SHARED_KEY = (0xFFFFFFFF, 0xFFFFFFFF)  # the input key words of draws every input shares
PACKET = 16  # pairs per draw are padded to a multiple of this: whole SIMD packets of float32
MAX_BITS = 24  # a float32's significand: uniform numbers are multiples of 2^-24 (or coarser)


def words(values: Any) -> np.ndarray:
    """``uint32 [..., 2]``: int64 ``values [...]`` as their (hi, lo) 32-bit words (two's
    complement; on the host, NumPy)."""
    bits = np.asarray(values, np.int64).astype(np.uint64)
    return np.stack([bits >> np.uint64(32), bits & np.uint64(0xFFFFFFFF)], axis=-1).astype(np.uint32)


def _word_dtype() -> str:
    """The dtype words are held in: uint32, int64 on PyTorch (see the module's docstring)."""
    return "int64" if keras.backend.backend() == "torch" else "uint32"


def _u32(value: int) -> Any:
    return ops.convert_to_tensor(np.uint32(value), _word_dtype())


def _wrapped(x: Any) -> Any:
    """``x`` modulo 2³² where words are int64 (a no-op on uint32 words, which wrap themselves)."""
    if keras.backend.standardize_dtype(x.dtype) == "uint32":
        return x
    return ops.bitwise_and(x, ops.convert_to_tensor(np.int64(0xFFFFFFFF), "int64"))


def _add(a: Any, b: Any) -> Any:
    """``a + b`` (uint32, wrapping), broadcast. Tensors of different shapes are added as ``a − (0 − b)``:
    ``keras.ops.add`` on TensorFlow adds a ``b`` with a single axis longer than 1 as a bias along
    the last axis when that axis has its length (``[1, 3, 3] + [1, 3, 1]`` adds along the wrong
    axis)."""
    if tuple(a.shape) == tuple(b.shape):
        return _wrapped(ops.add(a, b))
    if keras.backend.standardize_dtype(a.dtype) != "uint32":
        return _wrapped(ops.add(a, b))  # int64 words: no wrap-around to rely on, nor TensorFlow's bias add
    return ops.subtract(a, ops.subtract(_u32(0), b))


def _rotate(x: Any, r: int) -> Any:
    return ops.bitwise_or(_wrapped(ops.left_shift(x, _u32(r))), ops.right_shift(x, _u32(32 - r)))


def threefry(k0: Any, k1: Any, c0: Any, c1: Any) -> tuple[Any, Any]:
    """Threefry-2x32-20 of counter ``(c0, c1)`` under key ``(k0, k1)``: two uint32 tensors of the
    four's broadcast shape."""
    ks = (k0, k1, ops.bitwise_xor(ops.bitwise_xor(k0, k1), _u32(PARITY)))
    x0, x1 = _add(c0, ks[0]), _add(c1, ks[1])
    for i in range(20):
        x0 = _add(x0, x1)
        x1 = ops.bitwise_xor(_rotate(x1, ROTATIONS[i % 8]), x0)
        if i % 4 == 3:
            j = (i + 1) // 4
            x0 = _add(x0, ks[j % 3])
            x1 = _add(x1, _add(ks[(j + 1) % 3], _u32(j)))
    return x0, x1


def _draw_keys(key: Any, ids: Any, stream: int) -> tuple[Any, Any]:
    """Draw keys ``(D0, D1)``, each uint32 ``[..., m]``: input key words ``key [..., 2]`` and copy
    indices ``ids [m]`` in ``stream``."""
    ids = ops.cast(ids, _word_dtype())
    return threefry(key[..., 0:1], key[..., 1:2], ids, ops.zeros_like(ids) + _u32(stream))


def _element_words(d0: Any, d1: Any, shape: tuple) -> tuple[Any, Any, int]:
    """``(w0, w1, E)``: the element words ``[..., P]`` of draw keys ``d0, d1 [...]``, the
    ``⌈E / 2⌉`` pairs the ``E`` elements of ``shape`` use and more up to a multiple of
    :data:`PACKET`: a tensor of whole packets goes through a backend's vectorised ``log``, ``sin``
    and ``cos`` only (TensorFlow's round the last bit of a tensor's tail differently), so a draw
    is the same number wherever it sits in a chunk."""
    elements = math.prod(shape)
    padded = math.ceil((elements + 1) // 2 / PACKET) * PACKET
    pairs = ops.cast(ops.arange(padded, dtype="int32"), _word_dtype())
    w0, w1 = threefry(d0[..., None], d1[..., None], pairs, ops.zeros_like(pairs))
    return w0, w1, elements


def _interleaved(a: Any, b: Any, elements: int, lead: tuple, shape: tuple) -> Any:
    """``[*lead, *shape]`` from pairs ``a, b [*lead, P]``: elements ``a_0, b_0, a_1, b_1, ...``."""
    flat = ops.reshape(ops.stack([a, b], axis=-1), [*lead, -1])
    return ops.reshape(flat[..., :elements], [*lead, *shape])


def _bits(dtype: str) -> int:
    """The significand bits of a uniform number of ``dtype``, at most :data:`MAX_BITS`."""
    return {"float16": 11, "bfloat16": 8}.get(dtype, MAX_BITS)


def _unit(w: Any, bits: int) -> Any:
    """float32 multiples of ``2^-bits`` on ``[0, 1)`` from words ``w`` (their top ``bits`` bits)."""
    return ops.cast(ops.right_shift(w, _u32(32 - bits)), "float32") * np.float32(2.0**-bits)


def _uniform_from(d0: Any, d1: Any, lead: tuple, shape: tuple, dtype: str) -> Any:
    w0, w1, elements = _element_words(d0, d1, shape)
    bits = _bits(dtype)
    return ops.cast(_interleaved(_unit(w0, bits), _unit(w1, bits), elements, lead, shape), dtype)


def normal(seed: Any, keys: Any, ids: Any, shape: Any, dtype: str = "float32") -> Any:
    """Standard normal draws ``[n, m, *shape]`` of ``dtype``: draw ``s`` of input ``b`` keyed by
    ``(seed [2], keys [n, 2], ids [m])`` (uint32 words, int32 copy indices) in the normal stream."""
    shape = tuple(int(d) for d in shape)
    key = _input_keys(seed, keys)
    d0, d1 = _draw_keys(key, ids, NORMAL)  # [n, m]
    w0, w1, elements = _element_words(d0, d1, shape)
    u1 = (ops.cast(ops.right_shift(w0, _u32(8)), "float32") + np.float32(1.0)) * np.float32(2.0**-24)  # (0, 1]
    radius = ops.sqrt(np.float32(-2.0) * ops.log(u1))
    fraction = ops.bitwise_and(ops.right_shift(w1, _u32(5)), _u32(0xFFFFFF))
    theta = ops.cast(fraction, "float32") * np.float32(math.pi / 2**26)  # [0, π/4)
    cos, sin = ops.cos(theta), ops.sin(theta)
    swap = ops.not_equal(ops.bitwise_and(w1, _u32(1 << 31)), _u32(0))
    x, y = ops.where(swap, sin, cos), ops.where(swap, cos, sin)
    x = ops.where(ops.not_equal(ops.bitwise_and(w1, _u32(1 << 30)), _u32(0)), -x, x)
    y = ops.where(ops.not_equal(ops.bitwise_and(w1, _u32(1 << 29)), _u32(0)), -y, y)
    lead = (int(keys.shape[0]), int(ids.shape[0]))
    return ops.cast(_interleaved(radius * x, radius * y, elements, lead, shape), dtype)


def uniform(seed: Any, keys: Any, ids: Any, shape: Any, dtype: str = "float32") -> Any:
    """Uniform draws on ``[0, 1)`` ``[n, m, *shape]`` of ``dtype``, keyed like :func:`normal` in
    their own stream."""
    shape = tuple(int(d) for d in shape)
    d0, d1 = _draw_keys(_input_keys(seed, keys), ids, UNIFORM)
    return _uniform_from(d0, d1, (int(keys.shape[0]), int(ids.shape[0])), shape, dtype)


def shared_uniform(seed: Any, ids: Any, shape: Any, dtype: str = "float32") -> Any:
    """Uniform draws on ``[0, 1)`` ``[m, *shape]`` of ``dtype`` that every input shares, keyed by
    ``(seed [2], ids [m])`` in a third stream."""
    shape = tuple(int(d) for d in shape)
    key = _input_keys(seed, np.array([SHARED_KEY], np.uint32))  # [1, 2]
    d0, d1 = _draw_keys(key[0], ids, SHARED)
    return _uniform_from(d0, d1, (int(ids.shape[0]),), shape, dtype)


def _words_tensor(value: Any) -> Any:
    """uint32 words (NumPy or tensors) as a tensor of the words' dtype."""
    if isinstance(value, np.ndarray):
        return ops.convert_to_tensor(value.astype(np.int64) if _word_dtype() == "int64" else value, _word_dtype())
    return ops.cast(value, _word_dtype())


def _input_keys(seed: Any, keys: Any) -> Any:
    """The input keys uint32 ``[n, 2]``: ``F(seed, keys[b])``."""
    seed, keys = _words_tensor(seed), _words_tensor(keys)
    k0, k1 = threefry(seed[0], seed[1], keys[:, 0], keys[:, 1])
    return ops.stack([k0, k1], axis=-1)
