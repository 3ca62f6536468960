"""The k-th smallest value of each row, without sorting: a radix selection on the values' bits.

Guided IG picks, at every inner step of its path, the features whose gradient magnitude is at or
below a quantile; a full sort of every row finds it in ``O(F log F)``. Non-negative IEEE floats
order as their bit patterns read as integers do, so the k-th smallest is found digit by digit,
most significant first: a histogram of the 11-bit digit among the values that share the digits
chosen so far tells which digit the k-th value has and how many values lie below it. That is
one pass over the row per 11 bits (three for float32), each a histogram (``bincount``) of 2048
bins per row, and the result is the very value a sort would put at position k. (16-bit digits
take fewer passes but a histogram 32 times larger, whose running sum then costs more: 11.7
against 7.4 ms for 8 rows of 150,528 float32 values, 224² RGB images, on two cores.)
"""

from __future__ import annotations

from typing import Any

__all__ = ["kth_smallest"]

DIGIT = 11  # bits per pass
_INTEGERS = {"float16": "int16", "bfloat16": "int16", "float32": "int32", "float64": "int64"}


def kth_smallest(values: Any, k: int) -> Any:
    """``[rows, F]`` non-negative floats (``+inf`` and NaN allowed: both order last, NaN after
    ``+inf``) -> ``[rows]``: each row's ``sort(row)[k]``, ``0 <= k < F``, in the values' dtype.

    Select in the narrowest dtype the values are exact in (float32 gradients cast to float64:
    cast them back), since each 11 bits of width is one pass.
    """
    from keras import ops

    rows, features = values.shape
    if not 0 <= k < features:
        raise ValueError(f"k must lie in [0, {features}); received {k}.")
    dtype = ops.dtype(values)
    if dtype not in _INTEGERS:
        raise TypeError(f"kth_smallest takes float16, bfloat16, float32 or float64 values; received {dtype}.")
    bits = ops.view(values, _INTEGERS[dtype])
    if dtype in ("float16", "bfloat16"):  # non-negative, so widening keeps the order and the bits
        bits = ops.cast(bits, "int32")
    width = {"float32": 32, "float64": 64}.get(dtype, 16)
    bins = 1 << DIGIT
    offsets = ops.arange(rows, dtype="int32")[:, None] * bins  # row r's histogram: bins [r·2048, (r+1)·2048)
    spill = rows * bins  # one more bin, for the values whose leading digits differ from the chosen ones
    prefix = ops.zeros([rows, 1], ops.dtype(bits))  # the digits chosen so far, in place
    below = ops.full([rows, 1], k, "int32")  # how many of the values still in play lie below the k-th
    for shift in range((width - 1) // DIGIT * DIGIT, -1, -DIGIT):  # the top digit may be narrower
        digit = ops.cast(ops.bitwise_and(ops.right_shift(bits, shift), bins - 1), "int32")
        index = offsets + digit
        if shift + DIGIT < width:
            in_play = ops.equal(ops.right_shift(bits, shift + DIGIT), ops.right_shift(prefix, shift + DIGIT))
            index = ops.where(in_play, index, spill)
        flat = ops.reshape(index, [-1])
        counts = ops.segment_sum(ops.ones_like(flat), flat, num_segments=spill + 1)[:spill]
        running = ops.cumsum(ops.reshape(ops.cast(counts, "int32"), [rows, bins]), axis=1)  # values ≤ each digit
        chosen = ops.sum(ops.cast(running <= below, "int32"), axis=1, keepdims=True)  # first digit whose count > k
        below = below - ops.take_along_axis(ops.pad(running, [[0, 0], [1, 0]]), chosen, axis=1)
        prefix = ops.bitwise_or(prefix, ops.left_shift(ops.cast(chosen, ops.dtype(prefix)), shift))
    if dtype in ("float16", "bfloat16"):
        prefix = ops.cast(prefix, "int16")
    return ops.view(ops.reshape(prefix, [rows]), dtype)
