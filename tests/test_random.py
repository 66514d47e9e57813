"""Random numbers: the Philox stream bit for bit, the distributions' statistics, and the
generator state (seed + offset) that makes streams reproducible and resumable."""

import math

import numpy as np
import pytest

import ember

M0, M1, W0, W1, MASK = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85, 0xFFFFFFFF


def philox_reference(counter, key):
    """Philox-4x32-10 on Python ints, straight from Salmon et al. (2011), for cross-checks."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for _ in range(10):
        p0, p1 = M0 * c0, M1 * c2
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 & MASK, (p0 >> 32) ^ c3 ^ k1, p0 & MASK
        k0, k1 = (k0 + W0) & MASK, (k1 + W1) & MASK
    return [c0, c1, c2, c3]


# Random123's kat_vectors for philox4x32 with 10 rounds: counter words, key words, output words.
KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((MASK,) * 4, (MASK, MASK), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    (
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    ),
]


@pytest.mark.parametrize("counter,key,expected", KAT)
def test_reference_philox_matches_known_answers(counter, key, expected):
    assert philox_reference(counter, key) == list(expected)


def test_stream_starts_with_the_known_answer_for_seed_zero():
    # block 0 of seed 0 is counter (0, 0, 0, 0) under key (0, 0): the first KAT vector
    assert ember.Generator(0).bits((4,)).tolist() == list(KAT[0][2])


@pytest.mark.parametrize(
    "seed,offset,n",
    [(0, 0, 8), (0x0123456789ABCDEF, 5, 11), (2**64 - 1, 3, 6), (7, 4 * 2**33 + 2, 9), (12345, 4 * (2**32 - 1) + 1, 8)],
)
def test_bits_follow_the_documented_counter_layout(seed, offset, n):
    """Element i is word (offset+i) % 4 of block (offset+i) // 4, whose counter is
    (block low word, block high word, 0, 0), under key (seed low word, seed high word)."""
    g = ember.Generator(seed)
    g.set_state({"seed": seed, "offset": offset})
    got = g.bits((n,)).tolist()
    key = (seed & MASK, seed >> 32)
    expected = []
    for i in range(offset, offset + n):
        block = i // 4
        expected.append(philox_reference((block & MASK, block >> 32, 0, 0), key)[i % 4])
    assert got == expected
    assert g.get_state() == {"seed": seed, "offset": offset + n}


def test_same_seed_same_numbers_other_seed_other_numbers():
    for fn in (ember.rand, ember.randn):
        a = fn(3, 4, generator=ember.Generator(42))
        b = fn(3, 4, generator=ember.Generator(42))
        c = fn(3, 4, generator=ember.Generator(43))
        assert a.equal(b) and not a.equal(c)
    ember.manual_seed(5)
    a = ember.rand(10)
    ember.manual_seed(5)
    assert ember.rand(10).equal(a), "manual_seed must restart the stream"


def test_offsets_continue_the_stream():
    g = ember.Generator(9)
    whole = g.bits((13,)).tolist()
    g.manual_seed(9)
    parts = g.bits((3,)).tolist() + g.bits((2, 2)).reshape(-1).tolist() + g.bits((6,)).tolist()
    assert parts == whole
    g.manual_seed(9)
    r = ember.rand(7, generator=g)
    assert g.get_state()["offset"] == 7
    g.manual_seed(9)
    assert ember.cat([ember.rand(3, generator=g), ember.rand(4, generator=g)]).equal(r)


def test_get_state_set_state_replays():
    g = ember.Generator(3)
    ember.randn(5, generator=g)
    state = g.get_state()
    a = ember.randn(4, 2, generator=g)
    b = ember.rand(3, generator=g)
    g.set_state(state)
    assert ember.randn(4, 2, generator=g).equal(a) and ember.rand(3, generator=g).equal(b)
    other = ember.Generator(0)
    other.set_state(state)
    assert ember.randn(4, 2, generator=other).equal(a), "a state moves between generators"


def test_a_private_generator_leaves_the_default_alone():
    ember.manual_seed(1)
    before = ember.manual_seed(1).get_state()
    ember.rand(100, generator=ember.Generator(8))
    assert ember.random.default_generator.get_state() == before


N = 100_000


@pytest.mark.parametrize("dtype", [ember.float32, ember.float64, ember.float16])
def test_rand_is_uniform_on_the_unit_interval(dtype):
    u = ember.rand(N, dtype=dtype, generator=ember.Generator(11)).numpy().astype(np.float64)
    assert u.dtype == np.float64 and u.min() >= 0.0 and u.max() < 1.0
    # standard error of the mean is 0.29 / sqrt(N) ~ 9e-4: 5e-3 is over five of them
    assert abs(u.mean() - 0.5) < 5e-3
    assert abs(u.std() - math.sqrt(1 / 12)) < 5e-3
    counts = np.histogram(u, bins=10, range=(0, 1))[0]
    chi2 = ((counts - N / 10) ** 2 / (N / 10)).sum()
    assert chi2 < 30, chi2  # 9 degrees of freedom: P(chi2 > 30) ~ 4e-4


def test_float64_rand_uses_more_than_24_bits():
    u = ember.rand(1000, dtype=ember.float64, generator=ember.Generator(2)).numpy()
    assert np.any(u * 2**24 != np.floor(u * 2**24))
    assert np.all(u * 2**53 == np.floor(u * 2**53))


@pytest.mark.parametrize("dtype", [ember.float32, ember.float64])
def test_randn_is_standard_normal(dtype):
    z = ember.randn(N, dtype=dtype, generator=ember.Generator(12)).numpy().astype(np.float64)
    assert np.isfinite(z).all()
    assert abs(z.mean()) < 0.015 and abs(z.std() - 1) < 0.015
    assert abs(np.mean(np.abs(z) < 1) - 0.6827) < 0.006
    assert abs(np.mean(z > 2) - 0.02275) < 0.003
    assert abs(np.mean(z**4) - 3) < 0.1  # kurtosis of a normal


def test_randint_and_randperm():
    r = ember.randint(-2, 5, size=(N,), generator=ember.Generator(4)).numpy()
    assert r.dtype == np.int64 and r.min() == -2 and r.max() == 4
    counts = np.bincount(r + 2)
    assert ((counts - N / 7) ** 2 / (N / 7)).sum() < 25  # 6 degrees of freedom
    assert ember.randint(10, size=(3, 2), generator=ember.Generator(0)).shape == (3, 2)
    p = ember.randperm(50, generator=ember.Generator(6))
    assert sorted(p.tolist()) == list(range(50)) and p.tolist() != list(range(50))
    assert p.equal(ember.randperm(50, generator=ember.Generator(6)))


def test_in_place_initializers():
    t = ember.zeros(2000, dtype=ember.float64)
    ember.random.uniform_(t, -3, -1, generator=ember.Generator(1))
    assert t.amin().item() >= -3 and t.amax().item() < -1
    ember.random.normal_(t, 10.0, 0.5, generator=ember.Generator(1))
    assert abs(t.mean().item() - 10) < 0.05 and abs(t.std().item() - 0.5) < 0.05
