# cython: language_level=3
"""The native engine: the hot classes of `_pure.py` in Cython, same names and signatures (§5, §6).

Working representation (chosen by measurement, see docs/performance.md):

- A row (the agents that satisfy one predicate, hold one session, or substantiate one capability)
  with at least one member per 128 agent ids is an array of 64-bit words; a sparser row is a sorted
  array of 32-bit agent ids. A row changes form when it crosses that density (with hysteresis, so
  an agent that joins and leaves does not make it flip back and forth).
- The live set is always dense words.
- Portable Roaring bitmaps are the exchange form: the Explanation's `*_roaring` methods write the
  standard serialisation straight from the words for the compact records. No bitmap operation on
  the hot path is a Python call.

Explain is one pass over the live words per predicate, kept in the Explanation as copies of the
words so that it stays valid whatever happens to the fleet afterwards. Scores are computed for the
eligible agents only, in the same floating-point operation order as `_pure.Index.score` (the
extension is built with -ffp-contract=off), so both engines produce the same bits and winner.
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.mem cimport PyMem_Free
from cpython.unicode cimport PyUnicode_AsUTF8AndSize, PyUnicode_DATA, PyUnicode_DecodeUTF8, PyUnicode_KIND
from libc.math cimport isfinite
from libc.stdint cimport INT64_MAX, int32_t, int64_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, malloc, realloc
from libc.string cimport memcmp, memcpy, memmove, memset, strlen

cimport cython
import orjson

from a3fast._ingest cimport dict_get_hashed, dict_set_hashed, note_in, untracked_if_acyclic
from cpython.object cimport PyObject_Hash
from cpython.bytearray cimport PyByteArray_AS_STRING

#: orjson.dumps held in a C global: the per-placement writers call it without two lookups
cdef object json_dumps = orjson.dumps



__all__ = ["Index", "Explanation", "Scores", "NO_AGENT_REF", "UNKNOWN", "MAX_OUTCOMES",
           "resolve_predicates"]

#: `only` argument of Index.explain when the task names no agent.
NO_AGENT_REF = -2
#: A row or agent id that does not exist (a predicate no agent satisfies, a name not in the fleet).
UNKNOWN = -1
#: The most outcomes counted for one agent and task kind (a3fast.fleet.scoring.MAX_OUTCOMES, docs/design.md
#: Reading 26): successes + 1 and attempts + 2 stay exact as doubles and far from int64's limit.
MAX_OUTCOMES = 1000000000000000
cdef int64_t OUTCOME_LIMIT = 1000000000000000
# the same two as C constants, for code that runs without the GIL
cdef enum:
    C_NO_AGENT_REF = -2
    C_UNKNOWN = -1
    # A single explain or score lets go of the GIL only when its loops span at least this many
    # words of agent ids (16,384 ids): letting go and taking it back costs about 400 instructions,
    # a fifth of the whole loop at 1,000 agents, and a thread that takes the GIL meanwhile can
    # hold the call up for a switch interval. A batch (`place_batch`) always lets go.
    GIL_FREE_WORDS = 256

cdef extern from "Python.h":
    char* PyOS_double_to_string(double val, char format_code, int precision, int flags, int* ptype) except NULL
    long long PyLong_AsLongLongAndOverflow(object value, int* overflow) except? -1
    int Py_DTSF_ADD_DOT_0

cdef extern from *:
    """
    #include <stdint.h>
    #include <stdlib.h>
    #include <string.h>
    #if defined(_MSC_VER)
    #include <intrin.h>
    static inline int a3_ctz64(unsigned long long x) { unsigned long i; _BitScanForward64(&i, x); return (int)i; }
    #else
    #define a3_ctz64(x) __builtin_ctzll(x)
    #endif
    /* SWAR population count: portable, and as fast as libgcc's without -mpopcnt. */
    static inline int a3_popcount64(unsigned long long x) {
        x = x - ((x >> 1) & 0x5555555555555555ULL);
        x = (x & 0x3333333333333333ULL) + ((x >> 2) & 0x3333333333333333ULL);
        x = (x + (x >> 4)) & 0x0F0F0F0F0F0F0F0FULL;
        return (int)((x * 0x0101010101010101ULL) >> 56);
    }
    /* A3FAST_CPU=portable, read at import (a3_cpu_init): every loop below takes its portable form. */
    static int a3_portable = 0;
    /* The set bits of n words: with the processor's popcnt where it has one (chosen at run time,
       as the base64 blocks below are), else the SWAR count. */
    #if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
    static int a3_has_popcnt = 0;
    __attribute__((target("popcnt")))
    static Py_ssize_t a3_popcount_words_hw(const uint64_t* words, Py_ssize_t n) {
        Py_ssize_t i, total = 0;
        for (i = 0; i < n; i++) total += __builtin_popcountll(words[i]);
        return total;
    }
    /* The runs of consecutive set bits in n words: the set bits whose lower neighbour is clear. */
    __attribute__((target("popcnt")))
    static Py_ssize_t a3_runs_words_hw(const uint64_t* words, Py_ssize_t n) {
        Py_ssize_t i, runs = 0;
        uint64_t w, carry = 0;
        for (i = 0; i < n; i++) {
            w = words[i];
            runs += __builtin_popcountll(w & ~((w << 1) | carry));
            carry = w >> 63;
        }
        return runs;
    }
    #define A3_HW_POPCOUNT(words, n) (a3_has_popcnt ? a3_popcount_words_hw((words), (n)) : -1)
    #define A3_HW_RUNS(words, n) (a3_has_popcnt ? a3_runs_words_hw((words), (n)) : -1)
    #else
    #define A3_HW_POPCOUNT(words, n) (-1)
    #define A3_HW_RUNS(words, n) (-1)
    #endif
    static inline Py_ssize_t a3_popcount_words(const uint64_t* words, Py_ssize_t n) {
        Py_ssize_t i, total = A3_HW_POPCOUNT(words, n);
        if (total >= 0) return total;
        for (total = 0, i = 0; i < n; i++) total += a3_popcount64(words[i]);
        return total;
    }
    static inline Py_ssize_t a3_runs_words(const uint64_t* words, Py_ssize_t n) {
        Py_ssize_t i, runs = A3_HW_RUNS(words, n);
        uint64_t w, carry = 0;
        if (runs >= 0) return runs;
        for (runs = 0, i = 0; i < n; i++) {
            w = words[i];
            runs += a3_popcount64(w & ~((w << 1) | carry));
            carry = w >> 63;
        }
        return runs;
    }
    /* A 16-bit value little-endian at p: one store on a little-endian host. */
    #if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    #define a3_put_le16(p, v) do { unsigned short a3_v16 = (unsigned short)(v); memcpy((p), &a3_v16, 2); } while (0)
    #else
    #define a3_put_le16(p, v) do { (p)[0] = (char)((v) & 0xFF); (p)[1] = (char)(((v) >> 8) & 0xFF); } while (0)
    #endif
    /* The ids of one word's set bits, `base` + bit, as 16-bit little-endian values at `out`
       (a Roaring array container's body); returns the end. With SSE2 (every x86-64) a byte of the
       word a step: its bits' positions from a table, the base added, sixteen bytes stored and the
       pointer moved by the byte's count, no branch per id; it writes up to 16 bytes past its ids,
       so it runs only while `end` leaves room, the scalar loop after it. */
    #if defined(__SSE2__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    #include <emmintrin.h>
    static uint16_t a3_byte_positions[256][8];
    static unsigned char a3_byte_count[256];
    static void a3_ids_init(void) {
        int byte, bit, k;
        for (byte = 0; byte < 256; byte++) {
            for (k = 0, bit = 0; bit < 8; bit++)
                if ((byte >> bit) & 1) a3_byte_positions[byte][k++] = (uint16_t)bit;
            a3_byte_count[byte] = (unsigned char)k;
        }
    }
    static inline char* a3_ids16_fast(char* out, uint64_t w, unsigned base) {
        __m128i at = _mm_set1_epi16((short)base);
        const __m128i eight = _mm_set1_epi16(8);
        int b;
        for (b = 0; b < 8; b++, w >>= 8) {
            unsigned byte = (unsigned)(w & 0xFF);
            _mm_storeu_si128((__m128i*)out, _mm_add_epi16(_mm_loadu_si128((const __m128i*)a3_byte_positions[byte]), at));
            out += 2 * a3_byte_count[byte];
            at = _mm_add_epi16(at, eight);
        }
        return out;
    }
    #define A3_IDS16_FAST 1
    #else
    static void a3_ids_init(void) {}
    #define A3_IDS16_FAST 0
    static inline char* a3_ids16_fast(char* out, uint64_t w, unsigned base) { return out; }
    #endif
    static inline char* a3_ids16(char* out, const char* end, uint64_t w, unsigned base) {
        if (A3_IDS16_FAST && !a3_portable && end - out >= 2 * 64 + 16) return a3_ids16_fast(out, w, base);
        while (w) {
            a3_put_le16(out, base + (unsigned)a3_ctz64(w));
            out += 2;
            w &= w - 1;
        }
        return out;
    }
    /* A big-endian 64-bit value as the host's number. */
    #if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    #define a3_from_be64(x) (x)
    #elif defined(_MSC_VER)
    #define a3_from_be64(x) _byteswap_uint64(x)
    #else
    #define a3_from_be64(x) __builtin_bswap64(x)
    #endif

    /* Base64 twelve bytes a step with SSSE3 (Muła's method, as aklomp/base64 writes it, BSD-2):
       a byte shuffle and two multiplies split 12 bytes into 16 six-bit values, and one table
       shuffle adds each value's offset into the alphabet. Chosen at run time, so a build for
       any x86-64 runs everywhere; other compilers and machines write with the scalar loop.
       `a3_b64_blocks` returns how many bytes of `src` the AVX2 and SSSE3 blocks encoded (a
       multiple of 12; 0 without them), reading at most `n`. */
    #if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
    #include <immintrin.h>
    static int a3_has_ssse3 = 0;
    static int a3_has_avx2 = 0;
    /* At import, under the GIL: read once, before any thread. A3FAST_CPU=portable takes the
       portable loops, as a processor without any of them would (what tests compare the others to). */
    static void a3_cpu_init(void) {
        const char* wanted = getenv("A3FAST_CPU");
        int portable = wanted != NULL && strcmp(wanted, "portable") == 0;
        a3_portable = portable;
        __builtin_cpu_init();
        a3_has_ssse3 = !portable && __builtin_cpu_supports("ssse3") ? 1 : 0;
        a3_has_popcnt = !portable && __builtin_cpu_supports("popcnt") ? 1 : 0;
        a3_has_avx2 = a3_has_ssse3 && __builtin_cpu_supports("avx2") ? 1 : 0;
    }
    __attribute__((target("ssse3")))
    static Py_ssize_t a3_b64_blocks_ssse3(char* dst, const unsigned char* src, Py_ssize_t n) {
        const __m128i spread = _mm_set_epi8(10, 11, 9, 10, 7, 8, 6, 7, 4, 5, 3, 4, 1, 2, 0, 1);
        const __m128i lut = _mm_setr_epi8(65, 71, -4, -4, -4, -4, -4, -4, -4, -4, -4, -4, -19, -16, 0, 0);
        Py_ssize_t i = 0;
        for (; i + 16 <= n; i += 12, dst += 16) {
            __m128i in = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i*)(src + i)), spread);
            __m128i hi = _mm_mulhi_epu16(_mm_and_si128(in, _mm_set1_epi32(0x0FC0FC00)), _mm_set1_epi32(0x04000040));
            __m128i lo = _mm_mullo_epi16(_mm_and_si128(in, _mm_set1_epi32(0x003F03F0)), _mm_set1_epi32(0x01000010));
            __m128i six = _mm_or_si128(hi, lo);
            __m128i at = _mm_sub_epi8(_mm_subs_epu8(six, _mm_set1_epi8(51)), _mm_cmpgt_epi8(six, _mm_set1_epi8(25)));
            _mm_storeu_si128((__m128i*)dst, _mm_add_epi8(six, _mm_shuffle_epi8(lut, at)));
        }
        return i;
    }
    /* The same with AVX2, 24 bytes a step: each 128-bit lane takes twelve (loaded at i and i + 12)
       and is split and translated as above. */
    __attribute__((target("avx2")))
    static Py_ssize_t a3_b64_blocks_avx2(char* dst, const unsigned char* src, Py_ssize_t n) {
        const __m256i spread = _mm256_setr_epi8(1, 0, 2, 1, 4, 3, 5, 4, 7, 6, 8, 7, 10, 9, 11, 10,
                                                1, 0, 2, 1, 4, 3, 5, 4, 7, 6, 8, 7, 10, 9, 11, 10);
        const __m256i lut = _mm256_setr_epi8(65, 71, -4, -4, -4, -4, -4, -4, -4, -4, -4, -4, -19, -16, 0, 0,
                                             65, 71, -4, -4, -4, -4, -4, -4, -4, -4, -4, -4, -19, -16, 0, 0);
        Py_ssize_t i = 0;
        for (; i + 28 <= n; i += 24, dst += 32) {
            __m256i in = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i*)(src + i))),
                                                 _mm_loadu_si128((const __m128i*)(src + i + 12)), 1);
            in = _mm256_shuffle_epi8(in, spread);
            __m256i hi = _mm256_mulhi_epu16(_mm256_and_si256(in, _mm256_set1_epi32(0x0FC0FC00)), _mm256_set1_epi32(0x04000040));
            __m256i lo = _mm256_mullo_epi16(_mm256_and_si256(in, _mm256_set1_epi32(0x003F03F0)), _mm256_set1_epi32(0x01000010));
            __m256i six = _mm256_or_si256(hi, lo);
            __m256i at = _mm256_sub_epi8(_mm256_subs_epu8(six, _mm256_set1_epi8(51)), _mm256_cmpgt_epi8(six, _mm256_set1_epi8(25)));
            _mm256_storeu_si256((__m256i*)dst, _mm256_add_epi8(six, _mm256_shuffle_epi8(lut, at)));
        }
        return i;
    }
    static Py_ssize_t a3_b64_blocks(char* dst, const unsigned char* src, Py_ssize_t n) {
        Py_ssize_t done = 0;
        if (a3_has_avx2) done = a3_b64_blocks_avx2(dst, src, n);
        if (a3_has_ssse3) done += a3_b64_blocks_ssse3(dst + done / 3 * 4, src + done, n - done);
        return done;
    }
    static int a3_cpu_extensions(void) { return a3_has_ssse3 && a3_has_popcnt; }
    #else
    static void a3_cpu_init(void) {
        const char* wanted = getenv("A3FAST_CPU");
        a3_portable = wanted != NULL && strcmp(wanted, "portable") == 0;
    }
    static int a3_cpu_extensions(void) { return 0; }
    static Py_ssize_t a3_b64_blocks(char* dst, const unsigned char* src, Py_ssize_t n) { return 0; }
    #endif
    """
    int a3_ctz64(uint64_t x) nogil
    int a3_popcount64(uint64_t x) nogil
    uint64_t a3_from_be64(uint64_t x) nogil
    Py_ssize_t a3_b64_blocks(char* dst, const unsigned char* src, Py_ssize_t n) nogil
    void a3_cpu_init()
    int a3_cpu_extensions()
    void a3_ids_init()
    char* a3_ids16(char* out, const char* end, uint64_t w, unsigned base) nogil
    Py_ssize_t a3_popcount_words(const uint64_t* words, Py_ssize_t n) nogil
    Py_ssize_t a3_runs_words(const uint64_t* words, Py_ssize_t n) nogil
    void a3_put_le16(char* p, uint32_t v) nogil


cdef class Index
cdef class Wave


# -- rows -------------------------------------------------------------------------------------------

ctypedef struct Row:
    uint64_t* words      # dense form: Index.cap_words words, or NULL
    uint32_t* ids        # sparse form: sorted member ids, or NULL while empty or dense
    Py_ssize_t count     # members
    Py_ssize_t ids_cap   # allocated length of ids


cdef inline bint row_has(const Row* row, Py_ssize_t aid) noexcept nogil:
    if row.words != NULL:
        return (row.words[aid >> 6] >> (aid & 63)) & 1
    return find_id(row.ids, row.count, <uint32_t>aid) >= 0


cdef inline Py_ssize_t lower_bound(const uint32_t* ids, Py_ssize_t n, uint32_t aid) noexcept nogil:
    cdef Py_ssize_t lo = 0, hi = n, mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if ids[mid] < aid:
            lo = mid + 1
        else:
            hi = mid
    return lo


cdef inline Py_ssize_t find_id(const uint32_t* ids, Py_ssize_t n, uint32_t aid) noexcept nogil:
    cdef Py_ssize_t pos = lower_bound(ids, n, aid)
    return pos if pos < n and ids[pos] == aid else -1


cdef inline Py_ssize_t popcount_words(const uint64_t* words, Py_ssize_t n) noexcept nogil:
    return a3_popcount_words(words, n)


cdef list words_to_list(const uint64_t* words, Py_ssize_t n):
    """Ascending ids of the set bits."""
    cdef list out = []
    cdef Py_ssize_t i
    cdef uint64_t w
    for i in range(n):
        w = words[i]
        while w:
            out.append((i << 6) + a3_ctz64(w))
            w &= w - 1
    return out


# -- little-endian arrays (snapshots) -----------------------------------------------------------------

cdef inline void store_u32(unsigned char* p, uint32_t v) noexcept nogil:
    p[0] = v & 0xFF; p[1] = (v >> 8) & 0xFF; p[2] = (v >> 16) & 0xFF; p[3] = (v >> 24) & 0xFF


cdef inline void store_u64(unsigned char* p, uint64_t v) noexcept nogil:
    store_u32(p, <uint32_t>(v & 0xFFFFFFFFULL))
    store_u32(p + 4, <uint32_t>(v >> 32))


cdef inline uint32_t load_u32(const unsigned char* p) noexcept nogil:
    return (<uint32_t>p[0]) | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16) | (<uint32_t>p[3] << 24)


cdef inline uint64_t load_u64(const unsigned char* p) noexcept nogil:
    return (<uint64_t>load_u32(p)) | ((<uint64_t>load_u32(p + 4)) << 32)


cdef inline uint64_t load_be64(const unsigned char* p) noexcept nogil:
    """Eight bytes as a big-endian number (one load and a byte swap, whatever the host's order)."""
    cdef uint64_t w
    memcpy(&w, p, 8)
    return a3_from_be64(w)


cdef int check_ids(const unsigned char* p, Py_ssize_t n, Py_ssize_t limit, str what) except -1:
    """`n` u32 ids strictly ascending and below `limit`, or ValueError naming `what`."""
    cdef Py_ssize_t j
    cdef uint32_t aid, previous = 0
    for j in range(n):
        aid = load_u32(p + 4 * j)
        if aid >= limit or (j and aid <= previous):
            raise ValueError(f"{what}: agent id {aid} at position {j} is out of order or unknown")
        previous = aid
    return 0



cdef int check_cost(double cost, Py_ssize_t aid) except -1:
    """A cost is finite and not negative (nor -0.0), or ValueError naming the agent."""
    cdef uint64_t bits
    memcpy(&bits, &cost, 8)
    if not (isfinite(cost) and cost >= 0.0) or (bits >> 63):
        raise ValueError(f"agent {aid}: cost {cost!r} is not a finite number of 0 or more")
    return 0


cdef int check_outcomes(Py_ssize_t aid, int64_t had, int64_t successes, int64_t attempts) except -1:
    """`attempts` more outcomes, `successes` of them successful, on top of `had` attempts: within
    MAX_OUTCOMES, or ValueError (the same text as the pure engine's)."""
    if successes < 0 or attempts < successes:
        raise ValueError(f"agent {aid}: {successes} successes of {attempts} attempts is not a count")
    if attempts > OUTCOME_LIMIT - had:
        raise ValueError(f"agent {aid}: {had} + {attempts} outcomes would pass the {OUTCOME_LIMIT} "
                         f"counted for one agent and task kind")
    return 0


# -- success history: one open-addressing table per task kind ----------------------------------------

ctypedef struct Outcomes:
    int64_t* keys        # agent id + 1; 0 marks an empty slot
    int64_t* successes
    int64_t* attempts
    Py_ssize_t cap       # a power of two, or 0 before the first outcome
    Py_ssize_t size


cdef inline Py_ssize_t outcome_slot(const Outcomes* o, int64_t aid) noexcept nogil:
    """Slot of `aid`, or of the empty slot where it would go; -1 for a table never written."""
    if o.cap == 0:
        return -1
    cdef uint64_t mask = <uint64_t>o.cap - 1
    cdef uint64_t h = (<uint64_t>aid * 0x9E3779B97F4A7C15ULL) >> 17
    cdef int64_t key = aid + 1
    while True:
        h &= mask
        if o.keys[h] == key or o.keys[h] == 0:
            return <Py_ssize_t>h
        h += 1


cdef int outcomes_grow(Outcomes* o) except -1:
    cdef Py_ssize_t old_cap = o.cap, i, slot
    cdef int64_t* old_keys = o.keys
    cdef int64_t* old_successes = o.successes
    cdef int64_t* old_attempts = o.attempts
    cdef Py_ssize_t cap = 16 if old_cap == 0 else old_cap * 2
    o.keys = <int64_t*>calloc(cap, sizeof(int64_t))
    o.successes = <int64_t*>calloc(cap, sizeof(int64_t))
    o.attempts = <int64_t*>calloc(cap, sizeof(int64_t))
    if o.keys == NULL or o.successes == NULL or o.attempts == NULL:
        free(o.keys); free(o.successes); free(o.attempts)
        o.keys, o.successes, o.attempts = old_keys, old_successes, old_attempts
        raise MemoryError()
    o.cap = cap
    for i in range(old_cap):
        if old_keys[i] != 0:
            slot = outcome_slot(o, old_keys[i] - 1)
            o.keys[slot] = old_keys[i]
            o.successes[slot] = old_successes[i]
            o.attempts[slot] = old_attempts[i]
    free(old_keys); free(old_successes); free(old_attempts)
    return 0


# -- JSON text ---------------------------------------------------------------------------------------

ctypedef struct Buffer:
    char* data
    Py_ssize_t size
    Py_ssize_t cap


ctypedef struct BatchTask:
    # one task of Index.place_batch: the explain and score arguments, checked and copied, and
    # where the results go (fields of the task's Explanation and Scores, which the batch holds)
    uint64_t* words          # the Explanation's sets (failed..., then eligible)
    Py_ssize_t nw            # words per set: the Explanation's own (one given may predate agents)
    Py_ssize_t n_failed
    Py_ssize_t* n_eligible
    bint no_candidates
    bint explain             # False: the explanation was given, only scored
    Py_ssize_t* args         # rows, then excluded agent ids (NULL when the explanation is given)
    Py_ssize_t args_at       # where they start in the wave's array, until it is sealed
    Py_ssize_t n_rows
    Py_ssize_t n_excluded
    Py_ssize_t only
    Row** evals
    Py_ssize_t evals_at      # the same for the eval rows
    Py_ssize_t n_eval
    Row* session
    Outcomes* outcomes
    Py_ssize_t** score_ids
    double** score_columns
    Py_ssize_t* score_n
    Py_ssize_t* score_best


cdef int reserve(Buffer* b, Py_ssize_t extra) except -1:
    if b.size + extra <= b.cap:
        return 0
    cdef Py_ssize_t cap = max(b.cap * 2, b.size + extra, 4096)
    cdef char* grown = <char*>realloc(b.data, cap)
    if grown == NULL:
        raise MemoryError()
    b.data, b.cap = grown, cap
    return 0


cdef inline void put(Buffer* b, const char* text, Py_ssize_t n) noexcept nogil:
    """Append `n` bytes; the caller reserved room for them."""
    memcpy(b.data + b.size, text, n)
    b.size += n


cdef int close_object(Buffer* b, tail_json, bytes foot) except -1:
    """Close a JSON object being written: `,` + `tail_json` (members without braces) when there are
    any, `}`, then `foot`."""
    cdef Py_ssize_t n = len(tail_json)
    reserve(b, n + len(foot) + 2)
    if n:
        put(b, b",", 1)
        put(b, tail_json, n)
    put(b, b"}", 1)
    put(b, foot, len(foot))
    return 0


cdef const char* HEX_DIGITS = b"0123456789abcdef"


#: the one-letter escape orjson writes for a control character (\b \t \n \f \r), 0 where it
#: writes \u00XX
cdef const char* SHORT_ESCAPES = b"\0\0\0\0\0\0\0\0btn\0fr\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0"


cdef bytes quote(str text):
    """`text` as a JSON string, byte for byte as orjson writes it: UTF-8, `"` and `\\` escaped,
    \\b \\t \\n \\f \\r as those letters, any other control character as \\u00XX."""
    cdef Py_ssize_t n, i, extra = 0
    cdef const char* raw = PyUnicode_AsUTF8AndSize(text, &n)
    cdef unsigned char c
    for i in range(n):
        c = <unsigned char>raw[i]
        if c == 34 or c == 92:
            extra += 1
        elif c < 32:
            extra += 1 if SHORT_ESCAPES[c] else 5
    cdef bytes out = PyBytes_FromStringAndSize(NULL, n + extra + 2)
    cdef char* dst = PyBytes_AS_STRING(out)
    cdef Py_ssize_t j = 1
    dst[0] = 34
    for i in range(n):
        c = <unsigned char>raw[i]
        if c == 34 or c == 92:
            dst[j] = 92
            dst[j + 1] = c
            j += 2
        elif c < 32 and SHORT_ESCAPES[c]:
            dst[j] = 92
            dst[j + 1] = SHORT_ESCAPES[c]
            j += 2
        elif c < 32:
            memcpy(dst + j, b"\\u00", 4)
            dst[j + 4] = HEX_DIGITS[c >> 4]
            dst[j + 5] = HEX_DIGITS[c & 15]
            j += 6
        else:
            dst[j] = c
            j += 1
    dst[j] = 34
    return out


# Shortest round-trip text of recently written floats. Score components repeat a lot (affinity is
# 0 or 1, success rates and costs come from small sets, totals from their combinations), and
# formatting a float (~100 ns) is the writer's main cost when many agents are eligible.
cdef enum:
    FLOAT_CACHE_BITS = 12
    FLOAT_CACHE = 1 << FLOAT_CACHE_BITS
    FLOAT_TEXT = 25     # the longest text of a double, "-2.2250738585072014e-308" or "-0.000012345678901234567", is 24
cdef uint64_t float_keys[FLOAT_CACHE]
cdef char float_text[FLOAT_CACHE][FLOAT_TEXT]
cdef unsigned char float_len[FLOAT_CACHE]


cdef Py_ssize_t as_orjson_writes(const char* text, Py_ssize_t n, char* out) noexcept:
    """Python's repr of a finite double (`text`, `n` bytes) into `out` as orjson writes the same
    shortest digits, and its length: positionally from 1e-5 on where repr is from 1e-4 on ("1.5e-05"
    is "0.000015"), and an exponent without repr's leading zero ("1e-07" is "1e-7"; "1e+16" stays)."""
    cdef Py_ssize_t e = 0, i, at = 0
    while e < n and text[e] != 101:          # 'e'
        e += 1
    if e == n:
        memcpy(out, text, n)
        return n
    if n == e + 4 and text[e + 1] == 45 and text[e + 2] == 48 and text[e + 3] == 53:    # "e-05"
        i = 0
        if text[0] == 45:
            out[0] = 45
            at = i = 1
        memcpy(out + at, b"0.0000", 6)
        at += 6
        while i < e:                          # the digits, without their point
            if text[i] != 46:
                out[at] = text[i]
                at += 1
            i += 1
        return at
    memcpy(out, text, e + 2)                  # the mantissa, 'e' and its sign
    at = e + 2
    i = e + 2
    while i < n - 1 and text[i] == 48:
        i += 1
    memcpy(out + at, text + i, n - i)
    return at + n - i


cdef int put_float(Buffer* b, double value) except -1:
    """Append `value` in its shortest round-trip form, written as orjson writes it
    (`as_orjson_writes`); non-finite as null, as orjson."""
    cdef uint64_t bits
    memcpy(&bits, &value, 8)
    cdef Py_ssize_t slot = <Py_ssize_t>((bits * 0x9E3779B97F4A7C15ULL) >> (64 - FLOAT_CACHE_BITS))
    cdef char* text
    cdef Py_ssize_t n
    if float_len[slot] == 0 or float_keys[slot] != bits:
        if not isfinite(value):
            put(b, b"null", 4)
            return 0
        text = PyOS_double_to_string(value, b"r", 0, Py_DTSF_ADD_DOT_0, NULL)
        n = strlen(text)
        if n >= FLOAT_TEXT:
            PyMem_Free(text)
            raise ValueError(f"unexpected float text for {value!r}")
        n = as_orjson_writes(text, n, float_text[slot])
        PyMem_Free(text)
        float_keys[slot] = bits
        float_len[slot] = <unsigned char>n
    put(b, float_text[slot], float_len[slot])
    return 0


cdef inline int bytes_check(object value, str what) except -1:
    if type(value) is not bytes:
        raise TypeError(f"{what} must be bytes, not {type(value).__name__}")
    return 0


# -- a placement's compact lines, sized then written (without the GIL) ---------------------------------
# Every piece's length is known before a byte is written (a set's Roaring size from its popcounts),
# so a placement's lines, or a batch's, are measured in one pass and written in a second into one
# buffer, the second pass holding no Python object and so able to run without the GIL.

cdef char B64_PAIRS[8192]   # each 12-bit value's two base64 digits


cdef void init_b64_pairs() noexcept:
    cdef int v
    for v in range(4096):
        B64_PAIRS[2 * v] = B64_DIGITS[v >> 6]
        B64_PAIRS[2 * v + 1] = B64_DIGITS[v & 63]


cdef inline Py_ssize_t b64_size(Py_ssize_t n) noexcept nogil:
    return (n + 2) // 3 * 4


cdef Py_ssize_t b64_into(char* dst, const unsigned char* src, Py_ssize_t n) noexcept nogil:
    """`src` in standard base64 with padding (RFC 4648 §4) at `dst`; returns the length."""
    cdef Py_ssize_t i = a3_b64_blocks(dst, src, n), j = i // 3 * 4
    cdef uint32_t v
    cdef uint64_t w
    # What the AVX2 and SSSE3 blocks leave (all of it without them): six bytes a step while eight
    # can be read, one load where there were six, the four 12-bit digit pairs taken from the top
    # 48 bits; then three, then the padded tail
    while i + 8 <= n:
        w = load_be64(src + i)
        memcpy(dst + j, B64_PAIRS + 2 * ((w >> 52) & 4095), 2)
        memcpy(dst + j + 2, B64_PAIRS + 2 * ((w >> 40) & 4095), 2)
        memcpy(dst + j + 4, B64_PAIRS + 2 * ((w >> 28) & 4095), 2)
        memcpy(dst + j + 6, B64_PAIRS + 2 * ((w >> 16) & 4095), 2)
        i += 6
        j += 8
    while i + 3 <= n:
        v = (<uint32_t>src[i] << 16) | (<uint32_t>src[i + 1] << 8) | src[i + 2]
        memcpy(dst + j, B64_PAIRS + 2 * (v >> 12), 2)
        memcpy(dst + j + 2, B64_PAIRS + 2 * (v & 4095), 2)
        i += 3
        j += 4
    if n - i:
        v = <uint32_t>src[i] << 16
        if n - i == 2:
            v |= <uint32_t>src[i + 1] << 8
        dst[j] = B64_DIGITS[v >> 18]
        dst[j + 1] = B64_DIGITS[(v >> 12) & 63]
        dst[j + 2] = B64_DIGITS[(v >> 6) & 63] if n - i == 2 else 61    # '='
        dst[j + 3] = 61
        j += 4
    return j


# A chunk of 65,536 ids (1,024 words) is one container, written in the smallest of three forms as
# CRoaring's run_optimize chooses it (and so pyroaring's `BitMap.serialize`, `roaring.serialize_ids`):
# an array of 16-bit ids (up to 4,096), a bitmap of 8 KiB (above), or runs of consecutive ids (their
# count, then each run's start and length less one) when that is strictly smaller: 2 + 4·runs bytes
# against an array's 2·ids or a bitmap's 8,192 (a tie keeps the array or the bitmap). A placement's
# largest failed set, nearly every agent with a few gaps, is then a few runs where it was an array
# of nearly every id.

cdef inline Py_ssize_t runs_of(const uint64_t* words, Py_ssize_t n) noexcept nogil:
    """The runs of consecutive ids in `n` words (with the processor's popcnt where it has one)."""
    return a3_runs_words(words, n)


cdef inline bint as_runs(Py_ssize_t card, Py_ssize_t runs) noexcept nogil:
    """Whether a container of `card` ids in `runs` runs is written as runs."""
    return 2 + 4 * runs < (2 * card if card <= 4096 else 8192)


cdef inline Py_ssize_t body_size(Py_ssize_t card, Py_ssize_t runs) noexcept nogil:
    """The bytes of a container's body: its runs, its 16-bit ids or its bitmap."""
    if as_runs(card, runs):
        return 2 + 4 * runs
    return 2 * card if card <= 4096 else 8192


cdef inline Py_ssize_t header_size(Py_ssize_t n_cont, bint with_runs) noexcept nogil:
    """The bytes before the containers' bodies. With a run container among them: the cookie 12347
    and the count less one (four bytes), a bit per container telling which are runs, each one's key
    and count less one, and each one's offset only from four containers on. Without: the cookie
    12346, the count, the keys and counts, and the offsets."""
    if with_runs:
        return 4 + (n_cont + 7) // 8 + 4 * n_cont + (4 * n_cont if n_cont >= 4 else 0)
    return 8 + 8 * n_cont


cdef Py_ssize_t roaring_size(const uint64_t* words, Py_ssize_t n_words) noexcept nogil:
    """The length of `words_to_roaring`'s bytes for a set (0 when it is empty)."""
    cdef Py_ssize_t c, w, card, runs, body = 0, n_cont = 0
    cdef bint with_runs = False
    for c in range(0, n_words, 1024):
        w = min(n_words - c, 1024)
        card = popcount_words(words + c, w)
        if card:
            n_cont += 1
            runs = runs_of(words + c, w)
            with_runs = with_runs or as_runs(card, runs)
            body += body_size(card, runs)
    return header_size(n_cont, with_runs) + body if n_cont else 0


cdef void put_runs(char* dst, const uint64_t* words, Py_ssize_t n) noexcept nogil:
    """A container's runs (`n` words, at most 1,024) at `dst`: each its start and its length less
    one, 16 bits apiece. Read a word at a time from its edges: a bit that differs from the bit
    below it starts a run (set) or stops one (clear), and they alternate, a start first."""
    cdef Py_ssize_t i, bit, start = 0, at = 0
    cdef uint64_t w, edges, carry = 0
    cdef bint in_run = False
    for i in range(n):
        w = words[i]
        edges = w ^ ((w << 1) | carry)
        carry = w >> 63
        while edges:
            bit = (i << 6) + a3_ctz64(edges)
            if in_run:
                put_u16(dst, at, <uint32_t>start)
                put_u16(dst, at + 2, <uint32_t>(bit - start - 1))
                at += 4
            else:
                start = bit
            in_run = not in_run
            edges &= edges - 1
    if in_run:          # a run to the container's last id
        put_u16(dst, at, <uint32_t>start)
        put_u16(dst, at + 2, <uint32_t>((n << 6) - start - 1))


cdef void roaring_into(char* dst, const uint64_t* words, Py_ssize_t n_words, Py_ssize_t one_card,
                       Py_ssize_t one_runs) noexcept nogil:
    """`words_to_roaring`'s bytes at `dst` (as many as `roaring_size` says): the same layout,
    written without a Python object. `one_card` and `one_runs`: the set's count of ids and of runs
    when it is one container (at most 1,024 words), as the caller counted them; -1 to count each
    container's here."""
    cdef Py_ssize_t c, i, j, end, card, runs, n_cont = 0, k = 0, at, body, offsets, flags = 4
    cdef uint64_t w
    cdef char* out
    cdef bint counted = one_card >= 0 and one_runs >= 0 and n_words <= 1024, with_runs = False
    for c in range(0, n_words, 1024):
        end = min(n_words, c + 1024)
        card = one_card if counted else popcount_words(words + c, end - c)
        if card:
            n_cont += 1
            with_runs = with_runs or as_runs(card, one_runs if counted else runs_of(words + c, end - c))
    if with_runs:
        put_u16(dst, 0, 12347)
        put_u16(dst, 2, <uint32_t>(n_cont - 1))
        memset(dst + flags, 0, (n_cont + 7) // 8)
        at = flags + (n_cont + 7) // 8
    else:
        put_u32(dst, 0, 12346)
        put_u32(dst, 4, <uint32_t>n_cont)
        at = 8
    offsets = at + 4 * n_cont
    body = header_size(n_cont, with_runs)
    for c in range(0, n_words, 1024):
        end = min(n_words, c + 1024)
        card = one_card if counted else popcount_words(words + c, end - c)
        if not card:
            continue
        put_u16(dst, at, <uint32_t>(c // 1024))
        put_u16(dst, at + 2, <uint32_t>(card - 1))
        at += 4
        if not with_runs or n_cont >= 4:
            put_u32(dst, offsets, <uint32_t>body)
            offsets += 4
        runs = one_runs if counted else runs_of(words + c, end - c)
        if as_runs(card, runs):
            dst[flags + (k >> 3)] |= <char>(1 << (k & 7))
            put_u16(dst, body, <uint32_t>runs)
            put_runs(dst + body + 2, words + c, end - c)
            body += 2 + 4 * runs
        elif card <= 4096:
            out = dst + body
            body += 2 * card
            for i in range(c, end):
                if words[i]:
                    out = a3_ids16(out, dst + body, words[i], <unsigned>((i - c) << 6))
        else:
            for i in range(c, c + 1024):
                w = words[i] if i < end else 0
                for j in range(8):
                    dst[body + j] = <char>((w >> (8 * j)) & 0xFF)
                body += 8
        k += 1


ctypedef struct LinesJob:
    # one placement's lines: the explanation's and the scores' C data, and the JSON pieces the
    # caller holds (pointers into bytes objects the caller keeps alive while the job is written)
    Py_ssize_t seq
    const uint64_t* words       # the explanation's failed sets, then its eligible set
    Py_ssize_t n_words
    Py_ssize_t n_failed
    const double* columns       # the default scorer's five columns of m values, or NULL
    Py_ssize_t m
    bint bound
    bint derived
    const char* piece[9]
    Py_ssize_t piece_n[9]

cdef enum:
    P_SUBMITTED = 0
    P_ADMITTED = 1
    P_FLEET = 2
    P_PREDICATES = 3
    P_REQUIREMENTS = 4
    P_DECLARATION = 5
    P_REASON = 6
    P_TAIL = 7
    P_SCORES = 8


cdef inline Py_ssize_t emit(char* dst, Py_ssize_t at, const char* text, Py_ssize_t n) noexcept nogil:
    """Write `n` bytes at `dst + at` (only count them when `dst` is NULL); the new position."""
    if dst != NULL:
        memcpy(dst + at, text, n)
    return at + n


cdef inline Py_ssize_t put_decimal(char* dst, uint64_t value) noexcept nogil:
    """`value` in decimal digits at `dst`, as many as it needs; their count."""
    cdef char digits[20]
    cdef Py_ssize_t n = 0, i
    while True:
        digits[n] = <char>(48 + value % 10)
        n += 1
        value //= 10
        if value == 0:
            break
    for i in range(n):
        dst[i] = digits[n - 1 - i]
    return n


cdef Py_ssize_t emit_seq(char* dst, Py_ssize_t at, Py_ssize_t seq, const char* kind, Py_ssize_t kind_n) noexcept nogil:
    """A trace line's start, `{"seq":N,"kind":"KIND","content":`, as `trace.record_line` writes it."""
    cdef char digits[20]
    cdef uint64_t v
    at = emit(dst, at, b'{"seq":', 7)
    if seq < 0:
        at = emit(dst, at, b"-", 1)
        v = <uint64_t>(-(seq + 1)) + 1
    else:
        v = <uint64_t>seq
    at = emit(dst, at, digits, put_decimal(digits, v))
    at = emit(dst, at, b',"kind":"', 9)
    at = emit(dst, at, kind, kind_n)
    return emit(dst, at, b'","content":', 12)


cdef Py_ssize_t emit_set(char* dst, Py_ssize_t at, const uint64_t* words, Py_ssize_t n_words, char* scratch,
                         Py_ssize_t* scratch_needed) noexcept nogil:
    """A set as the compact format's JSON string: base64 of its portable Roaring bytes, "" when empty."""
    # a set of one container (up to 65,536 agents) is counted once, for its size and its bytes
    cdef Py_ssize_t card = popcount_words(words, n_words) if n_words <= 1024 else -1
    cdef Py_ssize_t runs = runs_of(words, n_words) if card > 0 else 0
    cdef Py_ssize_t size = ((header_size(1, as_runs(card, runs)) + body_size(card, runs) if card else 0)
                            if card >= 0 else roaring_size(words, n_words))
    at = emit(dst, at, b'"', 1)
    if size:
        if dst != NULL:
            roaring_into(scratch, words, n_words, card, runs)
            b64_into(dst + at, <const unsigned char*>scratch, size)
        elif size > scratch_needed[0]:
            scratch_needed[0] = size
        at += b64_size(size)
    return emit(dst, at, b'"', 1)


cdef Py_ssize_t emit_lists(char* dst, Py_ssize_t at, const uint64_t* words, Py_ssize_t n_words, Py_ssize_t n_failed,
                           const double* columns, Py_ssize_t m, char* scratch, Py_ssize_t* scratch_needed) noexcept nogil:
    """The compact member's `failed` list and, with the default scorer's columns, its `scores`
    object, as JSON members without braces (docs/compact-format.md)."""
    cdef Py_ssize_t k, c, j
    cdef uint64_t bits
    at = emit(dst, at, b'"failed":[', 10)
    for k in range(n_failed):
        if k:
            at = emit(dst, at, b",", 1)
        at = emit_set(dst, at, words + k * n_words, n_words, scratch, scratch_needed)
    at = emit(dst, at, b"]", 1)
    if columns == NULL:
        return at
    at = emit(dst, at, b',"scores":{"ids":', 17)
    if m:
        at = emit_set(dst, at, words + n_failed * n_words, n_words, scratch, scratch_needed)
    else:
        at = emit(dst, at, b'""', 2)
    at = emit(dst, at, b',"columns":[', 12)
    if dst == NULL and 8 * m > scratch_needed[0]:
        scratch_needed[0] = 8 * m
    for c in range(5):
        at = emit(dst, at, b'["total","f64","' if c == 0 else
                  b',["affinity","f64","' if c == 1 else
                  b',["success_rate","f64","' if c == 2 else
                  b',["cost","f64","' if c == 3 else b',["substantiated","f64","',
                  16 if c == 0 else 20 if c == 1 else 24 if c == 2 else 16 if c == 3 else 25)
        if dst != NULL:
            for j in range(m):
                memcpy(&bits, columns + c * m + j, 8)
                store_u64(<unsigned char*>scratch + 8 * j, bits)
            b64_into(dst + at, <const unsigned char*>scratch, 8 * m)
        at += b64_size(8 * m)
        at = emit(dst, at, b'"]', 2)
    return emit(dst, at, b"]}", 2)


cdef Py_ssize_t emit_lines(const LinesJob* j, char* dst, Py_ssize_t at, char* scratch,
                           Py_ssize_t* scratch_needed) noexcept nogil:
    """One placement's trace lines (see `Index.write_placement_lines`) at `dst + at`, or only
    their length when `dst` is NULL; the new position."""
    at = emit_seq(dst, at, j.seq, b"task.submitted", 14)
    if j.piece[P_SUBMITTED] != NULL:
        at = emit(dst, at, j.piece[P_SUBMITTED], j.piece_n[P_SUBMITTED])
    else:   # task.submitted is the requirements alone (write_placement_lines_of)
        at = emit(dst, at, b'{"requirements":', 16)
        at = emit(dst, at, j.piece[P_REQUIREMENTS], j.piece_n[P_REQUIREMENTS])
        at = emit(dst, at, b"}", 1)
    at = emit(dst, at, b"}\n", 2)
    if j.bound:
        at = emit_seq(dst, at, j.seq + 1, b"task.admitted", 13)
        at = emit(dst, at, j.piece[P_ADMITTED], j.piece_n[P_ADMITTED])
        at = emit(dst, at, b"}\n", 2)
        at = emit_seq(dst, at, j.seq + 2, b"task.bound", 10)
        at = emit(dst, at, b'{"a3fast.compact":', 18)
    else:
        at = emit_seq(dst, at, j.seq + 1, b"task.rejected", 13)
        at = emit(dst, at, b'{"code":"unschedulable",', 24)
        if j.piece[P_REASON] != NULL:
            at = emit(dst, at, b'"reason":', 9)
            at = emit(dst, at, j.piece[P_REASON], j.piece_n[P_REASON])
            at = emit(dst, at, b",", 1)
        at = emit(dst, at, b'"requirements":', 15)
        at = emit(dst, at, j.piece[P_REQUIREMENTS], j.piece_n[P_REQUIREMENTS])
        at = emit(dst, at, b',"a3fast.compact":', 18)
    at = emit(dst, at, b'{"format":2,"fleet":' if j.derived else b'{"format":1,"fleet":', 20)
    at = emit(dst, at, j.piece[P_FLEET], j.piece_n[P_FLEET])
    at = emit(dst, at, b',"filters_passed":', 18)
    at = emit(dst, at, j.piece[P_PREDICATES], j.piece_n[P_PREDICATES])
    at = emit(dst, at, b",", 1)
    at = emit_lists(dst, at, j.words, j.n_words, j.n_failed, j.columns, j.m, scratch, scratch_needed)
    if j.bound:
        if j.piece[P_SCORES] != NULL:
            at = emit(dst, at, b',"scores":', 10)
            at = emit(dst, at, j.piece[P_SCORES], j.piece_n[P_SCORES])
        at = emit(dst, at, b',"requirements":', 16)
        at = emit(dst, at, j.piece[P_REQUIREMENTS], j.piece_n[P_REQUIREMENTS])
        at = emit(dst, at, b',"declaration":', 15)
        at = emit(dst, at, j.piece[P_DECLARATION], j.piece_n[P_DECLARATION])
        at = emit(dst, at, b',"rest":', 8)
        at = emit(dst, at, j.piece[P_TAIL], j.piece_n[P_TAIL])
        return emit(dst, at, b"}}}\n", 4)
    if j.derived:
        at = emit(dst, at, b',"derived_reason":true', 22)
    at = emit(dst, at, b"},", 2)
    at = emit(dst, at, j.piece[P_TAIL] + 1, j.piece_n[P_TAIL] - 2)
    return emit(dst, at, b"}}\n", 3)


#: below this many bytes a single placement's lines are written holding the GIL (releasing it
#: costs more than the writing)
cdef Py_ssize_t NOGIL_BYTES = 1 << 16


cdef inline void set_piece(LinesJob* job, int k, object value) noexcept:
    if value is not None:
        job.piece[k] = PyBytes_AS_STRING(value)
        job.piece_n[k] = PyBytes_GET_SIZE(value)


#: a placement's lines would be numbered past what the engine's signed 64-bit seq holds
SEQ_PAST_INT64 = "seq: %d: a placement's lines from it would be numbered past 2^63-1, which the engine's writer does not number"


cdef long long usual_fleet_seq(membership, snapshot_seq, tuple caches) except -2:
    """The fleet snapshot seq a usual placement's lines refer to (`write_placement_lines_of`), or -1
    when the caller's last membership or snapshot seq leave none of them usual."""
    if membership is None or snapshot_seq is None or type(snapshot_seq) is not int:
        return -1
    cdef int over = 0
    cdef long long fleet_seq = PyLong_AsLongLongAndOverflow(snapshot_seq, &over)
    if over or fleet_seq < 0:
        return -1
    if len(caches) != 8:
        raise ValueError(f"a placement's line caches are 8, found {len(caches)}")
    return fleet_seq


cdef bytes write_jobs(const LinesJob* jobs, Py_ssize_t n, bytes prefix=None):
    """The lines of `n` jobs in one bytes object, after `prefix` when one is given: measured, then
    written (without the GIL when they are many bytes)."""
    cdef Py_ssize_t t, size = 0, scratch_needed = 0, at = 0
    if prefix is not None:
        at = size = PyBytes_GET_SIZE(prefix)
    for t in range(n):
        size = emit_lines(&jobs[t], NULL, size, NULL, &scratch_needed)
    cdef bytes out = PyBytes_FromStringAndSize(NULL, size)
    cdef char* dst = PyBytes_AS_STRING(out)
    if prefix is not None:
        memcpy(dst, PyBytes_AS_STRING(prefix), at)
    cdef char* scratch = <char*>malloc(max(scratch_needed, 1))
    if scratch == NULL:
        raise MemoryError()
    try:
        if n > 1 or size >= NOGIL_BYTES:
            with nogil:
                for t in range(n):
                    at = emit_lines(&jobs[t], dst, at, scratch, &scratch_needed)
        else:
            for t in range(n):
                at = emit_lines(&jobs[t], dst, at, scratch, &scratch_needed)
    finally:
        free(scratch)
    return out


# -- a placement's tail members, written from the Placement ------------------------------------------

# `decided_at` without its fraction ("YYYY-MM-DDTHH:MM:SS") for the last whole second written, since
# placements come many a second
cdef int64_t tail_second = -1
cdef char tail_date[19]


cdef inline Py_ssize_t put_digits(char* dst, Py_ssize_t at, int64_t value, int width) noexcept:
    """`value` ≥ 0 in `width` decimal digits, zero-padded; the new position."""
    cdef int k
    for k in range(width - 1, -1, -1):
        dst[at + k] = <char>(48 + value % 10)
        value //= 10
    return at + width


cdef void date_text(int64_t second) noexcept:
    """`tail_date` for a second since the epoch (0 ≤ second < 2**62 ns, before the year 2116), in UTC:
    the civil date of its day (the proleptic Gregorian calendar, as `datetime`), then the time of day."""
    cdef int64_t days = second // 86400, in_day = second % 86400
    cdef int64_t z = days + 719468            # days since 0000-03-01
    cdef int64_t era = z // 146097
    cdef int64_t doe = z - era * 146097
    cdef int64_t yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    cdef int64_t doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    cdef int64_t mp = (5 * doy + 2) // 153
    cdef int64_t day = doy - (153 * mp + 2) // 5 + 1
    cdef int64_t month = mp + 3 if mp < 10 else mp - 9
    cdef int64_t year = yoe + era * 400 + (1 if month <= 2 else 0)
    cdef Py_ssize_t at = put_digits(tail_date, 0, year, 4)
    tail_date[at] = 45
    at = put_digits(tail_date, at + 1, month, 2)
    tail_date[at] = 45
    at = put_digits(tail_date, at + 1, day, 2)
    tail_date[at] = 84
    at = put_digits(tail_date, at + 1, in_day // 3600, 2)
    tail_date[at] = 58
    at = put_digits(tail_date, at + 1, in_day // 60 % 60, 2)
    tail_date[at] = 58
    put_digits(tail_date, at + 1, in_day % 60, 2)


cdef Py_ssize_t put_ms(char* dst, Py_ssize_t at, int64_t ns) noexcept:
    """`ns / 1e6` as orjson writes it, at `dst + at`, for ns = 0 and 100 ≤ |ns| < 10**15; -1 (nothing
    written) otherwise. There the text is the decimal ns/10**6 itself: the quotient is the double
    nearest it (both operands exact below 2**53, the division correctly rounded), no other decimal
    of at most 15 significant digits names that double (DBL_DIG), and orjson writes the shortest
    decimal naming it, positionally from 1e-5 to 1e16 (1e-4 ms is the least here): the integer part, a
    point, the fraction without its trailing zeros (at least one digit). No float is formatted."""
    cdef uint64_t v = <uint64_t>0 - <uint64_t>ns if ns < 0 else <uint64_t>ns
    cdef uint64_t whole, fraction
    cdef char digits[20]
    cdef int n = 0, width = 6
    if not (v == 0 or 100 <= v < 1000000000000000):
        return -1
    if ns < 0:
        dst[at] = 45
        at += 1
    whole, fraction = v // 1000000, v % 1000000
    while True:
        digits[n] = <char>(48 + whole % 10)
        n += 1
        whole //= 10
        if whole == 0:
            break
    while n:
        n -= 1
        dst[at] = digits[n]
        at += 1
    dst[at] = 46
    if fraction == 0:
        dst[at + 1] = 48
        return at + 2
    while fraction % 10 == 0:
        fraction //= 10
        width -= 1
    return put_digits(dst, at + 1, fraction, width)


#: A tail's first member when the placement left its task's session unheld (record.write.tail_members).
cdef bytes UNHELD_TAIL_HEAD = b'{"a3fast.session_held":false,'


cdef object timings_tail(object gather_ns, object select_ns, object decided_at_ns):
    """`record.write.tail_json` of a placement whose only tail member is `timings`, both phases
    measured; None when a value is outside what this writes as orjson does (then the caller's
    writer does)."""
    if type(gather_ns) is not int or type(select_ns) is not int:
        return None
    cdef int gather_over = 0, select_over = 0
    cdef int64_t gather = PyLong_AsLongLongAndOverflow(gather_ns, &gather_over)
    cdef int64_t select = PyLong_AsLongLongAndOverflow(select_ns, &select_over)
    if gather_over or select_over:
        return None
    return timings_tail_ns(gather, select, decided_at_ns)


cdef int clock_reading(object value, int64_t* out) except -1:
    """1 with a clock reading in `out` when `value` is an int within ±2^62 (so that the difference
    of two is one too), else 0."""
    cdef int over = 0
    if type(value) is not int:
        return 0
    out[0] = PyLong_AsLongLongAndOverflow(value, &over)
    return over == 0 and -(1LL << 62) < out[0] < (1LL << 62)


cdef object clock_timings_tail(object p):
    """`timings_tail` of a Placement (its slots read directly) whose phases the build stage left
    to be read from its clock readings, not resumed: the phases subtracted in C, no int made of
    them; None where a reading is not an int within ±2^62, and where `timings_tail` would be."""
    cdef int64_t started, gathered, selected
    if not (clock_reading(slot(p, S_STARTED), &started) and clock_reading(slot(p, S_GATHERED), &gathered)
            and clock_reading(slot(p, S_SELECTED), &selected)):
        return None
    return timings_tail_ns(gathered - started, selected - gathered, slot(p, S_DECIDED_AT_NS))


cdef object timings_tail_ns(int64_t gather, int64_t select, object decided_at_ns):
    """`timings_tail` of the phases as C integers."""
    global tail_second
    if type(decided_at_ns) is not int:
        return None
    cdef int moment_over = 0
    cdef int64_t ns = PyLong_AsLongLongAndOverflow(decided_at_ns, &moment_over)
    if moment_over or not (0 <= ns < (1LL << 62)):
        return None
    cdef char text[160]
    cdef Py_ssize_t at = 0
    memcpy(text, b'{"timings":{"gather_ms":', 24)
    at = put_ms(text, 24, gather)
    if at < 0:
        return None
    memcpy(text + at, b',"select_ms":', 13)
    at = put_ms(text, at + 13, select)
    if at < 0:
        return None
    memcpy(text + at, b',"decided_at":"', 15)
    at += 15
    if ns // 1000000000 != tail_second:
        date_text(ns // 1000000000)
        tail_second = ns // 1000000000
    memcpy(text + at, tail_date, 19)
    text[at + 19] = 46
    at = put_digits(text, at + 20, ns // 1000 % 1000000, 6)
    memcpy(text + at, b'Z"}}', 4)
    return PyBytes_FromStringAndSize(text, at + 4)


# -- the filter's result -----------------------------------------------------------------------------

cdef void* resized(const void* p, size_t size) except NULL:
    """realloc, or MemoryError (the old block stays valid and owned by the caller on failure)."""
    cdef void* q = realloc(<void*>p, size)
    if q == NULL:
        raise MemoryError()
    return q


cdef inline void put_u16(char* out, Py_ssize_t at, uint32_t value) noexcept nogil:
    a3_put_le16(out + at, value)


cdef inline void put_u32(char* out, Py_ssize_t at, uint32_t value) noexcept nogil:
    put_u16(out, at, value & 0xFFFF)
    put_u16(out, at + 2, value >> 16)


cdef bytes words_to_roaring(const uint64_t* words, Py_ssize_t n_words):
    """A set of ids (bit i of word j is id 64j+i) in the portable Roaring format: per 65,536-id
    chunk, the smallest of an array container of 16-bit values (up to 4,096 members), a 8 KiB
    bitmap container, or a run container (above, `roaring_into`): byte for byte what pyroaring's
    `BitMap.serialize` writes for the same ids. Little-endian whatever the host."""
    cdef Py_ssize_t size = roaring_size(words, n_words)
    if size == 0:   # the empty set: the header alone
        size = 8
    cdef bytes out = PyBytes_FromStringAndSize(NULL, size)
    roaring_into(PyBytes_AS_STRING(out), words, n_words, -1, -1)
    return out


cdef const char* B64_DIGITS = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


@cython.final
@cython.no_gc
cdef class Explanation:
    """The filter's result: candidates, eligible, and per predicate the candidates that failed it first.

    Holds copies of the words (`n_failed` failed sets, then the eligible set), so it stays valid
    after the fleet changes. `failed[k]` holds exactly the candidates whose first failed predicate
    is the k-th (§6); together with the eligible set they partition the candidates.
    """

    cdef uint64_t* words
    cdef Py_ssize_t n_words        # words per set
    cdef Py_ssize_t n_failed
    cdef Py_ssize_t n_candidates
    cdef Py_ssize_t n_eligible
    cdef Index index

    def __cinit__(self):
        self.words = NULL

    def __dealloc__(self):
        free(self.words)

    def __init__(self, *args, **kwargs):
        raise TypeError("Explanation objects are made by Index.explain")

    cdef inline uint64_t* failed_words(self, Py_ssize_t k) noexcept:
        return self.words + k * self.n_words

    cdef inline uint64_t* eligible_words(self) noexcept:
        return self.words + self.n_failed * self.n_words

    cdef Py_ssize_t failed_index(self, Py_ssize_t k) except -1:
        if k < 0:
            k += self.n_failed
        if k < 0 or k >= self.n_failed:
            raise IndexError("failed set index out of range")
        return k

    @property
    def candidates_count(self) -> int:
        return self.n_candidates

    @property
    def eligible_count(self) -> int:
        return self.n_eligible

    def failed_counts(self) -> list:
        return [popcount_words(self.failed_words(k), self.n_words) for k in range(self.n_failed)]

    def candidate_ids(self) -> list:
        cdef list out = []
        cdef Py_ssize_t i, k, n = self.n_words
        cdef uint64_t w
        for i in range(n):
            w = 0
            for k in range(self.n_failed + 1):
                w |= self.words[k * n + i]
            while w:
                out.append((i << 6) + a3_ctz64(w))
                w &= w - 1
        return out

    def eligible_ids(self) -> list:
        return words_to_list(self.eligible_words(), self.n_words)

    def failed_ids(self, Py_ssize_t k) -> list:
        return words_to_list(self.failed_words(self.failed_index(k)), self.n_words)




    # The portable Roaring serialisation of a set, written straight from the words (the compact
    # placement format; docs/compact-format.md): no Python int per member, no BitMap built.
    def failed_roaring(self, Py_ssize_t k) -> bytes:
        return words_to_roaring(self.failed_words(self.failed_index(k)), self.n_words)

    def eligible_roaring(self) -> bytes:
        return words_to_roaring(self.eligible_words(), self.n_words)


cdef Explanation new_explanation(Index index, Py_ssize_t n_sets, Py_ssize_t nw):
    """An Explanation on `index` with room for `n_sets` failed sets and the eligible set, of `nw`
    words each, none of them set yet (`Index.explain` and a wave's tasks fill them)."""
    cdef Explanation e = Explanation.__new__(Explanation)
    e.index = index
    e.n_words = nw
    e.n_failed = n_sets
    e.words = <uint64_t*>malloc(max((n_sets + 1) * nw, 1) * sizeof(uint64_t))
    if e.words == NULL:
        raise MemoryError()
    return e


@cython.final
@cython.no_gc
cdef class Scores:
    """Default score components of the eligible agents, aligned with `ids` (ascending agent id)."""

    cdef Py_ssize_t* agent_ids
    cdef double* columns           # total, affinity, success_rate, cost, substantiated: n each
    cdef Py_ssize_t n
    cdef readonly Py_ssize_t best
    cdef Index index

    def __cinit__(self):
        self.agent_ids = NULL
        self.columns = NULL

    def __dealloc__(self):
        free(self.agent_ids)
        free(self.columns)

    def __init__(self, *args, **kwargs):
        raise TypeError("Scores objects are made by Index.score")

    def __len__(self) -> int:
        return self.n

    cdef list column(self, Py_ssize_t c):
        cdef double* values = self.columns + c * self.n
        return [values[j] for j in range(self.n)]

    @property
    def ids(self) -> list:
        return [self.agent_ids[j] for j in range(self.n)]

    @property
    def total(self) -> list:
        return self.column(0)

    @property
    def affinity(self) -> list:
        return self.column(1)

    @property
    def success_rate(self) -> list:
        return self.column(2)

    @property
    def cost(self) -> list:
        return self.column(3)

    @property
    def substantiated(self) -> list:
        return self.column(4)


# -- the index ----------------------------------------------------------------------------------------

@cython.final     # a subclass could hold an Explanation, which the collector does not see
cdef class Index:
    """Per-predicate rows of agent ids, the live set, and the per-agent columns scoring reads.

    Agent ids are dense and never reused for another name; rows are created by `add_row` and
    addressed by the integer it returns. `UNKNOWN` (-1) stands for the empty row.
    """

    cdef Row* rows
    cdef Py_ssize_t n_rows, rows_cap
    cdef uint64_t* live
    cdef Py_ssize_t cap_words       # words allocated for every dense set (live and dense rows)
    cdef Py_ssize_t n_ids           # ids assigned so far
    cdef Py_ssize_t n_live
    cdef double* costs
    cdef const char** utf8_names    # into the str objects of `names` (kept alive by the list)
    cdef Py_ssize_t* utf8_lengths
    cdef const char** quoted_names  # into the bytes objects of `quoted`
    cdef Py_ssize_t* quoted_lengths
    cdef Py_ssize_t agents_cap      # allocated length of the per-agent columns
    cdef list names
    cdef list quoted
    cdef Outcomes* kinds
    cdef Py_ssize_t n_kinds, kinds_cap
    cdef Buffer out                 # the JSON writer's buffer, reused between records

    def __cinit__(self):
        self.rows = NULL
        self.live = NULL
        self.costs = NULL
        self.utf8_names = NULL
        self.utf8_lengths = NULL
        self.quoted_names = NULL
        self.quoted_lengths = NULL
        self.kinds = NULL
        self.out.data = NULL
        self.out.size = self.out.cap = 0
        self.names = []
        self.quoted = []

    def __dealloc__(self):
        cdef Py_ssize_t i
        if self.rows != NULL:
            for i in range(self.n_rows):
                free(self.rows[i].words)
                free(self.rows[i].ids)
            free(self.rows)
        if self.kinds != NULL:
            for i in range(self.n_kinds):
                free(self.kinds[i].keys)
                free(self.kinds[i].successes)
                free(self.kinds[i].attempts)
            free(self.kinds)
        free(self.live)
        free(self.costs)
        free(self.utf8_names)
        free(self.utf8_lengths)
        free(self.quoted_names)
        free(self.quoted_lengths)
        free(self.out.data)

    # -- storage ----------------------------------------------------------------------------------------
    cdef int grow_words(self, Py_ssize_t aid) except -1:
        """Make every dense set hold bit `aid`; rows left too sparse for the new size turn sparse."""
        if aid < self.cap_words * 64:
            return 0
        cdef Py_ssize_t cap = max(self.cap_words * 2, (aid >> 6) + 1)
        cdef uint64_t* grown = <uint64_t*>realloc(self.live, cap * sizeof(uint64_t))
        if grown == NULL:
            raise MemoryError()
        memset(grown + self.cap_words, 0, (cap - self.cap_words) * sizeof(uint64_t))
        self.live = grown
        cdef Py_ssize_t i
        cdef Row* row
        for i in range(self.n_rows):
            row = &self.rows[i]
            if row.words == NULL:
                continue
            grown = <uint64_t*>realloc(row.words, cap * sizeof(uint64_t))
            if grown == NULL:
                raise MemoryError()
            memset(grown + self.cap_words, 0, (cap - self.cap_words) * sizeof(uint64_t))
            row.words = grown
        self.cap_words = cap
        for i in range(self.n_rows):
            row = &self.rows[i]
            if row.words != NULL and row.count < cap // 4:
                self.make_sparse(row)
        return 0

    cdef int grow_agents(self, Py_ssize_t n) except -1:
        if n <= self.agents_cap:
            return 0
        cdef Py_ssize_t cap = max(self.agents_cap * 2, n, 64)
        self.costs = <double*>resized(self.costs, cap * sizeof(double))
        self.utf8_names = <const char**>resized(self.utf8_names, cap * sizeof(char*))
        self.utf8_lengths = <Py_ssize_t*>resized(self.utf8_lengths, cap * sizeof(Py_ssize_t))
        self.quoted_names = <const char**>resized(self.quoted_names, cap * sizeof(char*))
        self.quoted_lengths = <Py_ssize_t*>resized(self.quoted_lengths, cap * sizeof(Py_ssize_t))
        self.agents_cap = cap
        return 0

    cdef int make_dense(self, Row* row) except -1:
        cdef uint64_t* words = <uint64_t*>calloc(max(self.cap_words, 1), sizeof(uint64_t))
        if words == NULL:
            raise MemoryError()
        cdef Py_ssize_t j
        cdef uint32_t aid
        for j in range(row.count):
            aid = row.ids[j]
            words[aid >> 6] |= (<uint64_t>1) << (aid & 63)
        free(row.ids)
        row.ids = NULL
        row.ids_cap = 0
        row.words = words
        return 0

    cdef int make_sparse(self, Row* row) except -1:
        cdef Py_ssize_t cap = max(row.count, 4), i, j = 0
        cdef uint32_t* ids = <uint32_t*>malloc(cap * sizeof(uint32_t))
        if ids == NULL:
            raise MemoryError()
        cdef uint64_t w
        for i in range(self.cap_words):
            w = row.words[i]
            while w:
                ids[j] = <uint32_t>((i << 6) + a3_ctz64(w))
                j += 1
                w &= w - 1
        free(row.words)
        row.words = NULL
        row.ids = ids
        row.ids_cap = cap
        return 0

    cdef int row_insert(self, Row* row, Py_ssize_t aid) except -1:
        """Add `aid` to a row (no-op if present); a row reaching one member per 128 ids turns dense.

        The forms take the same bytes at one member per 32 ids, but inserts and removals in sorted
        arrays that long would dominate a one-agent update; switching at one per 128 keeps them short
        for 18 more index bytes per agent (figures in docs/performance.md)."""
        cdef uint64_t bit
        cdef Py_ssize_t pos
        cdef uint32_t* grown
        if row.words != NULL:
            bit = (<uint64_t>1) << (aid & 63)
            if not (row.words[aid >> 6] & bit):
                row.words[aid >> 6] |= bit
                row.count += 1
            return 0
        if row.count == 0 or row.ids[row.count - 1] < <uint32_t>aid:
            pos = row.count    # joining agents come in id order: append without a search
        else:
            pos = lower_bound(row.ids, row.count, <uint32_t>aid)
            if pos < row.count and row.ids[pos] == <uint32_t>aid:
                return 0
        if row.count + 1 >= self.cap_words // 2:
            self.make_dense(row)
            row.words[aid >> 6] |= (<uint64_t>1) << (aid & 63)
            row.count += 1
            return 0
        if row.count == row.ids_cap:
            grown = <uint32_t*>realloc(row.ids, max(row.ids_cap * 2, 4) * sizeof(uint32_t))
            if grown == NULL:
                raise MemoryError()
            row.ids = grown
            row.ids_cap = max(row.ids_cap * 2, 4)
        memmove(row.ids + pos + 1, row.ids + pos, (row.count - pos) * sizeof(uint32_t))
        row.ids[pos] = <uint32_t>aid
        row.count += 1
        return 0

    cdef int row_remove(self, Row* row, Py_ssize_t aid) except -1:
        """Remove `aid` from a row (no-op if absent); a dense row under one member per 256 ids turns sparse."""
        cdef uint64_t bit
        cdef Py_ssize_t pos
        if row.words != NULL:
            bit = (<uint64_t>1) << (aid & 63)
            if row.words[aid >> 6] & bit:
                row.words[aid >> 6] &= ~bit
                row.count -= 1
                if row.count < self.cap_words // 4:
                    self.make_sparse(row)
            return 0
        pos = find_id(row.ids, row.count, <uint32_t>aid)
        if pos >= 0:
            memmove(row.ids + pos, row.ids + pos + 1, (row.count - pos - 1) * sizeof(uint32_t))
            row.count -= 1
        return 0

    cdef Row* row_at(self, Py_ssize_t r) except NULL:
        if r < 0 or r >= self.n_rows:
            raise IndexError(f"row {r} does not exist")
        return &self.rows[r]

    cdef Py_ssize_t agent_at(self, Py_ssize_t aid) except -1:
        if aid < 0 or aid >= self.n_ids:
            raise IndexError(f"agent id {aid} does not exist")
        return aid

    cdef Outcomes* kind_at(self, Py_ssize_t kind) except NULL:
        if kind < 0 or kind >= self.n_kinds:
            raise IndexError(f"task kind {kind} does not exist")
        return &self.kinds[kind]

    cdef int join(self, Py_ssize_t aid, str name, double cost) except -1:
        """Record a new agent's name (and its UTF-8 and JSON forms) and cost column."""
        cdef bytes quoted = quote(name)   # first: a name that cannot be encoded changes nothing
        cdef Py_ssize_t n
        cdef const char* utf8 = PyUnicode_AsUTF8AndSize(name, &n)
        self.grow_agents(aid + 1)
        self.grow_words(aid)
        self.names.append(name)
        self.quoted.append(quoted)
        self.utf8_names[aid] = utf8
        self.utf8_lengths[aid] = n
        self.quoted_names[aid] = PyBytes_AS_STRING(quoted)
        self.quoted_lengths[aid] = PyBytes_GET_SIZE(quoted)
        self.costs[aid] = cost
        self.n_ids = aid + 1
        return 0

    cdef int set_live(self, Py_ssize_t aid) except -1:
        cdef uint64_t bit = (<uint64_t>1) << (aid & 63)
        if not (self.live[aid >> 6] & bit):
            self.live[aid >> 6] |= bit
            self.n_live += 1
        return 0

    # -- building -------------------------------------------------------------------------------------
    def add_row(self) -> int:
        cdef Py_ssize_t cap
        if self.n_rows == self.rows_cap:
            cap = max(self.rows_cap * 2, 64)
            self.rows = <Row*>resized(self.rows, cap * sizeof(Row))
            self.rows_cap = cap
        memset(&self.rows[self.n_rows], 0, sizeof(Row))
        self.n_rows += 1
        return self.n_rows - 1

    def row_count(self) -> int:
        return self.n_rows

    def empty_row_ids(self) -> list:
        """The rows that hold no agent, ascending."""
        cdef Py_ssize_t i
        return [i for i in range(self.n_rows) if self.rows[i].count == 0]

    def drop_rows(self, rows) -> None:
        """Remove `rows` from the index: the others keep their order, each numbered down by the
        rows removed before it. Refused, nothing changed, unless each is a row of this index
        (IndexError) that holds no agent, the rows given once each in ascending order (ValueError)."""
        cdef list drop = list(rows)
        cdef Py_ssize_t n = len(drop), k = 0, out = 0, prev = -1, i, r
        cdef Py_ssize_t* at = <Py_ssize_t*>malloc(max(n, 1) * sizeof(Py_ssize_t))
        if at == NULL:
            raise MemoryError()
        try:
            for k in range(n):
                r = drop[k]
                if self.row_at(r).count:
                    raise ValueError(f"row {r} holds agents")
                if r <= prev:
                    raise ValueError("drop_rows takes rows in ascending order, each once")
                at[k] = prev = r
            # nothing below can fail: the index is changed whole or not at all
            k = 0
            for i in range(self.n_rows):
                if k < n and at[k] == i:
                    free(self.rows[i].words)
                    free(self.rows[i].ids)
                    k += 1
                else:
                    if out != i:
                        self.rows[out] = self.rows[i]
                    out += 1
            if out < self.n_rows:
                memset(&self.rows[out], 0, (self.n_rows - out) * sizeof(Row))
            self.n_rows = out
        finally:
            free(at)

    def new_kind(self) -> int:
        cdef Py_ssize_t cap
        if self.n_kinds == self.kinds_cap:
            cap = max(self.kinds_cap * 2, 8)
            self.kinds = <Outcomes*>resized(self.kinds, cap * sizeof(Outcomes))
            self.kinds_cap = cap
        memset(&self.kinds[self.n_kinds], 0, sizeof(Outcomes))
        self.n_kinds += 1
        return self.n_kinds - 1

    def put(self, Py_ssize_t aid, str name, rows, double cost) -> None:
        """Agent `aid` (a new id == number of ids so far, or one seen before) joins with `rows`."""
        cdef Py_ssize_t r
        if aid < 0 or aid > self.n_ids:
            raise ValueError(f"agent id {aid} is neither known nor the next free id {self.n_ids}")
        cdef list checked = []
        for r in rows:   # check first: a bad row changes nothing; read once, as plain numbers
            self.row_at(r)
            checked.append(r)
        check_cost(cost, aid)
        if aid == self.n_ids:
            self.join(aid, name, cost)
        else:
            self.costs[aid] = cost
        for r in checked:
            self.row_insert(&self.rows[r], aid)
        self.set_live(aid)

    def put_many(self, aids, names, rows, costs) -> None:
        """`put` for many new agents at once (ids consecutive from the next free id)."""
        cdef Py_ssize_t first, j, n = len(aids), r
        cdef double cost
        if n == 0:
            return
        first = aids[0]
        if first != self.n_ids or list(aids) != list(range(first, first + n)):
            raise ValueError("put_many takes consecutive new ids")
        # every argument read once, into values no caller's code can change, and checked: a row
        # list or cost read again after its check (its items' conversions, a list a caller's
        # object changed meanwhile) could name a row that does not exist
        names, rows, costs = list(names), list(rows), list(costs)
        if not (len(names) == len(rows) == len(costs) == n):
            raise ValueError("put_many takes one name, row list and cost per id")
        cdef list checked_rows = [], checked_costs = []
        for j in range(n):
            these = []
            for r in rows[j]:
                these.append(r)
            checked_rows.append(these)
            cost = costs[j]
            checked_costs.append(cost)
        for name in names:
            if not isinstance(name, str):
                raise TypeError(f"agent names must be str, not {type(name).__name__}")
        # no caller's code runs from here on: the checks hold for what is used
        if first != self.n_ids:
            raise ValueError("put_many takes consecutive new ids")
        for these in checked_rows:
            for r in these:
                self.row_at(r)
        for j in range(n):
            check_cost(checked_costs[j], first + j)
        for j in range(n):
            self.join(first + j, names[j], checked_costs[j])
        for j in range(n):
            for r in checked_rows[j]:
                self.row_insert(&self.rows[r], first + j)
            self.set_live(first + j)

    def put_flat(self, names, const int32_t[::1] rows, const int64_t[::1] offsets,
                 const double[::1] costs) -> None:
        """`put_many` for new agents `names` (ids from the next free id) with their rows in one
        array: agent j's are `rows[offsets[j]:offsets[j + 1]]` (a JSON Lines batch's columns)."""
        cdef Py_ssize_t first = self.n_ids, j, k, n = len(names)
        if offsets.shape[0] != n + 1 or costs.shape[0] != n:
            raise ValueError("put_flat takes one cost and one offset per name, and a last offset")
        if n == 0:
            return
        names = list(names)
        if len(names) != n:
            raise ValueError("put_flat takes one cost and one offset per name, and a last offset")
        for name in names:
            if not isinstance(name, str):
                raise TypeError(f"agent names must be str, not {type(name).__name__}")
        # checked after the last of a caller's code (its names' sequence), which could change the
        # arrays it lent: the offsets and rows as they are used
        for j in range(n):
            if offsets[j + 1] < offsets[j]:
                raise ValueError("put_flat: offsets must not decrease")
        if offsets[0] < 0 or offsets[n] > rows.shape[0]:
            raise ValueError("put_flat: offsets outside the rows")
        for k in range(offsets[0], offsets[n]):
            self.row_at(rows[k])
        for j in range(n):
            check_cost(costs[j], first + j)
        if first != self.n_ids:
            raise ValueError("put_flat: the index changed while its arguments were read")
        for j in range(n):
            self.join(first + j, names[j], costs[j])
        self.insert_by_row(first, rows, offsets, n)
        for j in range(n):
            self.set_live(first + j)

    cdef int insert_by_row(self, Py_ssize_t first, const int32_t[::1] rows, const int64_t[::1] offsets,
                           Py_ssize_t n) except -1:
        """Agent `first + j` into rows `rows[offsets[j]:offsets[j + 1]]`, row by row: the memberships
        of a block of agents are sorted by row (a counting sort, ids ascending within a row), then
        each row takes its new members together. Agent by agent, every insert went to another row,
        whose memory was rarely still in cache; the rows end exactly as then."""
        # a block holds at least as many memberships as there are rows, so that the pass over every
        # row per block costs no more than the block's own inserts, however many rows there are
        cdef Py_ssize_t block = max(1 << 20, self.n_rows), j = 0, end, k, r, a, m, half
        cdef uint32_t aid
        cdef uint64_t bit
        cdef Py_ssize_t* starts = <Py_ssize_t*>calloc(self.n_rows + 1, sizeof(Py_ssize_t))
        cdef uint32_t* members = NULL
        cdef uint32_t* grown
        cdef Row* row
        if starts == NULL:
            raise MemoryError()
        try:
            while j < n:
                end = j + 1      # agents j..end-1: at least one, and members of at most `block`
                while end < n and offsets[end + 1] - offsets[j] <= block:
                    end += 1
                m = offsets[end] - offsets[j]
                if members == NULL or m > block:
                    block = max(block, m)
                    grown = <uint32_t*>realloc(members, block * sizeof(uint32_t))
                    if grown == NULL:
                        raise MemoryError()
                    members = grown
                memset(starts, 0, (self.n_rows + 1) * sizeof(Py_ssize_t))
                for k in range(offsets[j], offsets[end]):
                    starts[rows[k] + 1] += 1
                for r in range(self.n_rows):
                    starts[r + 1] += starts[r]
                for a in range(j, end):
                    for k in range(offsets[a], offsets[a + 1]):
                        members[starts[rows[k]]] = <uint32_t>(first + a)
                        starts[rows[k]] += 1
                # starts[r] is now where row r's members end (and row r - 1's began)
                k = 0
                half = self.cap_words // 2
                for r in range(self.n_rows):
                    row = &self.rows[r]
                    while k < starts[r]:
                        aid = members[k]
                        if row.words != NULL:
                            bit = (<uint64_t>1) << (aid & 63)
                            if not (row.words[aid >> 6] & bit):
                                row.words[aid >> 6] |= bit
                                row.count += 1
                        elif (row.count < row.ids_cap and row.count + 1 < half
                                and (row.count == 0 or row.ids[row.count - 1] < aid)):
                            row.ids[row.count] = aid     # row_insert's append, without the call
                            row.count += 1
                        else:
                            self.row_insert(row, aid)
                        k += 1
                j = end
        finally:
            free(starts)
            free(members)
        return 0

    def drop(self, Py_ssize_t aid, rows) -> None:
        """Agent `aid` leaves `rows` and the live set (its id and name stay reserved)."""
        cdef Py_ssize_t r
        self.agent_at(aid)
        cdef list checked = []
        for r in rows:   # read once, as plain numbers, and checked before any changes
            self.row_at(r)
            checked.append(r)
        for r in checked:
            self.row_remove(&self.rows[r], aid)
        cdef uint64_t bit = (<uint64_t>1) << (aid & 63)
        if self.live[aid >> 6] & bit:
            self.live[aid >> 6] &= ~bit
            self.n_live -= 1

    def set_bit(self, Py_ssize_t row, Py_ssize_t aid) -> None:
        self.row_insert(self.row_at(row), self.agent_at(aid))

    def clear_bit(self, Py_ssize_t row, Py_ssize_t aid) -> None:
        self.row_remove(self.row_at(row), self.agent_at(aid))

    def record_outcome(self, Py_ssize_t kind, Py_ssize_t aid, bint success) -> None:
        cdef Outcomes* o = self.kind_at(kind)
        self.agent_at(aid)
        cdef Py_ssize_t found = outcome_slot(o, aid)
        check_outcomes(aid, o.attempts[found] if found >= 0 and o.keys[found] != 0 else 0, 1 if success else 0, 1)
        if (o.size + 1) * 2 > o.cap:
            outcomes_grow(o)
        cdef Py_ssize_t slot = outcome_slot(o, aid)
        if o.keys[slot] == 0:
            o.keys[slot] = aid + 1
            o.size += 1
        o.successes[slot] += 1 if success else 0
        o.attempts[slot] += 1

    def add_outcomes(self, Py_ssize_t kind, Py_ssize_t aid, int64_t successes, int64_t attempts) -> None:
        """`attempts` outcomes at once, `successes` of them successful (a restore in O(1)); refused,
        changing nothing, past MAX_OUTCOMES."""
        cdef Outcomes* o = self.kind_at(kind)
        self.agent_at(aid)
        cdef Py_ssize_t found = outcome_slot(o, aid)
        check_outcomes(aid, o.attempts[found] if found >= 0 and o.keys[found] != 0 else 0, successes, attempts)
        if (o.size + 1) * 2 > o.cap:
            outcomes_grow(o)
        cdef Py_ssize_t slot = outcome_slot(o, aid)
        if o.keys[slot] == 0:
            o.keys[slot] = aid + 1
            o.size += 1
        o.successes[slot] += successes
        o.attempts[slot] += attempts

    # -- snapshots (docs/snapshot.md): the rows and columns as little-endian arrays -------------------
    def export_rows(self) -> tuple:
        """Every row's members: (u64 offsets, R + 1 of them, into u32 ascending agent ids)."""
        cdef Py_ssize_t i, total = 0, at = 0, nw = (self.n_ids + 63) >> 6, w_i
        for i in range(self.n_rows):
            total += self.rows[i].count
        cdef bytes offsets = PyBytes_FromStringAndSize(NULL, (self.n_rows + 1) * 8)
        cdef bytes ids = PyBytes_FromStringAndSize(NULL, max(total, 0) * 4)
        cdef unsigned char* off = <unsigned char*>PyBytes_AS_STRING(offsets)
        cdef unsigned char* dst = <unsigned char*>PyBytes_AS_STRING(ids)
        cdef Row* row
        cdef uint64_t w
        for i in range(self.n_rows):
            store_u64(off + 8 * i, <uint64_t>at)
            row = &self.rows[i]
            if row.words != NULL:
                for w_i in range(nw):
                    w = row.words[w_i]
                    while w:
                        store_u32(dst + 4 * at, <uint32_t>((w_i << 6) + a3_ctz64(w)))
                        at += 1
                        w &= w - 1
            else:
                for w_i in range(row.count):
                    store_u32(dst + 4 * at, row.ids[w_i])
                    at += 1
        store_u64(off + 8 * self.n_rows, <uint64_t>at)
        return offsets, ids

    def export_live(self) -> bytes:
        """The live agent ids, u32 ascending."""
        cdef Py_ssize_t nw = (self.n_ids + 63) >> 6, i, at = 0
        cdef bytes out = PyBytes_FromStringAndSize(NULL, self.n_live * 4)
        cdef unsigned char* dst = <unsigned char*>PyBytes_AS_STRING(out)
        cdef uint64_t w
        for i in range(nw):
            w = self.live[i]
            while w:
                store_u32(dst + 4 * at, <uint32_t>((i << 6) + a3_ctz64(w)))
                at += 1
                w &= w - 1
        return out

    def export_costs(self) -> bytes:
        """The cost column, one f64 per agent id."""
        cdef bytes out = PyBytes_FromStringAndSize(NULL, self.n_ids * 8)
        cdef unsigned char* dst = <unsigned char*>PyBytes_AS_STRING(out)
        cdef Py_ssize_t i
        cdef uint64_t bits
        for i in range(self.n_ids):
            memcpy(&bits, &self.costs[i], 8)
            store_u64(dst + 8 * i, bits)
        return out

    def export_outcomes(self, Py_ssize_t kind) -> bytes:
        """One kind's outcome counts: (i64 agent id, i64 successes, i64 attempts) by agent id."""
        cdef Outcomes* o = self.kind_at(kind)
        cdef Py_ssize_t aid, slot, at = 0
        cdef bytes out = PyBytes_FromStringAndSize(NULL, o.size * 24)
        cdef unsigned char* dst = <unsigned char*>PyBytes_AS_STRING(out)
        for aid in range(self.n_ids):
            if at == o.size:
                break
            slot = outcome_slot(o, aid)
            if slot >= 0 and o.keys[slot] != 0:
                store_u64(dst + 24 * at, <uint64_t>aid)
                store_u64(dst + 24 * at + 8, <uint64_t>o.successes[slot])
                store_u64(dst + 24 * at + 16, <uint64_t>o.attempts[slot])
                at += 1
        return out

    def import_outcomes(self, Py_ssize_t kind, const unsigned char[::1] data) -> None:
        """Add the counts `export_outcomes` wrote to a kind (all checked before any is added)."""
        cdef Py_ssize_t n = data.shape[0] // 24, j
        cdef int64_t aid, s, a, previous = -1
        if data.shape[0] % 24:
            raise ValueError("outcome records are 24 bytes each")
        cdef Outcomes* o = self.kind_at(kind)
        if o.size:
            raise ValueError("outcome records are imported into a kind with no outcomes yet")
        for j in range(n):
            aid = <int64_t>load_u64(&data[24 * j])
            s = <int64_t>load_u64(&data[24 * j + 8])
            a = <int64_t>load_u64(&data[24 * j + 16])
            if aid <= previous or aid >= self.n_ids or s < 0 or a < s or a > OUTCOME_LIMIT:
                raise ValueError(f"outcome record {j}: agent {aid}, {s} of {a} is not a valid count")
            previous = aid
        for j in range(n):
            self.add_outcomes(kind, <int64_t>load_u64(&data[24 * j]), <int64_t>load_u64(&data[24 * j + 8]),
                              <int64_t>load_u64(&data[24 * j + 16]))

    def restore(self, names, const unsigned char[::1] costs, const unsigned char[::1] live,
                const unsigned char[::1] row_offsets, const unsigned char[::1] row_ids) -> None:
        """Fill an empty Index from what the export methods wrote, in one pass per array: every
        array is checked (ids ascending and known, offsets in range) before anything is built."""
        cdef Py_ssize_t n = len(names), n_rows, i, j, start, end, total, n_live, nw
        cdef uint32_t aid
        cdef Row* row
        cdef uint64_t bits
        cdef double cost
        if self.n_ids or self.n_rows:
            raise ValueError("restore fills an empty Index")
        if costs.shape[0] != 8 * n:
            raise ValueError(f"{costs.shape[0]} bytes of costs for {n} agents")
        if live.shape[0] % 4 or row_ids.shape[0] % 4 or row_offsets.shape[0] % 8 or row_offsets.shape[0] < 8:
            raise ValueError("live ids, row ids and row offsets must be whole arrays")
        n_live = live.shape[0] // 4
        n_rows = row_offsets.shape[0] // 8 - 1
        total = row_ids.shape[0] // 4
        check_ids(&live[0] if n_live else NULL, n_live, n, "the live set")
        if load_u64(&row_offsets[0]) != 0 or load_u64(&row_offsets[8 * n_rows]) != <uint64_t>total:
            raise ValueError("row offsets do not cover the row ids")
        for i in range(n_rows):
            start = <Py_ssize_t>load_u64(&row_offsets[8 * i])
            end = <Py_ssize_t>load_u64(&row_offsets[8 * i + 8])
            if end < start or end > total:
                raise ValueError(f"row {i}: offsets {start}..{end} out of order")
            check_ids(&row_ids[4 * start] if end > start else NULL, end - start, n, f"row {i}")
        for name in names:
            if not isinstance(name, str):
                raise TypeError(f"agent names must be str, not {type(name).__name__}")
        for i in range(n):
            bits = load_u64(&costs[8 * i])
            memcpy(&cost, &bits, 8)
            check_cost(cost, i)
        if n:
            self.grow_agents(n)
            self.grow_words(n - 1)
        for i in range(n):
            bits = load_u64(&costs[8 * i])
            memcpy(&cost, &bits, 8)
            self.join(i, names[i], cost)
        nw = (n + 63) >> 6
        for i in range(n_rows):
            self.add_row()
            row = &self.rows[i]
            start = <Py_ssize_t>load_u64(&row_offsets[8 * i])
            end = <Py_ssize_t>load_u64(&row_offsets[8 * i + 8])
            row.count = end - start
            if row.count == 0:
                continue
            if row.count >= self.cap_words // 2:
                row.words = <uint64_t*>calloc(max(self.cap_words, 1), sizeof(uint64_t))
                if row.words == NULL:
                    raise MemoryError()
                for j in range(start, end):
                    aid = load_u32(&row_ids[4 * j])
                    row.words[aid >> 6] |= (<uint64_t>1) << (aid & 63)
            else:
                row.ids = <uint32_t*>malloc(max(row.count, 4) * sizeof(uint32_t))
                if row.ids == NULL:
                    raise MemoryError()
                row.ids_cap = max(row.count, 4)
                for j in range(start, end):
                    row.ids[j - start] = load_u32(&row_ids[4 * j])
        for j in range(n_live):
            self.set_live(load_u32(&live[4 * j]))

    # -- reading --------------------------------------------------------------------------------------

    def live_ids(self) -> list:
        return words_to_list(self.live, (self.n_ids + 63) >> 6)

    def row_ids(self, Py_ssize_t row) -> list:
        if row < 0:
            return []
        cdef Row* r = self.row_at(row)
        if r.words != NULL:
            return words_to_list(r.words, (self.n_ids + 63) >> 6)
        return [r.ids[j] for j in range(r.count)]

    def name(self, Py_ssize_t aid) -> str:
        return self.names[self.agent_at(aid)]

    def outcome(self, Py_ssize_t kind, Py_ssize_t aid) -> tuple:
        if kind < 0:
            return (0, 0)
        cdef Outcomes* o = self.kind_at(kind)
        cdef Py_ssize_t slot = outcome_slot(o, aid)
        if slot < 0 or o.keys[slot] == 0:
            return (0, 0)
        return (o.successes[slot], o.attempts[slot])

    def nbytes(self) -> int:
        """Bytes held by the rows and the live set (the index proper, without names and columns)."""
        cdef Py_ssize_t total = self.cap_words * 8 + self.rows_cap * sizeof(Row), i
        for i in range(self.n_rows):
            if self.rows[i].words != NULL:
                total += self.cap_words * 8
            else:
                total += self.rows[i].ids_cap * 4
        return total

    # -- the hot path ---------------------------------------------------------------------------------
    def explain(self, rows, Py_ssize_t only, excluded, within=None) -> Explanation:
        """Filter the live agents by the rows, then `agentRef` (`only`), then each anti-affinity.

        `within`, when given, is the agent ids the candidates are restricted to (ids that are not
        live are left out): a caller that may only place on some agents of the fleet.

        One ordered difference per predicate gives first-failed sets (docs/design.md, "How one
        placement flows"):
        failed[k] = remaining - row[k]; remaining &= row[k]. The arguments are checked and copied
        first; the word loops then run without the GIL when they are long (GIL_FREE_WORDS), so
        other threads proceed meanwhile, while the index must not change (the fleet's lock sees to
        that)."""
        cdef Py_ssize_t n_rows = len(rows), n_excluded = len(excluded)
        cdef Py_ssize_t n_sets = n_rows + n_excluded + (0 if only == NO_AGENT_REF else 1)
        cdef Py_ssize_t nw = (self.n_ids + 63) >> 6
        cdef Explanation e = new_explanation(self, n_sets, nw)
        # the starting set goes where the eligible set ends up, which the loops start from
        cdef uint64_t* start = e.words + n_sets * nw
        cdef Py_ssize_t aid
        if within is None:
            if nw:      # an empty index has no live words (NULL), and memcpy from NULL is undefined
                memcpy(start, self.live, nw * sizeof(uint64_t))
            e.n_candidates = self.n_live
        else:
            memset(start, 0, nw * sizeof(uint64_t))
            for aid in within:
                # within the words counted above: an item's conversion may run Python code
                if 0 <= aid < self.n_ids and aid < (nw << 6):
                    start[aid >> 6] |= self.live[aid >> 6] & ((<uint64_t>1) << (aid & 63))
            e.n_candidates = popcount_words(start, nw)
        cdef Py_ssize_t* args = <Py_ssize_t*>malloc(max(n_rows + n_excluded, 1) * sizeof(Py_ssize_t))
        if args == NULL:
            raise MemoryError()
        cdef Py_ssize_t k = 0, row_index
        try:
            # each list counted as it is read (an item's conversion may run Python code), and the
            # index held to the size its sets were made for
            for row_index in rows:
                if row_index >= self.n_rows:
                    raise IndexError(f"row {row_index} does not exist")
                if k >= n_rows:
                    raise ValueError("the rows changed while they were read")
                args[k] = row_index
                k += 1
            for row_index in excluded:
                if k >= n_rows + n_excluded:
                    raise ValueError("the excluded ids changed while they were read")
                args[k] = row_index
                k += 1
            if k != n_rows + n_excluded:
                raise ValueError("the rows changed while they were read")
            if (self.n_ids + 63) >> 6 != nw:
                raise RuntimeError("the index changed while an explanation was set up")
            if nw >= GIL_FREE_WORDS:
                with nogil:
                    e.n_eligible = self.explain_words(e.words, nw, args, n_rows, only, args + n_rows,
                                                      n_excluded, e.n_candidates == 0)
            else:
                e.n_eligible = self.explain_words(e.words, nw, args, n_rows, only, args + n_rows,
                                                  n_excluded, e.n_candidates == 0)
        finally:
            free(args)
        return e

    cdef Py_ssize_t explain_words(self, uint64_t* out, Py_ssize_t nw, const Py_ssize_t* rows, Py_ssize_t n_rows,
                                  Py_ssize_t only, const Py_ssize_t* excluded, Py_ssize_t n_excluded,
                                  bint empty) noexcept nogil:
        """The explain loops over words, from the candidates already in the eligible set's place
        (`empty`: there are none); returns the number of eligible agents."""
        cdef Py_ssize_t n_sets = n_rows + n_excluded + (0 if only == C_NO_AGENT_REF else 1)
        cdef uint64_t* remaining = out + n_sets * nw
        cdef uint64_t* failed
        cdef uint64_t* words
        cdef uint64_t r, kept
        cdef Py_ssize_t k = 0, i, j, aid, q, row_index
        cdef Row* row
        for q in range(n_rows):
            row_index = rows[q]
            failed = out + k * nw
            k += 1
            if empty:
                memset(failed, 0, nw * sizeof(uint64_t))
                continue
            if row_index < 0 or self.rows[row_index].count == 0:
                memcpy(failed, remaining, nw * sizeof(uint64_t))
                memset(remaining, 0, nw * sizeof(uint64_t))
                empty = True
                continue
            row = &self.rows[row_index]
            if row.words != NULL:
                words = row.words
                kept = 0
                for i in range(nw):
                    r = remaining[i]
                    failed[i] = r & ~words[i]
                    r &= words[i]
                    remaining[i] = r
                    kept |= r
                empty = kept == 0
            else:
                memcpy(failed, remaining, nw * sizeof(uint64_t))
                memset(remaining, 0, nw * sizeof(uint64_t))
                empty = True
                for j in range(row.count):
                    aid = row.ids[j]
                    r = (<uint64_t>1) << (aid & 63)
                    if failed[aid >> 6] & r:
                        failed[aid >> 6] &= ~r
                        remaining[aid >> 6] |= r
                        empty = False
        if only != C_NO_AGENT_REF:
            failed = out + k * nw
            k += 1
            memcpy(failed, remaining, nw * sizeof(uint64_t))
            memset(remaining, 0, nw * sizeof(uint64_t))
            empty = True
            if 0 <= only < nw * 64:
                r = (<uint64_t>1) << (only & 63)
                if failed[only >> 6] & r:
                    failed[only >> 6] &= ~r
                    remaining[only >> 6] |= r
                    empty = False
        for q in range(n_excluded):
            aid = excluded[q]
            failed = out + k * nw
            k += 1
            memset(failed, 0, nw * sizeof(uint64_t))
            if 0 <= aid < nw * 64:
                r = (<uint64_t>1) << (aid & 63)
                if remaining[aid >> 6] & r:
                    remaining[aid >> 6] &= ~r
                    failed[aid >> 6] |= r
        return popcount_words(remaining, nw)

    def score(self, Explanation expl not None, eval_rows, Py_ssize_t session_row, Py_ssize_t kind,
              weights) -> Scores:
        """Default score components for the eligible agents and the winner (ties: smallest name).

        total = ((w_a*affinity + w_s*success_rate) + w_c*cost) + w_e*substantiated, in that order,
        so that both engines produce the same bits.
        """
        self.own(expl.index, "Explanation")
        cdef double w_a, w_s, w_c, w_e
        w_a, w_s, w_c, w_e = weights
        cdef Py_ssize_t n_eval = len(eval_rows), j
        # the row numbers are read into the rows' slots, each counted against the sequence as it is
        # (an item's conversion may run Python code), before any row's address is taken: code that
        # changed the index would move the rows
        cdef Row** evals = <Row**>malloc(max(n_eval, 1) * sizeof(Row*))
        cdef Py_ssize_t* numbers = <Py_ssize_t*>evals      # a slot holds a number, then the row's address
        cdef Row* session
        cdef Outcomes* outcomes
        cdef bint fixed = type(eval_rows) is tuple       # no conversion can change a tuple's length
        if evals == NULL:
            raise MemoryError()
        try:
            for j in range(n_eval):
                if not fixed and j >= len(eval_rows):
                    raise ValueError("the eval rows changed while they were read")
                numbers[j] = eval_rows[j]
            session = self.row_at(session_row) if session_row >= 0 else NULL
            outcomes = self.kind_at(kind) if kind >= 0 else NULL
            for j in range(n_eval):
                evals[j] = self.row_at(numbers[j]) if numbers[j] >= 0 else NULL
            return self.score_eligible(expl, evals, n_eval, session, outcomes, w_a, w_s, w_c, w_e)
        finally:
            free(evals)

    cdef Scores score_eligible(self, Explanation expl, Row** evals, Py_ssize_t n_eval, Row* session,
                               Outcomes* outcomes, double w_a, double w_s, double w_c, double w_e):
        cdef Scores s = Scores.__new__(Scores)
        cdef Py_ssize_t m = expl.n_eligible
        s.index = self
        s.n = m
        s.best = UNKNOWN
        s.agent_ids = <Py_ssize_t*>malloc(max(m, 1) * sizeof(Py_ssize_t))
        s.columns = <double*>malloc(max(5 * m, 1) * sizeof(double))
        if s.agent_ids == NULL or s.columns == NULL:
            raise MemoryError()
        cdef double* total = s.columns
        cdef double* affinity = s.columns + m
        cdef double* success = s.columns + 2 * m
        cdef double* cost = s.columns + 3 * m
        cdef double* substantiated = s.columns + 4 * m
        cdef const uint64_t* eligible = expl.eligible_words()
        if expl.n_words >= GIL_FREE_WORDS:
            with nogil:
                s.best = self.score_words(eligible, expl.n_words, evals, n_eval, session, outcomes,
                                          w_a, w_s, w_c, w_e, s.agent_ids, total, affinity, success,
                                          cost, substantiated)
        else:
            s.best = self.score_words(eligible, expl.n_words, evals, n_eval, session, outcomes,
                                      w_a, w_s, w_c, w_e, s.agent_ids, total, affinity, success, cost,
                                      substantiated)
        return s

    cdef Py_ssize_t score_words(self, const uint64_t* eligible, Py_ssize_t n_words, Row** evals,
                                Py_ssize_t n_eval, Row* session, Outcomes* outcomes, double w_a,
                                double w_s, double w_c, double w_e, Py_ssize_t* agent_ids,
                                double* total, double* affinity, double* success, double* cost,
                                double* substantiated) noexcept nogil:
        """The score loop over the eligible agents' words; returns the winner (ties: smallest name)."""
        cdef Py_ssize_t i, j = 0, q, aid, slot, held, best = C_UNKNOWN, best_len = 0, n
        cdef double a, sr, c, ev, t, best_total = 0.0
        cdef const char* best_name = NULL
        cdef uint64_t w
        cdef int order
        for i in range(n_words):
            w = eligible[i]
            while w:
                aid = (i << 6) + a3_ctz64(w)
                w &= w - 1
                a = 1.0 if session != NULL and row_has(session, aid) else 0.0
                sr = 0.5
                if outcomes != NULL:
                    slot = outcome_slot(outcomes, aid)
                    if slot >= 0 and outcomes.keys[slot] != 0:
                        sr = <double>(outcomes.successes[slot] + 1) / <double>(outcomes.attempts[slot] + 2)
                c = self.costs[aid]
                if n_eval:
                    held = 0
                    for q in range(n_eval):
                        if evals[q] != NULL and row_has(evals[q], aid):
                            held += 1
                    ev = <double>held / <double>n_eval
                else:
                    ev = 1.0
                t = ((w_a * a + w_s * sr) + w_c * c) + w_e * ev
                agent_ids[j] = aid
                total[j] = t
                affinity[j] = a
                success[j] = sr
                cost[j] = c
                substantiated[j] = ev
                j += 1
                if best == C_UNKNOWN or t > best_total:
                    best, best_total = aid, t
                    best_name, best_len = self.utf8_names[aid], self.utf8_lengths[aid]
                elif t == best_total:
                    # UTF-8 byte order is code point order, the order of Python's str comparison
                    n = self.utf8_lengths[aid]
                    order = memcmp(self.utf8_names[aid], best_name, min(n, best_len))
                    if order < 0 or (order == 0 and n < best_len):
                        best = aid
                        best_name, best_len = self.utf8_names[aid], n
        return best


    def place_batch(self, tasks, weights) -> list:
        """explain + score + choose for a whole batch of prepared tasks, releasing the GIL once.

        Each task is `(explanation, rows, only, excluded, eval_rows, session_row, kind)`, the
        arguments of `explain` and `score` (an `explanation` from an earlier `explain` is scored
        as it is; None: explained here). Returns one `(Explanation, Scores)` per task, in order,
        exactly what `explain` then `score` give one task at a time. Every argument is checked and
        every object made first (a `Wave`); the loops over the whole batch then run without the GIL
        (the index must not change meanwhile: the fleet's lock sees to that). The tasks are
        independent: the scores of one do not see what the fleet does with the winner of another.
        """
        cdef list items = list(tasks)
        cdef Py_ssize_t n = len(items)
        cdef Wave wave = Wave.__new__(Wave, self, n, weights)
        for given, rows, only, excluded, eval_rows, session_row, kind in items:
            wave.add(given, rows, only, excluded, eval_rows, session_row, kind)
        wave.run(0, n)
        return list(zip(wave.explanations, wave.scores))

    cdef bint place_jobs(self, BatchTask* jobs, Py_ssize_t n, Py_ssize_t nw, double w_a, double w_s,
                         double w_c, double w_e) noexcept nogil:
        """The batch's explain and score loops, task after task; True if memory ran out."""
        cdef Py_ssize_t t, m
        cdef BatchTask* job
        cdef Py_ssize_t* ids
        cdef double* columns
        for t in range(n):
            job = &jobs[t]
            if job.explain:
                job.n_eligible[0] = self.explain_words(job.words, nw, job.args, job.n_rows, job.only,
                                                       job.args + job.n_rows, job.n_excluded,
                                                       job.no_candidates)
            m = job.n_eligible[0]
            ids = <Py_ssize_t*>malloc(max(m, 1) * sizeof(Py_ssize_t))
            columns = <double*>malloc(max(5 * m, 1) * sizeof(double))
            job.score_ids[0], job.score_columns[0] = ids, columns   # freed by the Scores
            if ids == NULL or columns == NULL:
                return True
            job.score_n[0] = m
            job.score_best[0] = self.score_words(job.words + job.n_failed * job.nw, job.nw, job.evals, job.n_eval,
                                                 job.session, job.outcomes, w_a, w_s, w_c, w_e, ids,
                                                 columns, columns + m, columns + 2 * m, columns + 3 * m,
                                                 columns + 4 * m)
        return False

    cdef int own(self, Index maker, str what) except -1:
        if maker is not self:
            raise ValueError(f"this {what} was made by another Index")
        return 0

    # -- records --------------------------------------------------------------------------------------
    def candidate_names(self, Explanation expl not None) -> list:
        self.own(expl.index, "Explanation")
        names = self.names
        return [names[i] for i in expl.candidate_ids()]

    def failed_pairs(self, Explanation expl not None, predicates) -> list:
        """§6 filters_failed: grouped by predicate in derivation order, then by agent id."""
        self.own(expl.index, "Explanation")
        cdef list out = []
        cdef list names = self.names
        cdef Py_ssize_t k, i, n = expl.n_words
        cdef uint64_t w
        cdef const uint64_t* words
        if len(predicates) != expl.n_failed:
            raise ValueError(f"{len(predicates)} predicates for {expl.n_failed} failed sets")
        for k in range(expl.n_failed):
            predicate = predicates[k]
            words = expl.failed_words(k)
            for i in range(n):
                w = words[i]
                while w:
                    out.append({"candidate": names[(i << 6) + a3_ctz64(w)], "predicate": predicate})
                    w &= w - 1
        return out

    def score_map(self, Scores scores not None) -> dict:
        self.own(scores.index, "Scores")
        cdef dict out = {}
        cdef Py_ssize_t j, m = scores.n
        cdef double* col = scores.columns
        for j in range(m):
            out[self.names[scores.agent_ids[j]]] = {
                "total": col[j], "affinity": col[m + j], "success_rate": col[2 * m + j],
                "cost": col[3 * m + j], "substantiated": col[4 * m + j]}
        return out

    def write_scheduling(self, Explanation expl not None, Scores scores not None, predicates, requirements_json,
                         declaration_json, tail_json, bytes head not None=b"", bytes foot not None=b"") -> bytes:
        """The §6 scheduling object as JSON bytes, keys in record order; `tail_json` is the
        already-encoded members that follow `scores` (route, timings), without braces. `head` and
        `foot` are written before and after it in the same buffer (a trace line around it).

        Names were quoted when their agents joined; floats are written in their shortest
        round-trip form, so the bytes parse to exactly what the dict form gives.
        """
        self.own(expl.index, "Explanation")
        self.own(scores.index, "Scores")
        bytes_check(requirements_json, "requirements_json")
        bytes_check(declaration_json, "declaration_json")
        bytes_check(tail_json, "tail_json")
        cdef list quoted_predicates = self.quoted_predicates(expl, predicates)
        cdef Buffer* b = &self.out
        b.size = 0
        reserve(b, len(head) + len(requirements_json) + len(declaration_json) + len(tail_json) + len(foot) + 64
                + expl.n_candidates * 48 + scores.n * 160)
        put(b, head, len(head))
        put(b, b'{"requirements":', 16)
        put(b, requirements_json, len(requirements_json))
        put(b, b',"declaration":', 15)
        put(b, declaration_json, len(declaration_json))
        self.write_candidates(b, expl)
        self.write_passed(b, quoted_predicates)
        self.write_failed(b, expl, quoted_predicates)
        self.write_scores(b, scores)
        close_object(b, tail_json, foot)
        return PyBytes_FromStringAndSize(b.data, b.size)

    def write_rejection(self, Explanation expl not None, predicates, reason_json, requirements_json, tail_json,
                        bytes head not None=b"", bytes foot not None=b"") -> bytes:
        """The §6 task.rejected content as JSON bytes, keys in record order: `code`, `reason`,
        `requirements`, `candidates`, `filters_failed`, then `tail_json` (route, session members,
        timings; encoded, without braces). `reason_json` None writes the reason §6 asks for from the
        lists themselves, every candidate named under the predicate it failed first (`reason_among`'s
        text; there must be candidates); otherwise it is the reason's JSON as given. `head` and `foot`
        as for `write_scheduling`. The same bytes as orjson's of the dict form, and as the pure
        engine's."""
        self.own(expl.index, "Explanation")
        if reason_json is None and expl.n_candidates == 0:
            raise ValueError("a rejection among no candidates takes its reason_json")
        if reason_json is not None:
            bytes_check(reason_json, "reason_json")
        bytes_check(requirements_json, "requirements_json")
        bytes_check(tail_json, "tail_json")
        cdef list quoted_predicates = self.quoted_predicates(expl, predicates)
        cdef Buffer* b = &self.out
        b.size = 0
        # the lists name each candidate once more in the reason, and its predicate beside it
        reserve(b, len(head) + len(requirements_json) + len(tail_json) + len(foot) + 128
                + expl.n_candidates * 80)
        put(b, head, len(head))
        put(b, b'{"code":"unschedulable","reason":', 33)
        if reason_json is None:
            self.write_reason(b, expl, quoted_predicates)
        else:
            reserve(b, len(reason_json))
            put(b, reason_json, len(reason_json))
        reserve(b, len(requirements_json) + 16)
        put(b, b',"requirements":', 16)
        put(b, requirements_json, len(requirements_json))
        self.write_candidates(b, expl)
        self.write_failed(b, expl, quoted_predicates)
        close_object(b, tail_json, foot)
        return PyBytes_FromStringAndSize(b.data, b.size)

    cdef list quoted_predicates(self, Explanation expl, predicates):
        # counted as read, not by its len(): a caller's object may say one length and give another
        cdef list out = [quote(p) for p in predicates]
        if len(out) != expl.n_failed:
            raise ValueError(f"{len(out)} predicates for {expl.n_failed} failed sets")
        return out

    cdef int write_reason(self, Buffer* b, Explanation expl, list quoted_predicates) except -1:
        """The reason of a rejection among n ≥ 1 candidates as a JSON string (`reason_among`'s
        text): "no eligible agent among N candidate(s): " and, per predicate that failed someone
        first, "P failed by A, B", joined by "; ". The parts are JSON strings already, so the text's
        escaped form is theirs without their quotes (escaping is character by character)."""
        cdef Py_ssize_t k, i, aid, n = expl.n_words, plen
        cdef const uint64_t* words
        cdef uint64_t w
        cdef bint first_part = True, first_name
        reserve(b, 64)
        put(b, b'"no eligible agent among ', 25)
        b.size += put_decimal(b.data + b.size, <uint64_t>expl.n_candidates)
        if expl.n_candidates != 1:
            put(b, b" candidates: ", 13)
        else:
            put(b, b" candidate: ", 12)
        for k in range(expl.n_failed):
            words = expl.failed_words(k)
            if popcount_words(words, n) == 0:
                continue
            p = quoted_predicates[k]
            plen = PyBytes_GET_SIZE(p) - 2
            reserve(b, plen + 13)
            if not first_part:
                put(b, b"; ", 2)
            first_part = False
            put(b, PyBytes_AS_STRING(p) + 1, plen)
            put(b, b" failed by ", 11)
            first_name = True
            for i in range(n):
                w = words[i]
                while w:
                    aid = (i << 6) + a3_ctz64(w)
                    w &= w - 1
                    reserve(b, self.quoted_lengths[aid])
                    if not first_name:
                        put(b, b", ", 2)
                    first_name = False
                    put(b, self.quoted_names[aid] + 1, self.quoted_lengths[aid] - 2)
        reserve(b, 1)
        put(b, b'"', 1)
        return 0

    def write_compact_lists(self, Explanation expl not None, Scores scores) -> bytes:
        """The compact member's `failed` list and, given the default scorer's `scores`, its
        `scores` object, as JSON members without braces (docs/compact-format.md): each set as
        base64 of its portable Roaring bytes ("" when empty), each score column as base64 of its
        little-endian doubles. The same bytes as the pure engine's (orjson's) form."""
        self.own(expl.index, "Explanation")
        cdef const double* columns = NULL
        cdef Py_ssize_t m = 0, size, scratch_needed = 0
        if scores is not None:
            self.own(scores.index, "Scores")
            columns, m = scores.columns, scores.n
        size = emit_lists(NULL, 0, expl.words, expl.n_words, expl.n_failed, columns, m, NULL, &scratch_needed)
        cdef bytes out = PyBytes_FromStringAndSize(NULL, size)
        cdef char* scratch = <char*>malloc(max(scratch_needed, 1))
        if scratch == NULL:
            raise MemoryError()
        try:
            emit_lists(PyBytes_AS_STRING(out), 0, expl.words, expl.n_words, expl.n_failed, columns, m, scratch,
                       &scratch_needed)
        finally:
            free(scratch)
        return out

    def write_placement_lines(self, Py_ssize_t seq, Explanation expl, Scores scores, scores_json,
                              submitted_json, admitted_json, fleet_json, predicates_json, requirements_json,
                              declaration_json, reason_json, bint derived, tail_json) -> bytes:
        """The trace lines of one placement in compact form, numbered from `seq`
        (docs/compact-format.md): task.submitted, then task.admitted + task.bound when
        `admitted_json` is given, else task.rejected. The large members come from `expl` and the
        default scorer's `scores` (a custom scorer's `scores` object comes as `scores_json`); the
        rest is JSON the caller holds: the submitted and admitted contents, the compact member's
        `fleet` and `filters_passed`, the requirements, the declaration (bound), the reason (a
        rejection whose reason is not `derived`) and the tail members as an object (`route`,
        session members, `timings`). The bytes `Encoder.encode_placement` and `record_lines`
        give, in one call; the same bytes as the pure engine's."""
        cdef LinesJob job
        self.lines_job(&job, seq, expl, scores, scores_json, submitted_json, admitted_json, fleet_json,
                       predicates_json, requirements_json, declaration_json, reason_json, derived, tail_json)
        return write_jobs(&job, 1)

    def write_placement_lines_of(self, Py_ssize_t seq, placement, task, membership, snapshot_seq,
                                 tuple caches):
        """`write_placement_lines` of a Placement on this index in the usual case, its arguments
        gathered here: the lines and how many records they are, or None when the placement is not
        that case, so the caller gathers them itself (`Encoder._line_arguments`); only the caches
        below change.

        The usual case: not resumed, the default scorer, no route, no session member (a session the
        placement left unheld is the tail's first member, `"a3fast.session_held": false`), both phases
        measured (within what `timings_tail` writes), a rejection's reason derived,
        the submitted requirements the matched ones, and the fleet snapshot of the caller's last
        placement still current (the same `membership` count, `snapshot_seq` its record). `task`
        (a dict or None) adds members to task.submitted. `caches` are the caller's JSON texts, each
        followed by the size at which it starts again: per Requirements id, (Requirements,
        (document, predicates)); per id, the prepared Requirements written once (held, so the id
        names that object); per predicates tuple, its JSON; per agent name, task.admitted's
        content. A Requirements neither kept nor noted is written from its document and, when the
        caller prepared it, noted; one noted before is kept; one the placement parsed itself is
        neither, as `Encoder._requirements_json` does. The bytes are `write_placement_lines`'s for the
        arguments the caller would gather; the same as the pure engine's."""
        cdef long long fleet_seq = usual_fleet_seq(membership, snapshot_seq, caches)
        if fleet_seq < 0 or seq > INT64_MAX - 2:     # lines numbered past 2^63-1: the caller's way
            return None
        cdef LinesJob job
        cdef list held = []     # the texts the job points into, each held until it is written
        cdef int count = self.gather_lines_job(&job, seq, placement, task, membership, caches, held)
        if count == 0:
            return None
        # the fleet's snapshot seq in digits on the stack, as b"%d" % snapshot_seq would give them
        cdef char fleet_digits[24]
        job.piece_n[P_FLEET] = put_decimal(fleet_digits, <uint64_t>fleet_seq)
        job.piece[P_FLEET] = fleet_digits
        return write_jobs(&job, 1), count

    def write_placements_lines_of(self, Py_ssize_t seq, list placements, tasks, Py_ssize_t start, membership,
                                  snapshot_seq, tuple caches, bytes prefix not None=b""):
        """`write_placement_lines_of` of the placements from `start` on, numbered from `seq`, in one
        buffer (written without the GIL): the lines of the longest run of usual placements there and
        how many records each wrote, one count a placement (none when `placements[start]` is not
        usual, or when the membership or snapshot are not the caller's last). `tasks` is None or a
        list beside `placements`. The caches change as that many calls of `write_placement_lines_of`
        would change them, so the bytes are theirs, joined. The lines come after `prefix` (lines the
        caller wrote before them) in the same buffer, so that joining them costs no second copy of
        the run's (often megabytes of) lines."""
        if tasks is not None and (type(tasks) is not list or len(<list>tasks) != len(placements)):
            raise ValueError("tasks: expected None or a list beside the placements")
        if start < 0:
            raise ValueError(f"start: expected a position in the placements, found {start}")
        cdef list counts = []
        cdef Py_ssize_t n = len(placements) - start if start < len(placements) else 0
        cdef long long fleet_seq = usual_fleet_seq(membership, snapshot_seq, caches) if n else -1
        if fleet_seq < 0:
            return prefix, counts
        # the jobs grow with the run, which may end at its first placement: a caller that meets
        # many placements the engine does not gather asks again after each, and a block the size of
        # the rest each time would cost the batch the square of its length
        cdef Py_ssize_t room = min(n, 16)
        cdef LinesJob* jobs = <LinesJob*>malloc(room * sizeof(LinesJob))
        cdef LinesJob* grown
        if jobs == NULL:
            raise MemoryError()
        cdef list held = []     # the texts the jobs point into, each held until they are written
        cdef char fleet_digits[24]
        cdef Py_ssize_t fleet_n = put_decimal(fleet_digits, <uint64_t>fleet_seq), k = 0
        cdef int count
        try:
            # the engine numbers a placement's (at most three) lines in a signed 64-bit integer;
            # the lists are measured again each time, since a caller's code that gathering runs (a
            # task member's hash, a subclass's property) may have shortened them
            while k < n and seq <= INT64_MAX - 2 and start + k < len(placements) \
                    and (tasks is None or start + k < len(<list>tasks)):
                if k == room:
                    room = min(n, 2 * room)
                    grown = <LinesJob*>realloc(jobs, room * sizeof(LinesJob))
                    if grown == NULL:
                        raise MemoryError()
                    jobs = grown
                count = self.gather_lines_job(&jobs[k], seq, placements[start + k],
                                              None if tasks is None else (<list>tasks)[start + k],
                                              membership, caches, held)
                if count == 0:
                    break
                jobs[k].piece_n[P_FLEET] = fleet_n
                jobs[k].piece[P_FLEET] = fleet_digits
                counts.append(count)
                k += 1
                if seq > INT64_MAX - 2 - count:
                    break       # the next placement's lines would be numbered past 2^63-1
                seq += count
            return (write_jobs(jobs, k, prefix) if k else prefix), counts
        finally:
            free(jobs)

    cdef int gather_lines_job(self, LinesJob* job, Py_ssize_t seq, p, task, membership, tuple caches,
                              list held) except -1:
        """Fill `job` with placement `p`'s arguments in the usual case (`write_placement_lines_of`),
        every object it points into (but the fleet member's text) appended to `held`; the count of its
        records, or 0 when it is not that case (nothing written, the caches as they were but for
        texts made of values they are keyed on)."""
        # the slots of a Placement read by offset (a few dozen instructions each by name)
        cdef bint direct = placement_class is not None and type(p) is placement_class
        if placement_field(p, S_INDEX, direct) is not self or placement_field(p, S_RESUMED, direct) \
                or placement_field(p, S_CUSTOM_SCORES, direct) or placement_field(p, S_ROUTE, direct) is not None:
            return 0
        requirements = placement_field(p, S_REQUIREMENTS, direct)
        if placement_field(p, S_SUBMITTED, direct) is not requirements:
            return 0
        session = placement_field(p, S_SESSION, direct)
        if session is not None and session != field_of(requirements, requirements_session_item, "session"):
            return 0
        # a session the placement left unheld (remember_session=False) is said before the timings
        cdef bint unheld = session is not None and placement_field(p, S_SESSION_HELD, direct) is False
        placed_membership = placement_field(p, S_MEMBERSHIP, direct)
        if placed_membership is None or placed_membership != membership:
            return 0
        if task is not None and type(task) is not dict:
            return 0
        cdef dict requirements_cache = caches[0], predicates_cache = caches[4], admitted_cache = caches[6]
        cdef dict seen = caches[2]
        cdef int keep = 0
        cdef Explanation expl = placement_field(p, S_EXPLANATION, direct)
        cdef Scores scores = None
        cdef bint bound = placement_field(p, S_AGENT, direct) is not None
        cdef bint derived = False
        admitted_json = declaration_json = None
        if bound:
            scores = placement_field(p, S_SCORES, direct)
            declaration_json = slot(p, S_DECLARATION_JSON) if direct else None
            if declaration_json is None:        # not made yet: the Placement makes it and keeps it
                declaration_json = p.declaration_json
            agent = placement_field(p, S_DECLARATION, direct).agent
            admitted_json = admitted_cache.get(agent)
            if admitted_json is None:
                admitted_json = json_dumps({"agent": agent.to_dict()})
                if len(admitted_cache) >= caches[7]:
                    admitted_cache.clear()
                admitted_cache[agent] = admitted_json
        else:
            # a3fast's own reason is the text the lists give, unless a reason_limit shortened it
            derived = placement_field(p, S_REASON_LIMIT, direct) is None and expl.n_candidates > 0
            if not derived:
                return 0
        tail_json = None
        if direct and slot(p, S_GATHER_NS) is Ellipsis and slot(p, S_SELECT_NS) is Ellipsis:
            tail_json = clock_timings_tail(p)       # the usual case: not resumed (checked above)
        if tail_json is None:
            # a phase set by a caller, or readings this cannot subtract: as the properties give them
            tail_json = timings_tail(p.gather_ns, p.select_ns, placement_field(p, S_DECIDED_AT_NS, direct))
        if tail_json is None:
            return 0
        if unheld:
            tail_json = UNHELD_TAIL_HEAD + (<bytes>tail_json)[1:]
        key = id(requirements)
        hit = requirements_cache.get(key)
        if hit is not None and (<tuple>hit)[0] is requirements:
            requirements_json, predicates_json = (<tuple>hit)[1]
        else:
            predicates = field_of(requirements, requirements_predicates_item, "predicates")
            if type(predicates) is not tuple:
                return 0
            predicates_json = predicates_cache.get(predicates)
            if predicates_json is None:
                predicates_json = json_dumps(predicates)
                if len(predicates_cache) >= caches[5]:
                    predicates_cache.clear()
                predicates_cache[predicates] = predicates_json
            requirements_json = json_dumps(field_of(requirements, requirements_doc_item, "doc"))
            if placement_field(p, S_PREPARED, direct):      # one the placement parsed itself is never placed again
                keep = 2 if seen.get(key) is requirements else 1
        submitted_json = None
        if task:
            submitted = dict(<dict>task)
            submitted["requirements"] = field_of(requirements, requirements_doc_item, "doc")
            submitted_json = json_dumps(submitted)
        if keep == 1:
            # held while noted, so the id names this object (a freed one's is reused at once)
            if len(seen) >= caches[3]:
                seen.clear()
            seen[key] = requirements
        elif keep == 2:
            if len(requirements_cache) >= caches[1]:
                requirements_cache.clear()
            # the object held, so its id is not reused meanwhile
            requirements_cache[key] = (requirements, (requirements_json, predicates_json))
        held.append((expl, scores, submitted_json, admitted_json, predicates_json, requirements_json,
                     declaration_json, tail_json))
        self.lines_job(job, seq, expl, scores, None, requirements_json if submitted_json is None else submitted_json,
                       admitted_json, b"0", predicates_json, requirements_json, declaration_json, None, derived,
                       tail_json)
        if submitted_json is None:
            job.piece[P_SUBMITTED] = NULL       # {"requirements": ...} written around its piece
        return 3 if bound else 2

    cdef int lines_job(self, LinesJob* job, Py_ssize_t seq, Explanation expl, Scores scores, object scores_json,
                       object submitted_json, object admitted_json, object fleet_json, object predicates_json,
                       object requirements_json, object declaration_json, object reason_json, bint derived,
                       object tail_json) except -1:
        """Check one placement's arguments and fill its job (pointers into the arguments)."""
        if expl is None:
            raise TypeError("a placement's lines need its Explanation")
        if seq > INT64_MAX - 2:
            raise OverflowError(SEQ_PAST_INT64 % seq)
        self.own(expl.index, "Explanation")
        bytes_check(submitted_json, "submitted_json")
        bytes_check(fleet_json, "fleet_json")
        bytes_check(predicates_json, "predicates_json")
        bytes_check(requirements_json, "requirements_json")
        bytes_check(tail_json, "tail_json")
        cdef bint bound = admitted_json is not None
        if len(tail_json) < 2:
            raise ValueError("tail_json must be a JSON object")
        if bound:
            bytes_check(admitted_json, "admitted_json")
            bytes_check(declaration_json, "declaration_json")
            if (scores is None) == (scores_json is None):
                raise ValueError("a bound placement's lines take the default scorer's Scores or a scores_json, one of them")
            if scores is not None:
                self.own(scores.index, "Scores")
            else:
                bytes_check(scores_json, "scores_json")
            if derived or reason_json is not None:
                raise ValueError("a bound placement has no reason")
        else:
            if scores is not None or scores_json is not None or declaration_json is not None:
                raise ValueError("a rejection's lines take no scores and no declaration")
            if derived == (reason_json is not None):
                raise ValueError("a rejection's lines take a reason_json unless its reason is derived")
            if reason_json is not None:
                bytes_check(reason_json, "reason_json")
        memset(job, 0, sizeof(LinesJob))
        job.seq = seq
        job.words = expl.words
        job.n_words = expl.n_words
        job.n_failed = expl.n_failed
        if scores is not None:
            job.columns = scores.columns
            job.m = scores.n
        job.bound = bound
        job.derived = derived
        set_piece(job, P_SUBMITTED, submitted_json)
        set_piece(job, P_ADMITTED, admitted_json)
        set_piece(job, P_FLEET, fleet_json)
        set_piece(job, P_PREDICATES, predicates_json)
        set_piece(job, P_REQUIREMENTS, requirements_json)
        set_piece(job, P_DECLARATION, declaration_json)
        set_piece(job, P_REASON, reason_json)
        set_piece(job, P_TAIL, tail_json)
        set_piece(job, P_SCORES, scores_json)
        return 0

    def failed_names(self, Explanation expl not None, Py_ssize_t k, Py_ssize_t limit) -> str:
        """The names of the first `limit` agents (in id order) of failed set `k`, joined by ", "
        (a rejection's reason, §6), in one string built from the names' UTF-8."""
        self.own(expl.index, "Explanation")
        k = expl.failed_index(k)
        cdef const uint64_t* words = expl.failed_words(k)
        cdef Py_ssize_t i, aid, size, written = 0
        cdef const char* raw
        cdef uint64_t w
        cdef Buffer* b = &self.out
        b.size = 0
        for i in range(expl.n_words):
            w = words[i]
            while w and written < limit:
                aid = (i << 6) + a3_ctz64(w)
                w &= w - 1
                raw = PyUnicode_AsUTF8AndSize(self.names[aid], &size)
                reserve(b, size + 2)
                if written:
                    put(b, b", ", 2)
                put(b, raw, size)
                written += 1
            if written >= limit:
                break
        return PyUnicode_DecodeUTF8(b.data, b.size, NULL)

    cdef int write_candidates(self, Buffer* b, Explanation expl) except -1:
        cdef Py_ssize_t i, k, aid, n = expl.n_words
        cdef uint64_t w
        cdef bint first = True
        reserve(b, 16)
        put(b, b',"candidates":[', 15)
        for i in range(n):
            w = 0
            for k in range(expl.n_failed + 1):
                w |= expl.words[k * n + i]
            while w:
                aid = (i << 6) + a3_ctz64(w)
                w &= w - 1
                reserve(b, self.quoted_lengths[aid] + 1)
                if not first:
                    put(b, b",", 1)
                first = False
                put(b, self.quoted_names[aid], self.quoted_lengths[aid])
        reserve(b, 1)
        put(b, b"]", 1)
        return 0

    cdef int write_passed(self, Buffer* b, list quoted_predicates) except -1:
        cdef Py_ssize_t k
        reserve(b, 20)
        put(b, b',"filters_passed":[', 19)
        for k in range(len(quoted_predicates)):
            p = quoted_predicates[k]
            reserve(b, len(p) + 1)
            if k:
                put(b, b",", 1)
            put(b, p, len(p))
        reserve(b, 1)
        put(b, b"]", 1)
        return 0

    cdef int write_failed(self, Buffer* b, Explanation expl, list quoted_predicates) except -1:
        cdef Py_ssize_t k, i, aid, n = expl.n_words, plen
        cdef const char* ptext
        cdef const uint64_t* words
        cdef uint64_t w
        cdef bint first = True
        reserve(b, 20)
        put(b, b',"filters_failed":[', 19)
        for k in range(expl.n_failed):
            p = quoted_predicates[k]
            ptext = PyBytes_AS_STRING(p)
            plen = PyBytes_GET_SIZE(p)
            words = expl.failed_words(k)
            for i in range(n):
                w = words[i]
                while w:
                    aid = (i << 6) + a3_ctz64(w)
                    w &= w - 1
                    reserve(b, self.quoted_lengths[aid] + plen + 28)
                    if not first:
                        put(b, b",", 1)
                    first = False
                    put(b, b'{"candidate":', 13)
                    put(b, self.quoted_names[aid], self.quoted_lengths[aid])
                    put(b, b',"predicate":', 13)
                    put(b, ptext, plen)
                    put(b, b"}", 1)
        reserve(b, 1)
        put(b, b"]", 1)
        return 0

    cdef int write_scores(self, Buffer* b, Scores scores) except -1:
        cdef Py_ssize_t j, aid, m = scores.n
        cdef double* col = scores.columns
        reserve(b, 12)
        put(b, b',"scores":{', 11)
        for j in range(m):
            aid = scores.agent_ids[j]
            # the name, the keys, 5 floats of at most FLOAT_TEXT - 1 characters
            reserve(b, self.quoted_lengths[aid] + 5 * FLOAT_TEXT + 80)
            if j:
                put(b, b",", 1)
            put(b, self.quoted_names[aid], self.quoted_lengths[aid])
            put(b, b':{"total":', 10)
            put_float(b, col[j])
            put(b, b',"affinity":', 12)
            put_float(b, col[m + j])
            put(b, b',"success_rate":', 16)
            put_float(b, col[2 * m + j])
            put(b, b',"cost":', 8)
            put_float(b, col[3 * m + j])
            put(b, b',"substantiated":', 17)
            put_float(b, col[4 * m + j])
            put(b, b"}", 1)
        reserve(b, 1)
        put(b, b"}", 1)
        return 0


# -- a wave of a batch -------------------------------------------------------------------------------
cdef class Wave:
    """A batch's tasks checked and set up for the engine's loops (`Index.place_batch`, and the
    compiled `decide_wave`): each task's arguments copied into two arrays the wave owns, its
    Explanation (when not given) and Scores made. `run` then explains and scores a range of the
    tasks without the GIL, so runs of one wave may go to several threads at once; each writes only
    its own tasks' objects. A run's callable (the bound `run`) keeps the wave, and with it every
    array and object the loops write into, alive until it returns."""

    cdef Index index
    cdef BatchTask* jobs
    cdef Py_ssize_t n, added, nw
    cdef double w_a, w_s, w_c, w_e
    # every task's rows then excluded ids, and its eval rows, one after another; a job keeps its
    # offsets into them until `seal` makes them pointers (the arrays move as they grow)
    cdef Py_ssize_t* args
    cdef Py_ssize_t args_n, args_cap
    cdef Row** evals
    cdef Py_ssize_t evals_n, evals_cap
    cdef bint sealed
    cdef readonly list explanations, scores
    # the index as the jobs' pointers were taken from it: its rows and kinds arrays and its ids
    cdef Row* rows_at
    cdef Outcomes* kinds_at
    cdef Py_ssize_t ids_at

    def __cinit__(self, Index index not None, Py_ssize_t n, weights):
        self.w_a, self.w_s, self.w_c, self.w_e = weights
        self.index = index
        self.n = n
        self.nw = (index.n_ids + 63) >> 6
        self.rows_at, self.kinds_at, self.ids_at = index.rows, index.kinds, index.n_ids
        self.jobs = <BatchTask*>calloc(max(n, 1), sizeof(BatchTask))
        if self.jobs == NULL:
            raise MemoryError()
        self.explanations = []
        self.scores = []

    def __dealloc__(self):
        free(self.jobs)
        free(self.args)
        free(self.evals)

    def __init__(self, *args, **kwargs):
        raise TypeError("Wave objects are made by Index.place_batch and decide_wave")

    cdef Py_ssize_t grow_args(self, Py_ssize_t extra) except -1:
        """Room for `extra` more ids in `args`; the offset they start at."""
        cdef Py_ssize_t at = self.args_n, cap
        cdef Py_ssize_t* grown
        if at + extra > self.args_cap:
            cap = max(2 * self.args_cap, at + extra, 64)
            grown = <Py_ssize_t*>realloc(self.args, cap * sizeof(Py_ssize_t))
            if grown == NULL:
                raise MemoryError()
            self.args, self.args_cap = grown, cap
        self.args_n = at + extra
        return at

    cdef Py_ssize_t grow_evals(self, Py_ssize_t extra) except -1:
        cdef Py_ssize_t at = self.evals_n, cap
        cdef Row** grown
        if at + extra > self.evals_cap:
            cap = max(2 * self.evals_cap, at + extra, 64)
            grown = <Row**>realloc(self.evals, cap * sizeof(Row*))
            if grown == NULL:
                raise MemoryError()
            self.evals, self.evals_cap = grown, cap
        self.evals_n = at + extra
        return at

    cdef int add(self, given, rows, Py_ssize_t only, excluded, eval_rows, Py_ssize_t session_row,
                 Py_ssize_t kind) except -1:
        """The next task: its arguments checked and copied, its Explanation (None given: made
        here, to be explained) and Scores made."""
        cdef Index index = self.index
        if self.added >= self.n or self.sealed:
            raise ValueError(f"a wave of {self.n} tasks has no room for another")
        cdef BatchTask* job = &self.jobs[self.added]
        cdef Explanation e
        cdef Scores s
        cdef Py_ssize_t n_rows, n_excluded, n_sets, n_eval, at, k, j, r, nw = self.nw
        if given is None:
            n_rows, n_excluded = len(rows), len(excluded)
            n_sets = n_rows + n_excluded + (0 if only == NO_AGENT_REF else 1)
            e = new_explanation(index, n_sets, nw)
            if nw:  # an empty index has no live words (NULL)
                memcpy(e.words + n_sets * nw, index.live, nw * sizeof(uint64_t))
            e.n_candidates = index.n_live
            at = self.grow_args(n_rows + n_excluded)
            k = at
            # each list counted as it is read: an item's conversion may run Python code
            for r in rows:
                if r >= index.n_rows:
                    raise IndexError(f"row {r} does not exist")
                if k >= at + n_rows:
                    raise ValueError("the rows changed while they were read")
                self.args[k] = r
                k += 1
            for r in excluded:
                if k >= at + n_rows + n_excluded:
                    raise ValueError("the excluded ids changed while they were read")
                self.args[k] = r
                k += 1
            if k != at + n_rows + n_excluded:
                raise ValueError("the rows changed while they were read")
            job.args_at = at
            job.n_rows, job.n_excluded, job.only, job.explain = n_rows, n_excluded, only, True
        else:
            e = given
            index.own(e.index, "Explanation")
            # one made before agents joined has fewer words, read as they are (its agents are all
            # below them); one with more than the index has words no agent id reaches
            if e.n_words > nw:
                raise ValueError(f"an Explanation of {e.n_words} words per set, for an index of {nw}")
        job.words, job.nw, job.n_failed, job.n_eligible = e.words, e.n_words, e.n_failed, &e.n_eligible
        job.no_candidates = e.n_candidates == 0
        n_eval = len(eval_rows)
        at = self.grow_evals(n_eval)
        for j in range(n_eval):
            if j >= len(eval_rows):     # shrunk by an item's conversion (Python code)
                raise ValueError("the eval rows changed while they were read")
            r = eval_rows[j]
            self.evals[at + j] = index.row_at(r) if r >= 0 else NULL
        job.evals_at = at
        job.n_eval = n_eval
        job.session = index.row_at(session_row) if session_row >= 0 else NULL
        job.outcomes = index.kind_at(kind) if kind >= 0 else NULL
        s = Scores.__new__(Scores)
        s.index = index
        s.best = UNKNOWN
        job.score_ids, job.score_columns = &s.agent_ids, &s.columns
        job.score_n, job.score_best = &s.n, &s.best
        self.explanations.append(e)
        self.scores.append(s)
        self.added += 1
        return 0

    cdef int check_index(self) except -1:
        """RuntimeError unless the index is as the jobs' pointers were taken from it. Setting up a
        wave runs Python code between its tasks (a caller's object hashed or compared while a
        task's rows are found), and code that changes the fleet there (from the same thread: its
        lock is re-entrant) may move the rows or add agents the wave's sets have no room for."""
        if (self.index.rows != self.rows_at or self.index.kinds != self.kinds_at
                or self.index.n_ids != self.ids_at):
            raise RuntimeError(fleet_changed_text)
        return 0

    cdef int seal(self) except -1:
        """Every task added: the jobs' offsets into the arrays become pointers (which no longer move)."""
        cdef Py_ssize_t t
        if self.added != self.n:
            raise ValueError(f"a wave of {self.n} tasks was given {self.added}")
        self.check_index()
        if not self.sealed:
            # (an array nothing was put in is NULL, which takes no offset, not even 0)
            for t in range(self.n):
                if self.evals != NULL:
                    self.jobs[t].evals = self.evals + self.jobs[t].evals_at
                if self.jobs[t].explain and self.args != NULL:
                    self.jobs[t].args = self.args + self.jobs[t].args_at
            self.sealed = True
        return 0

    def run(self, Py_ssize_t start, Py_ssize_t stop) -> None:
        """Explain and score tasks `start` to `stop` (not included), without the GIL."""
        self.seal()
        self.check_index()
        if start < 0 or stop > self.n or start > stop:
            raise IndexError(f"tasks {start} to {stop} of a wave of {self.n}")
        cdef bint failed
        with nogil:
            failed = self.index.place_jobs(self.jobs + start, stop - start, self.nw, self.w_a, self.w_s,
                                           self.w_c, self.w_e)
        if failed:
            raise MemoryError()


# -- the processor's instructions the writer uses, for tests -----------------------------------------
def uses_processor_extensions() -> bool:
    """Whether popcnt and the SSSE3 base64 blocks (and AVX2's, where the processor has it) are in
    use: False on other processors, and with A3FAST_CPU=portable."""
    return a3_cpu_extensions() != 0


def base64_of(const unsigned char[::1] data not None) -> bytes:
    """`data` in standard base64 with padding, by the compact writer's own encoder (AVX2 or SSSE3
    blocks where the processor has them, then the scalar steps): what tests hold to the standard's."""
    cdef Py_ssize_t n = data.shape[0]
    cdef bytes out = PyBytes_FromStringAndSize(NULL, b64_size(n))
    if n:
        b64_into(PyBytes_AS_STRING(out), &data[0], n)
    return out


# -- names offered by a caller, resolved in one call (the Kubernetes extender's NodeNames) --------
def split_members(list names not None, members not None) -> tuple:
    """`names` split into those in `members` (a set, frozenset or dict) and the rest, each in the
    order given."""
    cdef list inside = [], outside = []
    cdef object name
    for name in names:
        if name in members:
            inside.append(name)
        else:
            outside.append(name)
    return inside, outside


def live_ids_of(dict ids not None, list entries not None, names) -> list:
    """The ids of the named agents that are live (a name with an id whose entry is not None),
    ascending and once each; other names, and items that are not strings, are left out."""
    cdef Py_ssize_t n = len(entries), aid, i
    cdef unsigned char* seen
    cdef list out = []
    cdef object name, found
    if n == 0:
        return out
    seen = <unsigned char*>calloc(n, 1)
    if seen == NULL:
        raise MemoryError()
    try:
        for name in names:
            if type(name) is not str and not isinstance(name, str):
                continue
            found = ids.get(name)
            if found is None:
                continue
            aid = found
            if 0 <= aid < n and entries[aid] is not None:
                seen[aid] = 1
        for i in range(n):
            if seen[i]:
                out.append(i)
    finally:
        free(seen)
    return out


def first_failed_into(Index index not None, Explanation expl not None, predicates, dict out not None) -> None:
    """Each ineligible candidate's name -> the first predicate it failed, added to `out` in the
    order of `Index.failed_pairs` (by predicate in derivation order, then by agent id)."""
    index.own(expl.index, "Explanation")
    cdef list names = index.names
    cdef Py_ssize_t k, i, n = expl.n_words
    cdef uint64_t w
    cdef const uint64_t* words
    if len(predicates) != expl.n_failed:
        raise ValueError(f"{len(predicates)} predicates for {expl.n_failed} failed sets")
    for k in range(expl.n_failed):
        predicate = predicates[k]
        words = expl.failed_words(k)
        for i in range(n):
            w = words[i]
            while w:
                out[names[(i << 6) + a3_ctz64(w)]] = predicate
                w &= w - 1


# -- a task's predicates resolved to the engine's arguments (a3fast.fleet.rows) -------------------
def resolve_predicates(tuple predicates not None, dict rows not None, dict eval_rows not None,
                       dict ids not None, Py_ssize_t no_agent_ref) -> tuple:
    """A task's predicates as `Index.explain`'s and `Index.score`'s arguments: the filter rows in
    derivation order (-1 for a predicate no agent satisfies), the agentRef's id (`no_agent_ref`
    when the task names none, -1 for a name not in the fleet), the anti-affinity ids (-1 likewise),
    and for each required capability the row of agents that substantiate it (-1: none)."""
    cdef list filter_rows = [], excluded = [], substantiated = []
    cdef object only = no_agent_ref, row, found
    cdef str p
    for p in predicates:
        # most predicates name an interned row: look it up before classifying the string
        row = rows.get(p)
        if row is not None:
            filter_rows.append(row)
            if starts_with(p, "capability:", b"capability:", 11):
                found = eval_rows.get(p)
                substantiated.append(found if found is not None else -1)
        elif starts_with(p, "anti-affinity:", b"anti-affinity:", 14):
            found = ids.get(p[14:])
            excluded.append(found if found is not None else -1)
        elif starts_with(p, "agentRef:", b"agentRef:", 9):
            found = ids.get(p[9:])
            only = found if found is not None else -1
        else:   # a predicate no agent satisfies
            filter_rows.append(-1)
            if starts_with(p, "capability:", b"capability:", 11):
                substantiated.append(-1)
    # row ids only, never changed after: out of the collector's passes, and so is their tuple
    return untracked_if_acyclic((untracked_if_acyclic(filter_rows), only, untracked_if_acyclic(excluded),
                                 untracked_if_acyclic(substantiated)))


cdef inline bint starts_with(str text, str prefix, const char* ascii, Py_ssize_t n) except -1:
    """`text.startswith(prefix)` for an ASCII `prefix` (`ascii`, `n` bytes): a string of one byte
    a character holds the prefix's bytes as they are; a wider one asks `startswith`."""
    if PyUnicode_KIND(text) != 1:
        return text.startswith(prefix)
    return len(text) >= n and memcmp(PyUnicode_DATA(text), ascii, n) == 0



# -- the placing stages' per-task steps, on a Placement's slots (a3fast.fleet.pipeline) -----------
# `prepare`, `gather`, `decide_one`, `decide_wave`, `build_placement` and
# `build_decided` as the pipeline writes them in Python (`LocalStages._gather` and so on), with the
# fleet's cache rules they call (`PredicateRows.resolve_cached` and `remember`, `seen.seen_before`),
# for the native engine's fleets:
# the same fields with the same values, each stored straight into the Placement's slot (the offset
# its member descriptor gives) rather than through a bytecode each, where compiling the Python as
# it is only added instructions (docs/performance.md, "The stage steps compiled"). The Python steps
# stay the pure engine's; tests/fleet/test_stage_steps.py and the parity suites hold both.

from cpython.ref cimport PyObject
from cpython.tuple cimport PyTuple_GET_ITEM

cdef extern from *:
    """
    #include "structmember.h"
    #include <time.h>
    /* The offset of a writable object slot's storage in the instances of `owner`, from the slot's
       member descriptor (what __slots__ makes) when `owner` made it; -1 for anything else. */
    static Py_ssize_t a3_slot_offset(PyObject* descr, PyObject* owner) {
        PyMemberDef* member;
        if (descr == NULL || Py_TYPE(descr) != &PyMemberDescr_Type) return -1;
        if (PyDescr_TYPE(descr) != (PyTypeObject*)owner) return -1;
        member = ((PyMemberDescrObject*)descr)->d_member;
        if (member->type != T_OBJECT_EX || (member->flags & READONLY)) return -1;
        return member->offset;
    }
    /* A slot's value (borrowed), NULL while unset. */
    static inline PyObject* a3_slot(PyObject* o, Py_ssize_t offset) {
        return *(PyObject**)((char*)o + offset);
    }
    /* A slot set, as a member descriptor's __set__ does: the new value held, then the old let go
       (last: letting it go may run any code). */
    static inline void a3_set_slot(PyObject* o, Py_ssize_t offset, PyObject* value) {
        PyObject** at = (PyObject**)((char*)o + offset);
        PyObject* old = *at;
        Py_INCREF(value);
        *at = value;
        Py_XDECREF(old);
    }
    /* A new, empty instance, as object.__new__(cls) makes one. */
    static inline PyObject* a3_new_instance(PyObject* cls) {
        return ((PyTypeObject*)cls)->tp_alloc((PyTypeObject*)cls, 0);
    }
    /* time.perf_counter_ns() and time.time_ns() read CLOCK_MONOTONIC and CLOCK_REALTIME on Linux;
       elsewhere (macOS's perf_counter is mach_absolute_time, Windows has no clock_gettime) the
       steps call the time module's own functions (A3_OWN_CLOCKS 0). */
    #if defined(__linux__)
    #define A3_OWN_CLOCKS 1
    static inline long long a3_clock_ns(int realtime) {
        struct timespec ts;
        clock_gettime(realtime ? CLOCK_REALTIME : CLOCK_MONOTONIC, &ts);
        return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
    }
    #else
    #define A3_OWN_CLOCKS 0
    static inline long long a3_clock_ns(int realtime) { return 0; }
    #endif
    """
    Py_ssize_t a3_slot_offset(PyObject* descr, object owner)
    PyObject* a3_slot(object o, Py_ssize_t offset)
    void a3_set_slot(object o, Py_ssize_t offset, object value)
    object a3_new_instance(object cls)
    long long a3_clock_ns(int realtime)
    bint A3_OWN_CLOCKS

import time as _time
from cpython.dict cimport PyDict_GetItem
from cpython.tuple cimport PyTuple_GET_SIZE

cdef object perf_counter_ns = _time.perf_counter_ns, time_ns = _time.time_ns


cdef inline object clock_ns(bint realtime):
    """time.time_ns() (realtime) or time.perf_counter_ns(), read as the time module reads them."""
    if A3_OWN_CLOCKS:
        return a3_clock_ns(realtime)
    return time_ns() if realtime else perf_counter_ns()

cdef enum:
    S_STARTED, S_SUBMITTED, S_REQUIREMENTS, S_PREPARED, S_ROUTE, S_SESSION, S_KIND, S_REASON_LIMIT
    S_SCORER, S_WITHIN, S_MEMBERSHIP, S_RESUMED, S_RECORDED_IN
    S_FLEET_ENGINE, S_INDEX, S_CUSTOM_SCORES, S_SCORES, S_DECLARATION, S_DECLARATION_JSON, S_FLEET
    S_AGENT
    S_GATHERED, S_SELECTED, S_GATHER_NS, S_SELECT_NS, S_DECIDED_AT_NS, S_GENERATION, S_SEQ
    S_SESSION_HELD, S_SCHEDULING, S_EVAL_ROWS, S_EXPLANATION, S_BEST
    N_SLOTS

#: The Placement slots the steps read and write, in the order of the S_ constants.
STEP_SLOTS = ("started", "submitted", "requirements", "prepared", "route", "session", "kind",
              "reason_limit", "scorer", "within", "membership", "resumed", "recorded_in",
              "fleet_engine", "index", "custom_scores", "scores", "declaration", "_declaration_json",
              "_fleet", "agent", "gathered", "selected", "_gather_ns", "_select_ns", "decided_at_ns", "generation",
              "seq", "session_held", "_scheduling", "eval_rows", "explanation", "best")
cdef Py_ssize_t slot_offset[N_SLOTS]
cdef object placement_class = None, custom_scores_class = None, requirements_class = None
cdef object parse_requirements_of = None, check_reason_limit_of = None, task_kind_of = None
#: the schema's reader of plain requirements dicts (None: every dict goes through parse_requirements)
cdef object read_requirements_of = None
#: the Declaration class (an agent table entry of this type is its parsed declaration)
cdef object declaration_class = None
#: a3fast.fleet.rows's globals: its cache limits, read each time they are used, as its methods do
cdef dict rows_globals = None
#: the words a wave is refused in when the fleet changed while it was set up (the pipeline's, once bound)
cdef object fleet_changed_text = "the fleet changed while a batch of placements was being set up: nothing was placed"
#: `pipeline.check_predicates`, which raises in its words for predicates that are no tuple of `str`
cdef object check_predicates_of = None
#: `pipeline.drive`, which `place_one` hands what it does not place itself
cdef object drive_of = None
#: pipeline.Resumption: a batch's task of this type is prepared by the stages' own prepare_resumption
cdef object resumption_class = None
cdef Py_ssize_t requirements_session_item = -1, requirements_predicates_item = -1, requirements_doc_item = -1


cdef int slot_offsets(object cls, tuple names, Py_ssize_t* out) except -1:
    """Each of `names`' offset in the instances of `cls`; TypeError unless each is a plain writable
    slot `cls` defines itself."""
    if not isinstance(cls, type):
        raise TypeError(f"expected a class, found {type(cls).__name__}")
    cdef dict namespace = dict(cls.__dict__)
    cdef Py_ssize_t k
    for k in range(len(names)):
        out[k] = a3_slot_offset(PyDict_GetItem(namespace, names[k]), cls)
        if out[k] < 0:
            raise TypeError(f"{cls.__name__}.{names[k]} is not a writable slot of its own")
    return 0


def bind_placement(placement, custom_scores, requirements, parse_requirements, check_reason_limit,
                   task_kind, read_requirements=None, declaration=None, rows_namespace=None,
                   drive=None, resumption=None, fleet_changed=None, check_predicates=None) -> None:
    """The classes and checks the steps work with: `placement` (the Placement class, whose slots
    STEP_SLOTS name), `custom_scores` (a caller's scores), `requirements` (the Requirements named
    tuple, its `session`, `predicates` and `doc` read by position) and the pipeline's own
    `parse_requirements`, `check_reason_limit` and `task_kind`; `read_requirements`, the schema's
    reader of plain dicts (`parse_requirements` without its Python frame: a Requirements, or None
    for what `parse_requirements` must read itself); `declaration`, the Declaration class; and
    `rows_namespace`, the globals of a3fast.fleet.rows, whose cache limits `resolve_cached` and
    `remember` read; `drive`, the pipeline's driver, which `place_one` hands the cases it does
    not place itself; and `resumption`, the Resumption class, whose tasks `prepare_each` leaves to
    the stages' `prepare_resumption`; `fleet_changed`, the words `decide_wave` refuses a batch in
    when the fleet changed while it was set up (the pipeline's own); `check_predicates`, the pipeline's check of a
    Requirements' predicates, called for its refusal of those that are no tuple of `str`. TypeError if a slot is not a
    plain writable one (then nothing is bound)."""
    global placement_class, custom_scores_class, requirements_class, parse_requirements_of
    global check_reason_limit_of, task_kind_of, requirements_session_item, requirements_predicates_item
    global requirements_doc_item, read_requirements_of, declaration_class, rows_globals, drive_of
    global resumption_class, fleet_changed_text, check_predicates_of
    cdef Py_ssize_t offsets[N_SLOTS]
    cdef int k
    # every check and lookup first: a refused binding leaves the one before it whole
    if not isinstance(placement, type):
        raise TypeError(f"placement: expected a class, found {type(placement).__name__}")
    slot_offsets(placement, STEP_SLOTS, offsets)
    if not (isinstance(requirements, type) and issubclass(requirements, tuple)):
        raise TypeError("requirements: expected a named tuple class")
    fields = getattr(requirements, "_fields", None)
    if type(fields) is not tuple or "session" not in fields or "predicates" not in fields or "doc" not in fields:
        raise TypeError("requirements: expected a named tuple class with 'session', 'predicates' and 'doc'")
    session_item, predicates_item, doc_item = fields.index("session"), fields.index("predicates"), fields.index("doc")
    if declaration is not None and not isinstance(declaration, type):
        raise TypeError(f"declaration: expected a class, found {type(declaration).__name__}")
    if resumption is not None and not isinstance(resumption, type):
        raise TypeError(f"resumption: expected a class, found {type(resumption).__name__}")
    if rows_namespace is not None and type(rows_namespace) is not dict:
        raise TypeError(f"rows_namespace: expected a module's globals (a dict), found {type(rows_namespace).__name__}")
    for k in range(N_SLOTS):
        slot_offset[k] = offsets[k]
    requirements_session_item, requirements_predicates_item = session_item, predicates_item
    requirements_doc_item = doc_item
    placement_class, custom_scores_class, requirements_class = placement, custom_scores, requirements
    parse_requirements_of, check_reason_limit_of, task_kind_of = parse_requirements, check_reason_limit, task_kind
    read_requirements_of, declaration_class, rows_globals = read_requirements, declaration, rows_namespace
    drive_of = drive
    # the pipeline's own check, kept from an earlier binding when not given
    if check_predicates is not None:
        check_predicates_of = check_predicates
    resumption_class = resumption
    if fleet_changed is not None:
        fleet_changed_text = fleet_changed


cdef inline object slot(object state, int k):
    cdef PyObject* value = a3_slot(state, slot_offset[k])
    if value == NULL:
        raise AttributeError(f"'{type(state).__name__}' object has no attribute '{STEP_SLOTS[k]}'")
    return <object>value


cdef inline object placement_field(object p, int k, bint direct):
    """A Placement's field: its slot read by offset when `direct` (`p`'s type is the bound Placement
    class itself), else by name (another class, or a subclass that may define it otherwise)."""
    if direct:
        return slot(p, k)
    return getattr(p, STEP_SLOTS[k])


cdef inline void set_slot(object state, int k, object value) noexcept:
    a3_set_slot(state, slot_offset[k], value)


cdef inline object field_of(object requirements, Py_ssize_t item, str name):
    """A Requirements field, read by position from the named tuple itself (by name from a subclass,
    which may define it otherwise)."""
    if type(requirements) is requirements_class and PyTuple_GET_SIZE(requirements) > item:
        return <object>PyTuple_GET_ITEM(requirements, item)
    return getattr(requirements, name)


# The fields the steps read of the fleet's own holders — its stages (LocalStages), its caches and
# rows (PredicateRows) and its agent table (AgentTable) — by the offset of their slots, as a
# Placement's are: through Cython's generic attribute lookup they were some twenty lookups of about
# a hundred instructions a placement. Read by name from any other class (a subclass included).
cdef enum:
    H_FLEET, H_TABLE, H_ROWS, H_INDEX, H_ENGINE
    N_STAGES_HELD
cdef enum:
    R_ROWS, R_EVAL_ROWS, R_SESSION_ROWS, R_KINDS, R_TABLE, R_RESOLVED, R_RESOLVED_ONCE, R_EXPLAINED
    R_EXPLAINED_ONCE, R_RESOLVE_PREDICATES, R_NO_AGENT_REF
    N_ROWS_HELD
cdef enum:
    T_IDS, T_ENTRIES, T_DECL_JSON, T_COUNT
    N_TABLE_HELD

#: The slots the steps read of LocalStages, PredicateRows and AgentTable, in the order of the H_, R_
#: and T_ constants.
STAGES_HELD = ("fleet", "table", "rows", "index", "engine")
ROWS_HELD = ("rows", "eval_rows", "session_rows", "kinds", "table", "resolved", "resolved_once", "explained",
             "explained_once", "resolve_predicates", "no_agent_ref")
TABLE_HELD = ("ids", "entries", "decl_json", "count")
cdef Py_ssize_t stages_offset[N_STAGES_HELD]
cdef Py_ssize_t rows_offset[N_ROWS_HELD]
cdef Py_ssize_t table_offset[N_TABLE_HELD]
cdef object stages_class = None, rows_class = None, table_class = None


def bind_holders(stages, rows, table) -> None:
    """The classes whose slots the steps read by offset: `stages` (LocalStages: STAGES_HELD), `rows`
    (PredicateRows: ROWS_HELD) and `table` (AgentTable: TABLE_HELD). TypeError if a slot is not a
    plain writable one of the class's own (then nothing is bound, and each is read by name)."""
    global stages_class, rows_class, table_class
    cdef Py_ssize_t s_off[N_STAGES_HELD]
    cdef Py_ssize_t r_off[N_ROWS_HELD]
    cdef Py_ssize_t t_off[N_TABLE_HELD]
    slot_offsets(stages, STAGES_HELD, s_off)
    slot_offsets(rows, ROWS_HELD, r_off)
    slot_offsets(table, TABLE_HELD, t_off)
    memcpy(stages_offset, s_off, sizeof(s_off))
    memcpy(rows_offset, r_off, sizeof(r_off))
    memcpy(table_offset, t_off, sizeof(t_off))
    stages_class, rows_class, table_class = stages, rows, table


# The names as C globals: read from the module's namespace on every call, they cost more than the
# offsets save.
cdef tuple stages_held = STAGES_HELD, rows_held = ROWS_HELD, table_held = TABLE_HELD


cdef inline object held(object holder, object cls, Py_ssize_t offset, tuple names, int k):
    """A holder's field: by offset when the holder's type is the bound class `cls` itself and the
    slot is set, else by name (which raises the AttributeError of an unset slot)."""
    cdef PyObject* value
    if type(holder) is cls and cls is not None:
        value = a3_slot(holder, offset)
        if value != NULL:
            return <object>value
    return getattr(holder, names[k])


cdef inline object stages_field(object stages, int k):
    return held(stages, stages_class, stages_offset[k], stages_held, k)


cdef inline object rows_field(object rows, int k):
    return held(rows, rows_class, rows_offset[k], rows_held, k)


cdef inline object table_field(object table, int k):
    return held(table, table_class, table_offset[k], table_held, k)


@cython.boundscheck(True)
@cython.wraparound(True)
def prepare(requirements, session, route, reason_limit=None, kind=None, scorer=None):
    """`pipeline.prepare`: the task parsed once (a Requirements is taken as it is), the route
    applied, the session resolved, and the task's Placement made."""
    return prepare_task(requirements, session, route, reason_limit, kind, scorer)


@cython.boundscheck(True)
@cython.wraparound(True)
def prepare_each(stages, tasks, sessions, route, reason_limit, kind, scorer):
    """`pipeline.LocalStages._prepare_each` of `stages` (a LocalStages): `prepare` of each task
    beside its session, in order (as far as the shorter of the two goes, as `zip` does), and the
    stages' own `prepare_resumption` for a resumption."""
    cdef list states = []
    if type(tasks) is not list and type(tasks) is not tuple:
        tasks = list(tasks)
    if type(sessions) is not list and type(sessions) is not tuple:
        sessions = list(sessions)
    cdef Py_ssize_t i, n = min(len(tasks), len(sessions))
    for i in range(n):
        task = tasks[i]
        if type(task) is resumption_class and resumption_class is not None:
            states.append(stages.prepare_resumption(task))
        else:
            states.append(prepare_task(task, sessions[i], route, reason_limit, kind, scorer))
    return states


@cython.boundscheck(True)
@cython.wraparound(True)
cdef object prepare_task(requirements, session, route, reason_limit, kind, scorer):
    """`prepare`'s work."""
    if placement_class is None:
        raise RuntimeError("bind_placement has not been called")
    started = clock_ns(False)
    if reason_limit is not None:
        check_reason_limit_of(reason_limit)
    cdef object submitted = None
    if type(requirements) is requirements_class:
        submitted = requirements
    elif type(requirements) is dict and read_requirements_of is not None:
        submitted = read_requirements_of(requirements, False)
    if submitted is None:
        submitted = parse_requirements_of(requirements)
    matched = route.apply(submitted) if route is not None else submitted
    state = a3_new_instance(placement_class)
    set_slot(state, S_STARTED, started)
    set_slot(state, S_SUBMITTED, submitted)
    set_slot(state, S_REQUIREMENTS, matched)
    set_slot(state, S_PREPARED, matched is requirements)
    set_slot(state, S_ROUTE, route.name if route is not None else None)
    if session is None:
        session = field_of(matched, requirements_session_item, "session")
    set_slot(state, S_SESSION, session)
    set_slot(state, S_KIND, kind)
    set_slot(state, S_REASON_LIMIT, reason_limit)
    set_slot(state, S_SCORER, scorer)
    set_slot(state, S_WITHIN, None)
    set_slot(state, S_MEMBERSHIP, None)
    set_slot(state, S_RESUMED, False)
    set_slot(state, S_RECORDED_IN, None)
    return state


cdef object resolve_cached(rows, matched, predicates, Py_hash_t predicates_hash):
    """`PredicateRows.resolve_cached` of `rows`, compiled: the same entries kept and noted, the
    same engine call (`rows.resolve_predicates`) when there is none. `predicates` are `matched`'s,
    `predicates_hash` their hash."""
    if rows_globals is None:
        return rows.resolve_cached(matched)
    cdef dict predicate_rows = rows_field(rows, R_ROWS), eval_rows = rows_field(rows, R_EVAL_ROWS)
    cdef dict ids = table_field(rows_field(rows, R_TABLE), T_IDS)
    stamp = len(predicate_rows) + len(eval_rows) + len(ids)
    cdef dict cache = rows_field(rows, R_RESOLVED)
    entry = dict_get_hashed(cache, predicates, predicates_hash)
    if entry is not None and entry[0] == stamp:
        return entry[1]
    resolved = rows_field(rows, R_RESOLVE_PREDICATES)(predicates, predicate_rows, eval_rows, ids,
                                                      rows_field(rows, R_NO_AGENT_REF))
    if entry is None and not note_in(rows_field(rows, R_RESOLVED_ONCE), predicates_hash,
                                         rows_globals["NOTED_ONCE_LIMIT"]):
        return resolved
    if len(cache) >= rows_globals["RESOLVED_CACHE_SIZE"]:
        cache.clear()
    dict_set_hashed(cache, predicates, untracked_if_acyclic((stamp, resolved)), predicates_hash)
    return resolved


cdef int remember(rows, predicates, Py_hash_t predicates_hash, membership, expl, eval_rows) except -1:
    """`PredicateRows.remember` of `rows`, compiled: the explanation kept from the second time its
    predicate set is explained, the first only noted. `predicates_hash` is the set's hash."""
    if rows_globals is None:
        rows.remember(predicates, membership, expl, eval_rows)
        return 0
    if not note_in(rows_field(rows, R_EXPLAINED_ONCE), predicates_hash, rows_globals["NOTED_ONCE_LIMIT"]):
        return 0
    cdef dict cache = rows_field(rows, R_EXPLAINED)
    # sized by the id space (every agent ever added), as an explanation's sets are
    if len(cache) * max(len(table_field(rows_field(rows, R_TABLE), T_ENTRIES)), 1) >= rows_globals["EXPLAINED_CACHE_BUDGET"]:
        cache.clear()
    dict_set_hashed(cache, predicates, untracked_if_acyclic((membership, expl, eval_rows)), predicates_hash)
    return 0


def gather(stages, state, membership):
    """`pipeline.LocalStages._gather` of `stages` (a LocalStages) for a prepared Placement: the
    explanation kept for its predicates against the same membership, or the engine's arguments
    for making it (see there)."""
    cdef Py_hash_t predicates_hash
    return gather_state(stages, state, membership, &predicates_hash)


cdef inline bint strings_only(object predicates) noexcept:
    """Whether `predicates` is a tuple of exact `str` (`pipeline.check_predicates`'s rule)."""
    cdef Py_ssize_t k
    if type(predicates) is not tuple:
        return False
    for k in range(PyTuple_GET_SIZE(predicates)):
        if type(<object>PyTuple_GET_ITEM(predicates, k)) is not str:
            return False
    return True


@cython.boundscheck(True)
@cython.wraparound(True)
cdef tuple gather_state(stages, state, membership, Py_hash_t* predicates_hash):
    """`gather`'s body, which `decide_one` and `decide_wave` call without a Python call; the hash
    of the task's predicate set into `predicates_hash`, for keeping a fresh explanation
    (`remember`): the set is hashed once for every cache it is looked up, noted or kept in."""
    if type(state) is not placement_class or placement_class is None:
        raise TypeError(f"gather: expected a Placement, found {type(state).__name__}")
    rows = stages_field(stages, H_ROWS)
    matched = slot(state, S_REQUIREMENTS)
    predicates = field_of(matched, requirements_predicates_item, "predicates")
    if not strings_only(predicates):
        if check_predicates_of is not None:
            check_predicates_of(predicates)     # raises, in the pipeline's words
        raise TypeError("requirements.predicates: expected a tuple of strings")
    predicates_hash[0] = PyObject_Hash(predicates)
    within = slot(state, S_WITHIN)
    set_slot(state, S_MEMBERSHIP, membership if within is None else None)
    cdef bint needs_kind = slot(state, S_KIND) is None and bool(rows_field(rows, R_KINDS) or slot(state, S_SCORER))
    cdef object cached = None
    cdef dict explained
    if within is None:
        explained = rows_field(rows, R_EXPLAINED)
        cached = dict_get_hashed(explained, predicates, predicates_hash[0])
    if cached is not None and cached[0] == membership:
        set_slot(state, S_EVAL_ROWS, cached[2])
        if needs_kind:
            set_slot(state, S_KIND, task_kind_of(matched))
        set_slot(state, S_GATHERED, clock_ns(False))
        return cached[1], (), 0, ()
    resolved = resolve_cached(rows, matched, predicates, predicates_hash[0])
    ids, only, excluded, eval_rows = resolved
    set_slot(state, S_EVAL_ROWS, eval_rows)
    if needs_kind:
        set_slot(state, S_KIND, task_kind_of(matched))
    set_slot(state, S_GATHERED, clock_ns(False))
    if within is not None:
        return stages_field(stages, H_INDEX).explain(ids, only, excluded, within), (), 0, ()
    return None, ids, only, excluded


@cython.boundscheck(True)
@cython.wraparound(True)
def decide_one(stages, state):
    """`pipeline.LocalStages._decide_one` of `stages` (a LocalStages): explain, score and choose
    for one prepared Placement with the engine's scorer."""
    fleet, rows, index = stages_field(stages, H_FLEET), stages_field(stages, H_ROWS), stages_field(stages, H_INDEX)
    membership = fleet.membership
    cdef Py_hash_t predicates_hash
    expl, ids, only, excluded = gather_state(stages, state, membership, &predicates_hash)
    if expl is None:
        expl = index.explain(ids, only, excluded)
        remember(rows, field_of(slot(state, S_REQUIREMENTS), requirements_predicates_item, "predicates"),
                 predicates_hash, membership, expl, slot(state, S_EVAL_ROWS))
    set_slot(state, S_EXPLANATION, expl)
    session, kind = slot(state, S_SESSION), slot(state, S_KIND)
    scores = index.score(expl, slot(state, S_EVAL_ROWS),
                         rows_field(rows, R_SESSION_ROWS).get(session, -1) if session is not None else -1,
                         rows_field(rows, R_KINDS).get(kind, -1) if kind is not None else -1, fleet.weights)
    set_slot(state, S_SCORES, scores)
    set_slot(state, S_BEST, scores.best)
    set_slot(state, S_SELECTED, clock_ns(False))


@cython.boundscheck(True)
@cython.wraparound(True)
def decide_wave(stages, list states, membership, weights, pool, Py_ssize_t parts):
    """`pipeline.LocalStages._decide_wave` of `stages` (a LocalStages): explain, score and choose
    for the Placements of a wave with the engine's scorer, each one's gather stage and engine job
    set up in one `Wave`, its loops run without the GIL (in `parts` runs, all but the first on
    `pool`'s threads, when `parts` > 1), then each one's explanation, scores and winner taken back
    and the fresh explanations kept."""
    cdef Py_ssize_t i, n = len(states), k
    rows = stages_field(stages, H_ROWS)
    fleet = stages_field(stages, H_FLEET)
    generation = fleet.generation
    cdef dict session_rows = rows_field(rows, R_SESSION_ROWS), kinds = rows_field(rows, R_KINDS)
    cdef Wave wave = Wave.__new__(Wave, stages_field(stages, H_INDEX), n, weights)
    cdef list fresh = []            # the states explained afresh, and their predicate sets' hashes
    cdef bytearray fresh_hashes = bytearray(n * sizeof(Py_hash_t))
    cdef Py_hash_t* hashes = <Py_hash_t*>PyByteArray_AS_STRING(fresh_hashes)
    cdef Py_hash_t predicates_hash
    for i in range(n):
        state = states[i]
        expl, ids, only, excluded = gather_state(stages, state, membership, &predicates_hash)
        if expl is None:
            hashes[len(fresh)] = predicates_hash
            fresh.append(state)
        session, kind = slot(state, S_SESSION), slot(state, S_KIND)
        wave.add(expl, ids, only, excluded, slot(state, S_EVAL_ROWS),
                 session_rows.get(session, -1) if session is not None else -1,
                 kinds.get(kind, -1) if kind is not None else -1)
    if fleet.generation != generation:      # `_decide_wave`'s refusal, in its words
        raise RuntimeError(fleet_changed_text)
    wave.seal()
    if pool is None or parts <= 1:
        wave.run(0, n)
    else:
        # runs of as near one length as may be, as `_decide_wave` cuts them
        runs = [pool.submit(wave.run, k * n // parts, (k + 1) * n // parts) for k in range(1, parts)]
        try:
            wave.run(0, n // parts)
        finally:
            for run in runs:        # each run holds the wave; all end before anything is taken
                run.exception()
        for run in runs:
            run.result()
    selected = clock_ns(False)
    cdef list explanations = wave.explanations, scores = wave.scores
    for i in range(n):
        state = states[i]
        if type(state) is not placement_class:      # gather checked it; the list may have changed since
            raise TypeError(f"decide_wave: expected Placements, found {type(state).__name__}")
        set_slot(state, S_EXPLANATION, explanations[i])
        set_slot(state, S_SCORES, scores[i])
        set_slot(state, S_BEST, (<Scores>scores[i]).best)
        set_slot(state, S_SELECTED, selected)
    for i in range(len(fresh)):
        state = fresh[i]
        remember(rows, field_of(slot(state, S_REQUIREMENTS), requirements_predicates_item, "predicates"),
                 hashes[i], membership, slot(state, S_EXPLANATION), slot(state, S_EVAL_ROWS))


@cython.boundscheck(True)
@cython.wraparound(True)
def build_placement(state, engine, index, declaration, declaration_json, generation, fleet=None):
    """`pipeline.build_placement`: the decided Placement completed and returned. TypeError for
    anything but a Placement."""
    if type(state) is not placement_class or placement_class is None:
        raise TypeError(f"build_placement: expected a Placement, found {type(state).__name__}")
    return complete(state, engine, index, declaration, declaration_json, fleet, generation)


cdef object complete(state, engine, index, declaration, declaration_json, fleet, generation):
    """`build_placement`'s work, on a Placement (checked by the caller)."""
    set_slot(state, S_FLEET_ENGINE, engine)
    set_slot(state, S_INDEX, index)
    set_slot(state, S_CUSTOM_SCORES, type(slot(state, S_SCORES)) is custom_scores_class)
    set_slot(state, S_DECLARATION, declaration)
    set_slot(state, S_DECLARATION_JSON, declaration_json)
    set_slot(state, S_FLEET, fleet)
    set_slot(state, S_AGENT, declaration.agent.name if declaration is not None else None)
    # the phases are read from the clock readings when asked for (`Placement.gather_ns`)
    set_slot(state, S_GATHER_NS, Ellipsis)
    set_slot(state, S_SELECT_NS, Ellipsis)
    set_slot(state, S_DECIDED_AT_NS, clock_ns(True))
    set_slot(state, S_GENERATION, generation)
    set_slot(state, S_SEQ, None)
    set_slot(state, S_SESSION_HELD, None)
    set_slot(state, S_SCHEDULING, None)
    # what only the middle stages read: a placement kept by its caller keeps neither alive
    set_slot(state, S_SCORER, None)
    set_slot(state, S_WITHIN, None)
    return state


@cython.boundscheck(True)
@cython.wraparound(True)
def build_decided(stages, state, generation):
    """`pipeline.LocalStages._build_decided` of `stages` (a LocalStages): the build stage for a
    decided Placement or a resumption's, the chosen agent's declaration and its JSON read from the
    agent table where it holds them parsed (its own methods otherwise)."""
    return build_state(stages, state, generation)


@cython.boundscheck(True)
@cython.wraparound(True)
cdef object build_state(stages, state, generation):
    """`build_decided`'s work."""
    if type(state) is not placement_class or placement_class is None:
        raise TypeError(f"build_decided: expected a Placement, found {type(state).__name__}")
    engine = stages_field(stages, H_ENGINE)
    if slot(state, S_RESUMED):     # `pipeline.build_resumed`: the agent and index prepare set
        return complete(state, engine, slot(state, S_INDEX), slot(state, S_DECLARATION),
                        slot(state, S_DECLARATION_JSON), None, generation)
    cdef Py_ssize_t best = slot(state, S_BEST)
    if best < 0:
        return complete(state, engine, stages_field(stages, H_INDEX), None, None, None, generation)
    table = stages_field(stages, H_TABLE)
    declaration = (<list>table_field(table, T_ENTRIES))[best]
    if type(declaration) is not declaration_class or declaration_class is None:
        declaration = table.declaration(best)
    # its JSON where the table holds it (one read from stored text keeps that text), else made
    # when a record first asks for it, through the fleet (Placement.declaration_json)
    text = (<list>table_field(table, T_DECL_JSON))[best]
    return complete(state, engine, stages_field(stages, H_INDEX), declaration, text,
                    stages_field(stages, H_FLEET) if text is None else None, generation)


@cython.boundscheck(True)
@cython.wraparound(True)
def place_one(stages, task, session, generation, route, reason_limit, kind, scorer, candidates,
              bint remember_session):
    """`pipeline.place_one` on `stages` (a LocalStages): one task through `drive`'s batch of one —
    prepare, decide, build, and the chosen agent holding the task's session — in one call, for a
    requirements dict or Requirements placed with the engine's scorer over every live agent;
    anything else (a resumption, a caller's or the fleet's scorer, `candidates`) through `drive`
    itself. Returns the Placement and the fleet's generation after it."""
    if drive_of is None or placement_class is None:
        raise RuntimeError("bind_placement has not been called with the pipeline's driver")
    if candidates is not None or scorer is not None or stages_field(stages, H_FLEET).scorer is not None \
            or (type(task) is not dict and type(task) is not requirements_class):
        placements, generation = drive_of(stages, (task,), (session,), generation, route, reason_limit, kind,
                                          scorer, candidates, remember_session)
        return placements[0], generation
    state = prepare_task(task, session, route, reason_limit, kind, None)
    decide_one(stages, state)
    p = build_state(stages, state, generation)
    # `pipeline.hold_placed_session`, written out: a call into Python would be one more file every
    # placement of a session crosses
    task_session = slot(state, S_SESSION)
    agent = slot(p, S_AGENT)
    if task_session is not None:
        if not remember_session:
            set_slot(p, S_SESSION_HELD, False)
        elif agent is not None and stages.hold(agent, task_session):
            generation += 1
    return p, generation


@cython.boundscheck(True)
@cython.wraparound(True)
def build_wave(stages, list states, list wave, list placements, list held, generation, bint remember_session):
    """`pipeline.build_wave` on `stages` (a LocalStages): the build stage of each task of a decided
    wave, in order, into `placements`, and whether its agent came to hold the task's session into
    `held`. A LocalStages of its own class is built by `build_decided` without a call through its
    `build`; any other (a subclass) by its `build`."""
    cdef bint direct = type(stages) is stages_class and stages_class is not None, placed
    cdef Py_ssize_t i
    build_one = None if direct else stages.build
    for i in wave:
        state = states[i]
        p = build_state(stages, state, generation) if direct else build_one(state, generation)
        placements[i] = p
        session = placement_field(state, S_SESSION, type(state) is placement_class and placement_class is not None)
        if session is None:
            continue
        placed = type(p) is placement_class and placement_class is not None
        agent = placement_field(p, S_AGENT, placed)
        # `pipeline.hold_placed_session`, written out (a resumption holds nothing)
        if not placement_field(p, S_RESUMED, placed):
            if not remember_session:
                p.session_held = False
            elif agent is not None:
                held[i] = bool(stages.hold(agent, session))


a3_cpu_init()       # which of popcnt, SSSE3 and AVX2 this processor has, before any thread asks
a3_ids_init()
init_b64_pairs()
