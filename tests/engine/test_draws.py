"""The backend-neutral seeded draws (``engine.draws``): the generator's bits against Random123's
known answers and an independent pure-Python implementation, the distributions' moments and a
Kolmogorov–Smirnov test, and keys that do not depend on how the draws are chunked."""

import numpy as np
import pytest
from draws_reference import element_words, normal_draws, split, threefry, uniform_draws
from keras import ops
from scipy import stats

from saliency_kit.engine import draws


def _u32(values):
    return ops.convert_to_tensor(np.asarray(values, np.uint32))


@pytest.mark.parametrize(
    "key, counter, expected",
    [  # Random123's kat_vectors for threefry2x32_20
        ((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
        ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
        ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
    ],
)
def test_threefry_gives_random123s_known_answers(key, counter, expected):
    assert threefry(key, counter) == expected  # the reference
    got = draws.threefry(_u32(key[0]), _u32(key[1]), _u32(counter[0]), _u32(counter[1]))
    assert (int(got[0]), int(got[1])) == expected


def test_threefry_matches_the_pure_python_reference_on_random_words():
    words = np.random.default_rng(0).integers(0, 2**32, size=(4, 200), dtype=np.uint64).astype(np.uint32)
    x0, x1 = draws.threefry(*(_u32(w) for w in words))
    got = np.stack([np.asarray(x0), np.asarray(x1)], axis=1)
    expected = [threefry((int(a), int(b)), (int(c), int(d))) for a, b, c, d in words.T]
    np.testing.assert_array_equal(got, np.array(expected, np.uint32))


def test_words_split_int64_into_hi_and_lo():
    values = np.array([0, 5, 2**32 + 7, 2**63 - 1, -1, -(2**40)])
    got = draws.words(values)
    assert got.dtype == np.uint32 and got.shape == (6, 2)
    assert [tuple(map(int, w)) for w in got] == [split(int(v)) for v in values]
    assert draws.words(np.int64(3)).shape == (2,)


def _draw(kind, seed, keys, ids, shape, dtype="float32"):
    seed, ids = draws.words(np.int64(seed)), ops.convert_to_tensor(np.asarray(ids, np.int32))
    if kind == "shared":
        return np.asarray(draws.shared_uniform(seed, ids, shape, dtype))
    return np.asarray(getattr(draws, kind)(seed, draws.words(np.asarray(keys, np.int64)), ids, shape, dtype))


def test_draws_match_the_reference_and_their_keys_only():
    keys, ids, shape = [3, 2**40 + 1, 0], [0, 5, 2], (2, 3)  # 6 elements: 3 pairs
    uniform = _draw("uniform", 11, keys, ids, shape)
    normal = _draw("normal", 11, keys, ids, shape)
    shared = _draw("shared", 11, None, ids, shape)
    assert uniform.shape == normal.shape == (3, 3, 2, 3) and shared.shape == (3, 2, 3)
    for b, key in enumerate(keys):
        np.testing.assert_array_equal(uniform[b], uniform_draws(11, key, ids, shape))
        np.testing.assert_allclose(normal[b], normal_draws(11, key, ids, shape), rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(shared, uniform_draws(11, None, ids, shape))
    # draw (b, s) depends on (seed, keys[b], ids[s]) only: any chunk of keys and ids gives the same numbers
    np.testing.assert_array_equal(_draw("uniform", 11, [keys[2]] * 2, [2], shape), uniform[[2, 2]][:, [2]])
    np.testing.assert_array_equal(_draw("uniform", 11, keys[1:], ids[::-1], shape), uniform[1:, ::-1])
    np.testing.assert_array_equal(_draw("normal", 11, keys[1:], ids[::-1], shape), normal[1:, ::-1])
    big = _draw("normal", 11, keys, range(7), (37,))  # the noise to the last bit, in any chunk
    np.testing.assert_array_equal(_draw("normal", 11, keys[2:3], [5], (37,))[0, 0], big[2, 5])
    # streams and seeds apart
    assert not np.allclose(uniform, _draw("uniform", 12, keys, ids, shape))
    assert len({uniform[0, 0, 0, 0], shared[0, 0, 0], normal[0, 0, 0, 0]}) == 3


def test_odd_sizes_take_the_first_words_of_the_last_pair():
    five, six = _draw("uniform", 1, [4], [0], (5,)), _draw("uniform", 1, [4], [0], (6,))
    np.testing.assert_array_equal(five[0, 0], six[0, 0, :5])
    np.testing.assert_array_equal(_draw("shared", 1, None, [3], ())[0], uniform_draws(1, None, [3], ())[0])


def test_uniform_numbers_are_exact_multiples_below_one():
    u32 = _draw("uniform", 0, [0, 1], range(64), (64,))
    u64 = _draw("uniform", 0, [0, 1], range(64), (64,), "float64")
    u16 = _draw("uniform", 0, [0, 1], range(64), (64,), "float16")
    assert u64.dtype == np.float64 and u16.dtype == np.float16
    np.testing.assert_array_equal(u64, u32.astype(np.float64))  # the same numbers, whatever the float
    assert np.all(u32 * 2**24 == np.floor(u32 * 2**24)) and np.all(u16.astype(np.float64) * 2**11 % 1 == 0)
    for u in (u32, u64, u16):
        assert u.min() >= 0 and u.max() < 1
    words = element_words(0, 0, 0, 1, 64)
    np.testing.assert_array_equal(u16[0, 0].astype(np.float64), [(w >> 21) / 2**11 for w in words])


def test_the_distributions_moments_and_kolmogorov_smirnov():
    normal = _draw("normal", 7, [0, 1, 2, 3], range(16), (2500,)).ravel()  # 160,000 numbers
    uniform = _draw("uniform", 7, [0, 1, 2, 3], range(16), (2500,)).ravel()
    n = normal.size
    assert abs(normal.mean()) < 4 / np.sqrt(n) and abs(normal.std() - 1) < 4 * np.sqrt(0.5 / n)
    assert abs(stats.skew(normal)) < 4 * np.sqrt(6 / n) and abs(stats.kurtosis(normal)) < 4 * np.sqrt(24 / n)
    assert stats.kstest(normal, "norm").pvalue > 1e-3
    assert abs(uniform.mean() - 0.5) < 4 * np.sqrt(1 / 12 / n) and abs(uniform.var() - 1 / 12) < 1e-3
    assert stats.kstest(uniform, "uniform").pvalue > 1e-3
    pairs = _draw("normal", 7, [5], range(64), (2, 500))[0]  # neighbours (Box–Muller's pairs) uncorrelated
    assert abs(np.corrcoef(pairs[:, 0].ravel(), pairs[:, 1].ravel())[0, 1]) < 0.03
    assert abs(np.corrcoef(normal[0::2], normal[1::2])[0, 1]) < 4 / np.sqrt(n / 2)


def test_draws_in_16_bit_floats_are_the_float32_draws_rounded():
    noise = _draw("normal", 9, [0, 1], range(3), (40,), "float16")
    uniform = _draw("uniform", 9, [0, 1], range(3), (40,), "bfloat16")
    assert noise.dtype == np.float16 and noise.shape == (2, 3, 40)
    np.testing.assert_array_equal(noise, _draw("normal", 9, [0, 1], range(3), (40,)).astype(np.float16))
    u = np.asarray(uniform, np.float32)
    assert u.max() < 1 and np.all(u * 2**8 % 1 == 0)
