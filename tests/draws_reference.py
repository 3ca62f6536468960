"""The engine's seeded draws and linear resizing reproduced independently, for the tests: the
Threefry-2x32-20 generator on plain Python ints (masked to 32 bits), the keys chained as
``saliency_kit.engine.draws`` documents them, the floats made in float64 with ``math``; and the
resizing as explicit loops over output cells (``linear_resize``), checked itself against SciPy."""

import math

import numpy as np

MASK = 0xFFFFFFFF
ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)
NORMAL, UNIFORM, SHARED = 0, 1, 2


def threefry(key, counter):
    """Threefry-2x32 with 20 rounds (Random123's ``threefry2x32_R(20, ...)``) on Python ints."""
    k0, k1 = key
    schedule = [k0, k1, k0 ^ k1 ^ 0x1BD11BDA]
    x0, x1 = (counter[0] + k0) & MASK, (counter[1] + k1) & MASK
    for r in range(20):
        x0 = (x0 + x1) & MASK
        rotation = ROTATIONS[r % 8]
        x1 = ((x1 << rotation) | (x1 >> (32 - rotation))) & MASK
        x1 ^= x0
        if r % 4 == 3:
            injection = r // 4 + 1
            x0 = (x0 + schedule[injection % 3]) & MASK
            x1 = (x1 + schedule[(injection + 1) % 3] + injection) & MASK
    return x0, x1


def split(value):
    """``(hi, lo)`` 32-bit words of an int64 (two's complement)."""
    value &= (1 << 64) - 1
    return value >> 32, value & MASK


def element_words(seed, key, copy, stream, elements):
    """The ``elements`` words of draw ``copy`` of the input with noise key ``key`` (``None``: the
    draws every input shares) in ``stream``."""
    input_key = threefry(split(seed), split(-1 if key is None else key))
    draw_key = threefry(input_key, (copy, stream))
    out = []
    for pair in range((elements + 1) // 2):
        out.extend(threefry(draw_key, (pair, 0)))
    return out[:elements]


def uniform_draws(seed, key, samples, shape, bits=24):
    """``[len(samples), *shape]`` float64: uniform draws on [0, 1) of the input with noise key
    ``key`` (``None``: shared by every input), multiples of ``2^-bits``."""
    size = math.prod(shape)
    stream = SHARED if key is None else UNIFORM
    rows = [[(w >> (32 - bits)) / 2.0**bits for w in element_words(seed, key, s, stream, size)] for s in samples]
    return np.array(rows, np.float64).reshape(len(samples), *shape)


def normal_draws(seed, key, samples, shape):
    """``[len(samples), *shape]`` float64: standard normal draws by Box–Muller, the angle's
    octant from the top three bits of the second word, as documented."""
    size = math.prod(shape)
    rows = []
    for s in samples:
        words = element_words(seed, key, s, NORMAL, size + size % 2)
        row = []
        for w0, w1 in zip(words[0::2], words[1::2]):
            radius = math.sqrt(-2.0 * math.log(((w0 >> 8) + 1) / 2.0**24))
            theta = ((w1 >> 5) & 0xFFFFFF) * math.pi / 2**26
            x, y = math.cos(theta), math.sin(theta)
            if w1 >> 31:
                x, y = y, x
            if (w1 >> 30) & 1:
                x = -x
            if (w1 >> 29) & 1:
                y = -y
            row.extend([radius * x, radius * y])
        rows.append(row[:size])
    return np.array(rows, np.float64).reshape(len(samples), *shape)


def linear_resize(maps, size):
    """``maps [..., *s]`` resized to ``[..., *size]`` (the last ``len(size)`` axes) in float64:
    each axis in turn, output cell ``i`` reading the input at ``(i + ½)·S/T − ½`` clamped to
    ``[0, S − 1]``, linearly between its neighbours."""
    out = np.asarray(maps, np.float64)
    for axis, target in enumerate(size):
        axis -= len(size)
        source = out.shape[axis]
        cells = []
        for i in range(target):
            at = min(max((i + 0.5) * source / target - 0.5, 0.0), source - 1.0)
            low = int(math.floor(at))
            high = min(low + 1, source - 1)
            w = at - low
            cells.append((1 - w) * np.take(out, low, axis=axis) + w * np.take(out, high, axis=axis))
        out = np.stack(cells, axis=axis)
    return out
