"""StdRng against the reference (recorded figures) and published vectors.

The expected arrival times were recorded from the reference wheel
(ai-dynamo-runtime 1.6.1) through ../shared/tools/peer_run.py on synthetic
poisson payloads (isl 64, osl 2); its per-request ``arrival_time_ms``, sorted,
equal ``StdRng(arrival_seed).poisson_arrivals(n, 1000 / request_rate)``
exactly.
"""

import math

import pytest

from aisimulate_core import native
from aisimulate_core.workload.rng import StdRng, _canon, _round_half_away

BACKENDS = ["python"] + (["c"] if native.lib is not None else [])

# (arrival_seed, request_rate, sorted arrival_time_ms of the reference)
REFERENCE_POISSON_ARRIVALS = [
    (42, 40.0, [
        0.0, 18.69311544101741, 38.254884879784704, 63.551884211241, 76.56964878901758,
        77.44330858319742, 90.84505026485829, 124.27545886487907, 171.5790360285129,
        175.09736443786196, 175.1787993356421, 242.43840311990607, 260.07645713597236,
        272.4604889795575, 276.25665554631627, 294.76467630467243, 300.93475716825463,
        301.25158127339427, 319.56171268230923, 320.8512483259094, 346.8445431935438,
        393.58062255476256, 410.7958985838641, 428.4252609301233, 429.93214510145987,
        440.740626052482, 455.57586388405076, 495.1195939549578, 500.8088954063332,
        513.6510281056742,
    ]),
    (7, 2.5, [
        0.0, 12.314574867236406, 159.0544926982022, 220.61445033588114, 533.4208347965423,
        660.675849675613, 1868.123140307975, 1945.295780733799, 2063.9934859214654,
        2117.506896043248, 2631.655135110953, 3039.068915287693, 3047.405805537566,
        3082.957343273505, 3270.250783410763, 3666.724662761363, 4520.8497368024,
        5400.729850279701, 5736.2838091175545, 6014.649362536882, 6427.298177067671,
        6640.745310958547, 6830.88468259414, 7091.55806157048, 7710.1503808001025,
    ]),
    (1099511627779, 40.0, [
        0.0, 7.882055979880068, 31.81115309887043, 58.98991806582342, 60.186907326530886,
        73.91238690647286, 109.67285430570246, 111.01102588503726, 196.01648402635482,
        221.81753473429865, 255.91297512400413, 273.02610002689977, 296.22778140936947,
        392.2342612986715, 444.1173366249417, 468.7251489684643, 475.0379603005614,
        477.29245075177454, 498.89215632538424, 514.7437226140374, 516.2583047755561,
        603.3552768522736, 637.653289861619, 637.9857291619965, 664.2843641545633,
        666.072630523643, 682.5936368984196, 686.584795366181, 805.2077430522123,
        891.4181301257167, 896.9131180574796, 953.0575980806457, 972.4051208451565,
        1005.1774624128394, 1011.3087086945777, 1015.8511219626114, 1033.3403765835687,
        1045.7800001899182, 1117.4978574616816, 1120.1124550271134, 1127.696517812151,
        1151.454342821806, 1169.3095089036633, 1189.1716358563924, 1215.9426072956624,
        1234.5817580947798, 1255.2037030561892, 1286.827405056002, 1346.115412278714,
        1410.5611742100082, 1415.2370751920605, 1425.2295609287949, 1440.3778693271272,
        1442.1434912158043, 1450.458361237611, 1494.1620129966445, 1531.8609569638975,
        1546.5358906027861, 1549.4457676820537, 1578.6672765277551, 1582.1638337617878,
        1608.2083754939385, 1667.847047278142, 1702.5883025268615, 1725.6253430076908,
        1780.504060393956, 1813.2803334348296, 1826.516026508994, 1842.152566092326,
        1910.9421223525846,
    ]),]

# reused_input_tokens of 40 sessions (isl 64 = 4 blocks of 16, shared_prefix_ratio 0.5,
# so 2 group blocks), one second apart: 32 = the session's prefix group was seen
# before. The groups come from StdRng(42).random_range(0..groups), one draw per
# session, independent of arrival_seed and of the arrival draws.
REFERENCE_GROUP_REUSE = {
    12: [0, 0, 0, 32, 0, 0, 0, 0, 32, 0, 32, 32, 32, 0, 32, 32, 32, 32, 0, 32]
    + [0] + [32] * 19,
    5: [0, 0, 0, 32, 0, 0] + [32] * 34,
}

CHACHA20_ZERO_KEY_BLOCK0 = [
    0xADE0B876, 0x903DF1A0, 0xE56A5D40, 0x28BD8653, 0xB819D2BD, 0x1AED8DA0, 0xCCEF36A8, 0xC70D778B,
    0x7C5941DA, 0x8D485751, 0x3FE02477, 0x374AD8B8, 0xF4B8436A, 0x1CA11815, 0x69B687C3, 0x8665EEB2,
]  # fmt: skip


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed, rate, expected", REFERENCE_POISSON_ARRIVALS)
def test_poisson_arrivals_match_the_reference(backend, seed, rate, expected):
    arrivals = StdRng(seed, backend=backend).poisson_arrivals(len(expected), 1000.0 / rate)
    assert len(arrivals) == len(expected)
    assert max(abs(a - b) for a, b in zip(arrivals, expected)) <= 1e-9
    assert arrivals == expected  # in fact bit for bit


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("groups", sorted(REFERENCE_GROUP_REUSE))
def test_prefix_group_choices_match_the_reference(backend, groups):
    rng = StdRng(42, backend=backend)
    seen, reuse = set(), []
    for _ in range(40):
        group = rng.gen_range(0, groups)
        reuse.append(32 if group in seen else 0)
        seen.add(group)
    assert reuse == REFERENCE_GROUP_REUSE[groups]


@pytest.mark.parametrize("backend", BACKENDS)
def test_rand_stdrng_value_stability_vector(backend):
    # rand's own test_stdrng_construction: from_seed, then from_rng(&mut rng0)
    seed = bytes([1, 0, 0, 0, 23, 0, 0, 0, 200, 1, 0, 0, 210, 30, 0, 0] + [0] * 16)
    rng0 = StdRng.from_seed(seed, backend=backend)
    x0 = rng0.next_u64()
    child_seed = b"".join(rng0.next_u32().to_bytes(4, "little") for _ in range(8))
    x1 = StdRng.from_seed(child_seed, backend=backend).next_u64()
    assert [x0, x1] == [10719222850664546238, 14064965282130556830]


@pytest.mark.parametrize("backend", BACKENDS)
def test_chacha20_block_matches_rfc7539(backend):
    rng = StdRng.from_seed(bytes(32), rounds=20, backend=backend)
    assert [rng.next_u32() for _ in range(16)] == CHACHA20_ZERO_KEY_BLOCK0


def test_seed_from_u64_key_is_rand_cores_pcg32():
    from aisimulate_core.workload.rng import _pcg32_key

    state, expected = 42, []
    for _ in range(8):  # state advances before each output, as in rand_core
        state = (state * 6364136223846793005 + 11634580027462260723) % 2**64
        xorshifted = (((state >> 18) ^ state) >> 27) % 2**32
        rot = state >> 59
        expected.append(((xorshifted >> rot) | (xorshifted << (32 - rot))) % 2**32)
    assert _pcg32_key(42) == expected


@pytest.mark.parametrize("backend", BACKENDS)
def test_draws_are_one_word_stream_across_buffer_refills(backend):
    words_rng = StdRng(9, backend=backend)
    words = [words_rng.next_u32() for _ in range(300)]
    rng = StdRng(9, backend=backend)
    assert rng.next_u32() == words[0]
    # odd position: the u64 drawn at word 63 takes its high half from the next buffer
    u64s = [rng.next_u64() for _ in range(100)]
    assert u64s == [words[1 + 2 * i] | words[2 + 2 * i] << 32 for i in range(100)]
    assert rng.next_f64() == ((words[201] | words[202] << 32) >> 11) * 2.0**-53


@pytest.mark.parametrize("backend", BACKENDS)
def test_backends_agree_on_every_distribution(backend):
    ours, twin = StdRng(2024, backend=backend), StdRng(2024, backend="python")
    for span in (1, 2, 3, 7, 1000, 2**31 + 11, 2**32 - 1, 2**32, 2**40 + 3, 2**64 - 1):
        for _ in range(5):
            assert ours.gen_range(0, span) == twin.gen_range(0, span)
    assert [ours.gen_range_u32(5, 9) for _ in range(50)] == [twin.gen_range_u32(5, 9) for _ in range(50)]
    assert ours.gen_range_u64(1, 2**63) == twin.gen_range_u64(1, 2**63)
    assert ours.sample_length(100, 30.0) == twin.sample_length(100, 30.0)
    assert ours.poisson_arrivals(50, 7.5) == twin.poisson_arrivals(50, 7.5)


def test_canon_takes_a_second_draw_only_in_the_biased_zone():
    draws = iter([0x55555555, 0x55555556])  # 3 * 0x55555555 = 2**32 - 1 > 2**32 - 3
    assert _canon(0, 3, draws.__next__, 32) == 1
    draws = iter([0x55555555, 0x55555555])  # the carry does not overflow
    assert _canon(10, 13, draws.__next__, 32) == 10
    draws = iter([0xFFFFFFFF])  # low half 2**32 - 3 is not above the zone: one draw
    assert _canon(0, 3, draws.__next__, 32) == 2
    assert next(draws, None) is None


@pytest.mark.parametrize("backend", BACKENDS)
def test_gen_range_uses_u64_draws_above_u32_max(backend):
    # both spans make a second (bias-correcting) draw vanishingly rare
    rng, words = StdRng(5, backend=backend), StdRng(5, backend=backend)
    rng.gen_range(0, 2**32 + 1)
    words.next_u64()
    assert rng.next_u32() == words.next_u32()
    rng.gen_range(0, 3)
    words.next_u32()
    assert rng.next_u32() == words.next_u32()


@pytest.mark.parametrize("backend", BACKENDS)
def test_gen_bool_is_rands_bernoulli(backend):
    rng, words = StdRng(8, backend=backend), StdRng(8, backend=backend)
    assert rng.gen_bool(1.0) is True  # no draw
    assert rng.gen_bool(0.0) is False  # one draw
    words.next_u64()
    value = words.next_u64()
    assert rng.gen_bool(0.3) == (value < int(0.3 * 2.0**64))
    assert rng.next_u32() == words.next_u32()
    with pytest.raises(ValueError, match="p must be in"):
        rng.gen_bool(1.5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_accepted_tokens_stops_at_the_first_rejection(backend):
    rng = StdRng(42, backend=backend)
    assert rng.accepted_tokens([0.0, 1.0]) == 1
    assert rng.accepted_tokens([1.0, 1.0]) == 3
    assert rng.accepted_tokens([1.0, 0.0, 1.0]) == 2
    ours, twin = StdRng(5, backend=backend), StdRng(5, backend="python")
    rates = [0.85, 0.3, 0.0]
    assert [ours.accepted_tokens(rates) for _ in range(200)] == [
        twin.accepted_tokens(rates) for _ in range(200)
    ]


def test_round_half_away_from_zero_like_rust():
    assert _round_half_away(2.5) == 3.0
    assert _round_half_away(-2.5) == -3.0
    assert _round_half_away(0.49999999999999994) == 0.0
    assert _round_half_away(7.4) == 7.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_constant_and_zero_means_draw_nothing(backend):
    rng, words = StdRng(3, backend=backend), StdRng(3, backend=backend)
    assert rng.poisson_arrivals(4, 0.0) == [0.0] * 4
    assert rng.sample_length(64, 0.0) == 64
    assert rng.sample_length(0, 0.0) == 1
    assert rng.next_u32() == words.next_u32()


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_arguments_raise_value_error(backend):
    with pytest.raises(ValueError, match="seed must be a u64"):
        StdRng(-1, backend=backend)
    rng = StdRng(1, backend=backend)
    with pytest.raises(ValueError, match="low < high"):
        rng.gen_range(4, 4)
    with pytest.raises(ValueError, match="low < high"):
        rng.gen_range_u32(0, 2**32)
    with pytest.raises(ValueError, match="finite mean"):
        rng.poisson_arrivals(3, math.inf)
    with pytest.raises(ValueError, match="32 seed bytes"):
        StdRng.from_seed(b"short", backend=backend)


@pytest.mark.skipif(native.lib is None, reason="C core not built")
def test_c_level_functions_match_the_python_twin():
    ffi, lib = native.ffi, native.lib
    box = ffi.new("aisim_rng **")
    assert lib.aisim_rng_new(box) == 0
    handle = ffi.gc(box[0], lib.aisim_rng_free)
    view = ffi.new("aisim_rng_view **")
    assert lib.aisim_rng_view_of(handle, view) == 0
    view = view[0]
    assert lib.aisim_rng_seed_u64(handle, 77) == 0
    twin = StdRng(77, backend="python")
    lib.aisim_rng_next_u32(handle)
    assert view.last_u32 == twin.next_u32()
    for _ in range(40):  # crosses a refill at an odd word
        lib.aisim_rng_next_u64(handle)
        assert view.last_u64 == twin.next_u64()
    lib.aisim_rng_next_f64(handle)
    assert view.last_f64 == twin.next_f64()
    for span in (3, 1000, 2**31 + 11, 2**32 - 8):
        lib.aisim_rng_range_u32(handle, 7, 7 + span)
        assert view.last_u32 == twin.gen_range_u32(7, 7 + span)
    for span in (3, 2**40 + 3, 2**64 - 9):
        lib.aisim_rng_range_u64(handle, 8, 8 + span)
        assert view.last_u64 == twin.gen_range_u64(8, 8 + span)
    lib.aisim_rng_exponential(handle, 3.5)
    assert view.last_f64 == twin.exponential_ms(3.5)
    words = ffi.new("uint32_t[]", 70)
    lib.aisim_rng_fill_u32(handle, words, 70)
    assert list(words) == [twin.next_u32() for _ in range(70)]
    out = ffi.new("double[]", 30)
    assert lib.aisim_rng_poisson_arrivals(handle, 30, 25.0, out) == 0
    assert list(out) == twin.poisson_arrivals(30, 25.0)
    assert lib.aisim_rng_range_u32(handle, 5, 5) == native.EINVAL
    assert lib.aisim_rng_exponential(handle, -1.0) == native.EINVAL
    assert lib.aisim_rng_poisson_arrivals(handle, 3, math.nan, out) == native.EINVAL
    assert lib.aisim_rng_seed_bytes(handle, bytes(32), 7) == native.EINVAL
