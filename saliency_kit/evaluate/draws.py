"""The seeded draws of the metrics: one generator per (seed, metric, input), noise keys of perturbed
copies, and the seeded random explanation.

Every draw is keyed by the input's position (and, for the random explanation, its key and target),
never by the batch it is in, so results do not depend on ``batch_size`` nor on how the inputs are
grouped.
"""

from __future__ import annotations

import zlib

import numpy as np

__all__ = ["rng", "perturbed_keys", "random_attributions"]


def rng(seed: int, salt: str, index: int) -> np.random.Generator:
    """The generator of one input's draws: keyed by ``(seed, metric name, input position)``."""
    return np.random.default_rng([int(seed) % 2**32, zlib.crc32(salt.encode()), int(index)])


def perturbed_keys(seed: int, count: int, samples: int) -> np.ndarray:
    """One noise key in ``[0, 2**31)`` per perturbed copy ``(input b, sample s)``, row ``b·samples + s``
    (independent of batching, distinct from the clean inputs' default keys ``0..B-1``)."""
    states = [
        np.random.SeedSequence([int(seed) % 2**32, b, s]).generate_state(1)[0]
        for b in range(count)
        for s in range(samples)
    ]
    return (np.asarray(states, dtype=np.int64) % 2**31).astype(np.int64)


def random_attributions(shape: tuple, targets: np.ndarray, keys: np.ndarray, seed: int) -> np.ndarray:
    """The seeded random explanation: uniform ``[0, 1)`` per element, ``[N, K, *shape[1:]]``, one
    generator per (input key, target), so an input gets the same map for a target wherever it is in a
    batch, and independent maps for different targets."""
    return np.stack(
        [
            np.stack(
                [np.random.default_rng([int(seed) % 2**32, 0x5EED, int(key), int(t)]).random(shape[1:]) for t in row]
            )
            for key, row in zip(keys, np.asarray(targets))
        ]
    )
