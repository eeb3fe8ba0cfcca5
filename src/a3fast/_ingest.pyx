# cython: language_level=3
"""JSON Lines of §3 declarations read in one compiled pass: validate, find rows, keep the bytes.

`scan` walks the bytes of whole lines and, for each line it can vouch for, appends to a `Batch` the
agent's name, its index rows (in `Fleet._rows_for`'s order, a repeated value keeping its first
place), its cost and the line itself as the declaration's canonical JSON. It vouches for a line only
when all of this holds, checked byte by byte with no Python object made for the document:

- the line is one JSON object written as orjson writes it: no whitespace between tokens, no key twice
  in an object, strings of well-formed UTF-8 with no escape and no control character or DEL (orjson
  writes every other character as it is), integers of at most 18 digits (not `-0`),
  no fractions or exponents, at most `MAX_NESTING` containers deep; so the line is its own canonical
  form, and the document rule (a3fast.document) holds;
- its fields are a valid declaration as `schema.parse_declaration` reads one (the same grammar for
  `v`, names, identifiers, versions, labels, the model), and the name is not one the fleet holds or
  this batch gave another namespace.

Every other line — invalid, or valid but unusual (whitespace, escapes, floats, a replaced agent) — is
handed back, and the fleet reads it with orjson and `parse_declaration` as before. So a problem is
always reported by the careful reader, with its words, and the compiled reader only has to be right
about what it accepts: `tests/fleet/test_ingest.py` holds it to that on generated documents.

`requirements_reader` reads §4 requirements documents already decoded (dicts) on the same principle:
the `Requirements` `schema.parse_requirements` would build, or None and the careful reader
(`tests/schema/test_requirements_reader.py` holds it to that).
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.bytearray cimport PyByteArray_AS_STRING
from cpython.list cimport PyList_Append
from cpython.object cimport PyObject, PyObject_Hash
from libc.stdlib cimport calloc, free, malloc, realloc
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from libc.string cimport memchr, memcmp, memcpy, memset

cimport cython

import numpy as np

cdef extern from "Python.h":
    # Locale-independent, correctly rounded, ±HUGE_VAL on overflow when given no exception type.
    double PyOS_string_to_double(const char* s, char** endptr, PyObject* overflow_exception) except? -1.0
    const char* PyUnicode_AsUTF8AndSize(object text, Py_ssize_t* size) except NULL
    Py_ssize_t PyDict_GET_SIZE(object mapping)
    dict _PyDict_NewPresized(Py_ssize_t minused)

cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    /* Eight bytes as a word whose lowest bits hold the first byte, whatever the machine's order. */
    static inline uint64_t a3_load_le64(const unsigned char* p) {
        uint64_t w;
        memcpy(&w, p, 8);
    #if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        w = __builtin_bswap64(w);
    #endif
        return w;
    }
    /* Zeroed memory for a large hash table, in huge pages where the system has them: a table
       probed at random misses the TLB on nearly every probe in 4 KiB pages. */
    #include <stdlib.h>
    #if defined(__linux__)
    #include <sys/mman.h>
    #endif
    static void* a3_table_alloc(size_t size) {
    #if defined(__linux__) && defined(MADV_HUGEPAGE)
        const size_t huge = (size_t)2 << 20;
        if (size >= huge) {
            void* p = NULL;
            size = (size + huge - 1) / huge * huge;
            if (posix_memalign(&p, huge, size) != 0) return NULL;
            madvise(p, size, MADV_HUGEPAGE);
            memset(p, 0, size);
            return p;
        }
    #endif
        return calloc(size, 1);
    }
    #if defined(_MSC_VER)
    #include <intrin.h>
    static inline int a3_ctz64(uint64_t x) { unsigned long i; _BitScanForward64(&i, x); return (int)i; }
    #else
    static inline int a3_ctz64(uint64_t x) { return __builtin_ctzll(x); }
    #endif
    """
    uint64_t load_le64 "a3_load_le64"(const unsigned char* p) nogil
    void* table_alloc "a3_table_alloc"(size_t size) nogil       # zeroed; free() it
    int count_trailing_zeros "a3_ctz64"(uint64_t x) nogil   # x != 0

__all__ = ["Batch", "Vocabulary", "scan", "requirements_reader", "CAPABILITY", "CLEARANCE", "TOOL", "RESIDENCY", "LATENCY", "EVALUATED"]

cdef enum:
    MAX_ITEMS = 256      # declared values per line; a longer line goes to the careful reader
    MAX_KEYS = 64        # keys per object checked for repeats; a wider object does too
    MAX_NESTING = 64     # containers deep (the document rule allows 128; the careful reader judges)
    MAX_TEXT = 1024      # schema.MAX_TEXT, in characters
    MAX_DIGITS = 18      # an integer of 18 digits fits in 64 bits whatever its value
    KEY_BYTES = 4 * MAX_TEXT + 32   # a value's key: a kind byte, up to 4 bytes a character, a version

# Value kinds, in the order their rows are listed (the order of Fleet._rows_for).
cdef enum:
    K_CAPABILITY = 0
    K_CLEARANCE = 1
    K_TOOL = 2
    K_RESIDENCY = 3
    K_LATENCY = 4
    K_EVALUATED = 5
    N_KINDS = 6

CAPABILITY, CLEARANCE, TOOL, RESIDENCY, LATENCY, EVALUATED = range(N_KINDS)


cdef struct Item:
    int kind
    const unsigned char* text
    Py_ssize_t n
    int64_t version         # capabilities only
    const unsigned char* digits
    Py_ssize_t n_digits


cdef struct Line:
    const unsigned char* p       # the cursor
    const unsigned char* end
    const unsigned char* limit   # the end of the data: words may be read up to it
    Py_ssize_t chars             # characters in the last string read
    Item items[MAX_ITEMS]
    int n_items
    const unsigned char* name
    Py_ssize_t name_n
    const unsigned char* ns
    Py_ssize_t ns_n
    const unsigned char* cost
    Py_ssize_t cost_n


# -- the JSON grammar, as orjson writes it -------------------------------------------------------

cdef inline Py_ssize_t utf8_sequence(const unsigned char* p, const unsigned char* end) noexcept nogil:
    """The length of the well-formed UTF-8 sequence of a non-ASCII character at `p` (RFC 3629: no
    overlong form, no surrogate, nothing past U+10FFFF), or 0."""
    cdef unsigned char c = p[0], lo = 0x80, hi = 0xBF
    cdef Py_ssize_t n, i
    if 0xC2 <= c <= 0xDF:
        n = 2
    elif 0xE0 <= c <= 0xEF:
        n = 3
        if c == 0xE0:
            lo = 0xA0
        elif c == 0xED:
            hi = 0x9F
    elif 0xF0 <= c <= 0xF4:
        n = 4
        if c == 0xF0:
            lo = 0x90
        elif c == 0xF4:
            hi = 0x8F
    else:
        return 0
    if end - p < n or not (lo <= p[1] <= hi):
        return 0
    for i in range(2, n):
        if not (0x80 <= p[i] <= 0xBF):
            return 0
    return n


cdef inline uint64_t special_bytes(uint64_t w) noexcept nogil:
    """Eight bytes of a string at once: a word with the high bit set in the byte of the first `"`,
    backslash, control character, DEL or non-ASCII byte among them (bytes above that one may be
    marked too, by a borrow or carry; the lowest mark is always exact), 0 if there is none."""
    cdef uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL
    cdef uint64_t quote = w ^ (ones * 0x22), slash = w ^ (ones * 0x5C)
    return (((quote - ones) & ~quote) | ((slash - ones) & ~slash) | ((w - ones * 0x20) & ~w)
            | (w + ones) | w) & highs


cdef inline bint read_string(Line* s, const unsigned char** text, Py_ssize_t* n) noexcept nogil:
    """A string without escapes or control characters, in well-formed UTF-8 (orjson writes every
    other character as it is); the cursor is on its opening quote. `s.chars` is its length in
    characters. Plain ASCII is passed over eight bytes at a time."""
    cdef const unsigned char* p = s.p + 1
    cdef const unsigned char* end = s.end
    cdef unsigned char c
    cdef uint64_t word, marks
    cdef Py_ssize_t extra = 0, step      # extra: bytes past the first of each character
    while True:
        while end - p >= 8:
            word = load_le64(p)
            marks = special_bytes(word)
            if marks != 0:
                p += count_trailing_zeros(marks) >> 3
                break
            p += 8
        if p >= end:
            return False
        c = p[0]
        if c == c'"':
            text[0] = s.p + 1
            n[0] = p - (s.p + 1)
            s.chars = n[0] - extra
            s.p = p + 1
            return True
        if c < c'\x7f':  # ASCII
            if c < c' ' or c == c'\\':  # a control character, a backslash
                return False
            p += 1
        else:
            if c == c'\x7f':  # DEL: valid JSON, but the careful reader judges it in names
                return False
            step = utf8_sequence(p, end)
            if step == 0:
                return False
            p += step
            extra += step - 1


cdef inline bint read_integer(Line* s, int64_t* value, const unsigned char** digits,
                              Py_ssize_t* n_digits) noexcept nogil:
    """`-?(0|[1-9][0-9]*)` of at most MAX_DIGITS digits, not `-0`, not followed by a fraction or an
    exponent (orjson writes floats in its own form; the careful reader takes them)."""
    cdef const unsigned char* p = s.p
    cdef const unsigned char* start
    cdef bint negative = False
    cdef int64_t v = 0
    if p < s.end and p[0] == c'-':
        negative = True
        p += 1
    start = p
    while p < s.end and c'0' <= p[0] <= c'9':
        if p - start == MAX_DIGITS:     # before the digit is added: a 19th would overflow int64
            return False
        v = v * 10 + (p[0] - c'0')
        p += 1
    if p == start or (start[0] == c'0' and p - start > 1) or (negative and v == 0):
        return False
    if p < s.end and (p[0] == c'.' or p[0] == c'e' or p[0] == c'E'):
        return False
    value[0] = -v if negative else v
    digits[0] = start
    n_digits[0] = p - start
    s.p = p
    return True


cdef inline bint read_literal(Line* s, const char* word, Py_ssize_t n) noexcept nogil:
    if s.end - s.p < n or memcmp(s.p, word, n) != 0:
        return False
    s.p += n
    return True


cdef inline bint at(Line* s, unsigned char c) noexcept nogil:
    return s.p < s.end and s.p[0] == c


cdef inline bint is_null(Line* s) noexcept nogil:
    """Reads a `null` if one is next."""
    return at(s, c'n') and read_literal(s, "null", 4)


cdef struct Keys:
    const unsigned char* text[MAX_KEYS]
    Py_ssize_t n[MAX_KEYS]
    int count


cdef inline bint read_key(Line* s, Keys* keys, const unsigned char** key, Py_ssize_t* n) noexcept nogil:
    """An object's next key and its colon; False for a key seen before in the object."""
    cdef int i
    if not at(s, c'"') or not read_string(s, key, n) or not at(s, c':'):
        return False
    s.p += 1
    if keys.count == MAX_KEYS:
        return False
    for i in range(keys.count):
        if keys.n[i] == n[0] and memcmp(keys.text[i], key[0], n[0]) == 0:
            return False
    keys.text[keys.count] = key[0]
    keys.n[keys.count] = n[0]
    keys.count += 1
    return True


cdef inline int next_member(Line* s, unsigned char close) noexcept nogil:
    """After a member: 1 if another follows (a comma was read), 0 at the close, -1 otherwise."""
    if at(s, c','):
        s.p += 1
        return 1
    if at(s, close):
        s.p += 1
        return 0
    return -1


cdef bint skip_value(Line* s, int depth) noexcept nogil:
    """Any JSON value the grammar above allows, read and not kept."""
    cdef const unsigned char* text
    cdef Py_ssize_t n
    cdef int64_t v
    cdef int more
    cdef Keys keys
    cdef unsigned char c
    if s.p >= s.end:
        return False
    c = s.p[0]
    if c == c'"':
        return read_string(s, &text, &n)
    if c == c'{' or c == c'[':
        if depth + 1 > MAX_NESTING:
            return False
        s.p += 1
        if at(s, c + 2):  # '}' is '{' + 2, ']' is '[' + 2
            s.p += 1
            return True
        keys.count = 0
        while True:
            if c == c'{' and not read_key(s, &keys, &text, &n):
                return False
            if not skip_value(s, depth + 1):
                return False
            more = next_member(s, c + 2)
            if more < 0:
                return False
            if more == 0:
                return True
    if c == c't':
        return read_literal(s, "true", 4)
    if c == c'f':
        return read_literal(s, "false", 5)
    if c == c'n':
        return read_literal(s, "null", 4)
    return read_integer(s, &v, &text, &n)


# -- the declaration's grammar (schema.parse_declaration) ---------------------------------------------

cdef inline bint is_text(Line* s) noexcept nogil:
    """The string just read is a name or label: non-empty and at most MAX_TEXT characters
    (`read_string` already refused control characters)."""
    return 0 < s.chars <= MAX_TEXT


cdef inline bint is_lower_alnum(unsigned char c) noexcept nogil:
    return (c'a' <= c <= c'z') or (c'0' <= c <= c'9')


cdef bint is_identifier(const unsigned char* t, Py_ssize_t n) noexcept nogil:
    """§2: `[a-z0-9]+(\\.[a-z0-9-]+)+`, of at most MAX_TEXT bytes: §2 bounds no identifier, but a
    value's key must fit `find_rows`' buffer, so a longer one goes to the careful reader."""
    return n <= MAX_TEXT and identifier_grammar(t, n)


cdef bint identifier_grammar(const unsigned char* t, Py_ssize_t n) noexcept nogil:
    """§2: `[a-z0-9]+(\\.[a-z0-9-]+)+`, of any length."""
    cdef Py_ssize_t i = 0, start
    cdef int segments = 0
    while i < n and is_lower_alnum(t[i]):
        i += 1
    if i == 0:
        return False
    while i < n:
        if t[i] != c'.':
            return False
        i += 1
        start = i
        while i < n and (is_lower_alnum(t[i]) or t[i] == c'-'):
            i += 1
        if i == start:
            return False
        segments += 1
    return segments > 0


cdef bint is_schema_version(const unsigned char* t, Py_ssize_t n) noexcept nogil:
    """`1\\.[0-9]+(\\.[0-9]+)?`."""
    cdef Py_ssize_t i = 2, start
    if n < 3 or t[0] != c'1' or t[1] != c'.':
        return False
    start = i
    while i < n and c'0' <= t[i] <= c'9':
        i += 1
    if i == start:
        return False
    if i == n:
        return True
    if t[i] != c'.':
        return False
    i += 1
    start = i
    while i < n and c'0' <= t[i] <= c'9':
        i += 1
    return i > start and i == n


cdef bint is_decimal(const unsigned char* t, Py_ssize_t n) noexcept nogil:
    """`[0-9]+(\\.[0-9]+)?`."""
    cdef Py_ssize_t i = 0
    while i < n and c'0' <= t[i] <= c'9':
        i += 1
    if i == 0:
        return False
    if i == n:
        return True
    if t[i] != c'.' or i + 1 == n:
        return False
    i += 1
    while i < n and c'0' <= t[i] <= c'9':
        i += 1
    return i == n


cdef inline bint add_item(Line* s, int kind, const unsigned char* text, Py_ssize_t n) noexcept nogil:
    if s.n_items == MAX_ITEMS:
        return False
    s.items[s.n_items].kind = kind
    s.items[s.n_items].text = text
    s.items[s.n_items].n = n
    s.items[s.n_items].version = 0
    s.items[s.n_items].digits = NULL
    s.items[s.n_items].n_digits = 0
    s.n_items += 1
    return True


cdef inline bint key_is(const unsigned char* key, Py_ssize_t n, const char* word, Py_ssize_t m) noexcept nogil:
    return n == m and memcmp(key, word, m) == 0


cdef bint read_agent(Line* s) noexcept nogil:
    cdef Keys keys
    cdef const unsigned char* key
    cdef const unsigned char* text
    cdef Py_ssize_t n, tn
    cdef int more
    if not at(s, c'{'):
        return False
    s.p += 1
    if at(s, c'}'):
        return False  # no name
    keys.count = 0
    while True:
        if not read_key(s, &keys, &key, &n):
            return False
        if key_is(key, n, "name", 4) or key_is(key, n, "namespace", 9):
            if not at(s, c'"') or not read_string(s, &text, &tn) or not is_text(s):
                return False
            if n == 4:
                s.name = text
                s.name_n = tn
            else:
                s.ns = text
                s.ns_n = tn
        elif not skip_value(s, 2):
            return False
        more = next_member(s, c'}')
        if more < 0:
            return False
        if more == 0:
            return s.name != NULL and s.ns != NULL


cdef bint read_capability(Line* s) noexcept nogil:
    cdef Keys keys
    cdef const unsigned char* key
    cdef const unsigned char* name = NULL
    cdef const unsigned char* digits = NULL
    cdef Py_ssize_t n, name_n = 0, n_digits = 0
    cdef int64_t version = -1
    cdef bint evaluated = False
    cdef int more
    if not at(s, c'{'):
        return False
    s.p += 1
    if at(s, c'}'):
        return False
    keys.count = 0
    while True:
        if not read_key(s, &keys, &key, &n):
            return False
        if key_is(key, n, "name", 4):
            if not at(s, c'"') or not read_string(s, &name, &name_n) or not is_identifier(name, name_n):
                return False
        elif key_is(key, n, "version", 7):
            if not read_integer(s, &version, &digits, &n_digits) or version < 0:
                return False
        elif key_is(key, n, "evaluation", 10):
            evaluated = not is_null(s)
            if evaluated and not skip_value(s, 3):
                return False
        elif not skip_value(s, 3):
            return False
        more = next_member(s, c'}')
        if more < 0:
            return False
        if more == 0:
            break
    if name == NULL or digits == NULL:
        return False
    if not add_item(s, K_CAPABILITY, name, name_n):
        return False
    s.items[s.n_items - 1].version = version
    s.items[s.n_items - 1].digits = digits
    s.items[s.n_items - 1].n_digits = n_digits
    if evaluated:
        if not add_item(s, K_EVALUATED, name, name_n):
            return False
        s.items[s.n_items - 1].version = version
        s.items[s.n_items - 1].digits = digits
        s.items[s.n_items - 1].n_digits = n_digits
    return True


cdef bint read_strings(Line* s, int kind, bint identifiers) noexcept nogil:
    """An array of identifiers or of names/labels, each kept as an item of `kind`."""
    cdef const unsigned char* text
    cdef Py_ssize_t n
    cdef int more
    if not at(s, c'['):
        return False
    s.p += 1
    if at(s, c']'):
        s.p += 1
        return True
    while True:
        if not at(s, c'"') or not read_string(s, &text, &n):
            return False
        if not (is_identifier(text, n) if identifiers else is_text(s)):
            return False
        if not add_item(s, kind, text, n):
            return False
        more = next_member(s, c']')
        if more < 0:
            return False
        if more == 0:
            return True


cdef bint read_capabilities(Line* s) noexcept nogil:
    cdef int more
    if not at(s, c'['):
        return False
    s.p += 1
    if at(s, c']'):
        s.p += 1
        return True
    while True:
        if not read_capability(s):
            return False
        more = next_member(s, c']')
        if more < 0:
            return False
        if more == 0:
            return True


cdef bint read_model(Line* s) noexcept nogil:
    cdef Keys keys
    cdef const unsigned char* key
    cdef const unsigned char* text
    cdef Py_ssize_t n, tn
    cdef int more
    if is_null(s):
        return True
    if not at(s, c'{'):
        return False
    s.p += 1
    if at(s, c'}'):
        s.p += 1
        return True
    keys.count = 0
    while True:
        if not read_key(s, &keys, &key, &n):
            return False
        if key_is(key, n, "latency_class", 13):
            if not is_null(s):
                if not at(s, c'"') or not read_string(s, &text, &tn):
                    return False
                if not (key_is(text, tn, "interactive", 11) or key_is(text, tn, "batch", 5)):
                    return False
                if not add_item(s, K_LATENCY, text, tn):
                    return False
        elif key_is(key, n, "cost_ceiling_usd", 16):
            if not is_null(s):
                if not at(s, c'"') or not read_string(s, &text, &tn) or not is_decimal(text, tn):
                    return False
                s.cost = text
                s.cost_n = tn
        elif not skip_value(s, 2):
            return False
        more = next_member(s, c'}')
        if more < 0:
            return False
        if more == 0:
            return True


cdef bint read_declaration(Line* s) noexcept nogil:
    """The whole line; False as soon as anything is not certainly valid and canonical."""
    cdef Keys keys
    cdef const unsigned char* key
    cdef const unsigned char* text
    cdef Py_ssize_t n, tn
    cdef int more
    cdef int required = 0       # bits: v, agent, capabilities, clearances
    if not at(s, c'{'):
        return False
    s.p += 1
    if at(s, c'}'):
        return False
    keys.count = 0
    while True:
        if not read_key(s, &keys, &key, &n):
            return False
        if key_is(key, n, "v", 1):
            if not at(s, c'"') or not read_string(s, &text, &tn) or not is_schema_version(text, tn):
                return False
            required |= 1
        elif key_is(key, n, "agent", 5):
            if not read_agent(s):
                return False
            required |= 2
        elif key_is(key, n, "capabilities", 12):
            if not read_capabilities(s):
                return False
            required |= 4
        elif key_is(key, n, "clearances", 10):
            if not read_strings(s, K_CLEARANCE, True):
                return False
            required |= 8
        elif key_is(key, n, "residency", 9) or key_is(key, n, "tools", 5):
            if not is_null(s) and not read_strings(s, K_RESIDENCY if n == 9 else K_TOOL, False):
                return False
        elif key_is(key, n, "model", 5):
            if not read_model(s):
                return False
        elif not skip_value(s, 1):
            return False
        more = next_member(s, c'}')
        if more < 0:
            return False
        if more == 0:
            break
    # the object must end the line (a CR of a CRLF line ending aside)
    if at(s, c'\r'):
        s.p += 1
    return required == 15 and s.p == s.end


# -- from a vouched-for line to the batch ------------------------------------------------------------

cdef object grown(object array, Py_ssize_t used, Py_ssize_t size):
    """A larger array holding the first `used` items (np.resize would also fill the rest by
    repeating the array: a second write of every byte, for items about to be overwritten)."""
    out = np.empty(size, dtype=array.dtype)
    out[:used] = array[:used]
    return out


cdef inline uint64_t text_hash(const unsigned char* text, Py_ssize_t n) noexcept nogil:
    """`hash_bytes` of a name or namespace, wherever its bytes are (none read past its end)."""
    return hash_bytes(text, n, text + n, 0)


cdef class TextIndex:
    """Where each str of a list first appears, found by its UTF-8 bytes without making an object:
    an open-addressing table of (the hash's high 32 bits, position + 1), 8 bytes a slot at most half
    full, and the low 32 bits per position (so growing touches no str); the bytes compared are the
    list's own str (a compact ASCII str is its UTF-8), and only when the high bits match."""

    cdef list items
    cdef uint64_t* slots       # 0 marks a free slot
    cdef uint32_t* low_bits    # per position added: its hash's low 32 bits
    cdef Py_ssize_t size, used, low_cap

    def __cinit__(self, list items):
        self.items = items
        self.size = 64
        self.used = 0
        self.low_cap = 0
        self.low_bits = NULL
        self.slots = <uint64_t*>calloc(self.size, sizeof(uint64_t))
        if self.slots == NULL:
            raise MemoryError()

    def __dealloc__(self):
        free(self.slots)
        free(self.low_bits)

    cdef Py_ssize_t find(self, const unsigned char* text, Py_ssize_t n, uint64_t h) except -2:
        """The position of the first str whose UTF-8 is `text`, or -1."""
        cdef Py_ssize_t mask = self.size - 1, i = <Py_ssize_t>(h & <uint64_t>mask), at, m
        cdef uint64_t tag = h >> 32
        cdef const char* stored
        while self.slots[i] != 0:
            if (self.slots[i] >> 32) == tag:
                at = <Py_ssize_t>(self.slots[i] & 0xFFFFFFFFULL) - 1
                if self.low_bits[at] == <uint32_t>h:
                    # the list is the batch's public `names`: one a caller changed is not read past
                    if at >= PyList_GET_SIZE(self.items) or type(self.items[at]) is not str:
                        raise RuntimeError("the batch's names were changed: its index of them no longer holds")
                    stored = PyUnicode_AsUTF8AndSize(self.items[at], &m)
                    if m == n and memcmp(stored, text, n) == 0:
                        return at
            i = (i + 1) & mask
        return -1

    cdef int add(self, Py_ssize_t at, uint64_t h) except -1:
        """Record that the str at `at`, of hash `h`, is not found before it."""
        cdef Py_ssize_t mask, i, cap
        cdef uint32_t* grown
        if at >= 0xFFFFFFFE:
            raise OverflowError("more than 4,294,967,293 names in one batch")
        if at >= self.low_cap:
            cap = max(2 * self.low_cap, at + 1, 64)
            grown = <uint32_t*>realloc(self.low_bits, cap * sizeof(uint32_t))
            if grown == NULL:
                raise MemoryError()
            self.low_bits, self.low_cap = grown, cap
        if 2 * (self.used + 1) > self.size:
            self.grow()
        mask = self.size - 1
        i = <Py_ssize_t>(h & <uint64_t>mask)
        while self.slots[i] != 0:
            i = (i + 1) & mask
        self.slots[i] = ((h >> 32) << 32) | <uint64_t>(at + 1)
        self.low_bits[at] = <uint32_t>h
        self.used += 1
        return 0

    cdef int grow(self) except -1:
        """Twice the slots, each entry placed again by its whole hash."""
        cdef Py_ssize_t old_size = self.size, i, j, mask = 2 * old_size - 1
        cdef uint64_t* old = self.slots
        cdef uint64_t h
        self.slots = <uint64_t*>table_alloc(2 * old_size * sizeof(uint64_t))
        if self.slots == NULL:
            self.slots = old
            raise MemoryError()
        self.size = 2 * old_size
        for i in range(old_size):
            if old[i] != 0:
                h = (old[i] & 0xFFFFFFFF00000000ULL) | self.low_bits[(old[i] & 0xFFFFFFFFULL) - 1]
                j = <Py_ssize_t>(h & <uint64_t>mask)
                while self.slots[j] != 0:
                    j = (j + 1) & mask
                self.slots[j] = old[i]
        free(old)
        return 0


cdef class Batch:
    """Accepted declarations as columns, in line order: names, the declarations' canonical JSON,
    costs, every agent's rows in one int32 array (agent j's are `rows[offsets[j]:offsets[j+1]]`),
    and each name's namespace, found by the name's bytes (`namespace_of`; the scan asks it for
    every line without making a str) — a name appears twice only in one namespace."""

    cdef public list names
    cdef public list texts
    # True: a line the scan reads is kept as None in `texts` and its span of the data in `spans`,
    # until its declaration is packed straight from the data (a copy of every line was a tenth of
    # the load's CPU time); the careful reader's lines are kept as bytes either way
    cdef public bint defer_texts
    cdef object _spans                       # per deferred entry: its index, offset, length
    cdef int64_t[::1] spans_view
    cdef Py_ssize_t n_spans
    cdef list namespaces                     # one str per namespace, in order of appearance
    cdef TextIndex by_name                   # names -> first position
    cdef TextIndex by_namespace              # namespaces -> their number
    cdef Py_ssize_t last_namespace           # the namespace of the last line pushed, or -1
    cdef readonly Py_ssize_t repeated        # names pushed that were in the batch already
    cdef object _rows, _offsets, _costs, _namespace_ids   # numpy arrays, grown by doubling
    cdef int32_t[::1] rows_view
    cdef int64_t[::1] offsets_view
    cdef double[::1] costs_view
    cdef int32_t[::1] namespace_view
    cdef Py_ssize_t n, n_rows

    def __cinit__(self):
        self.names = []
        self.texts = []
        self.defer_texts = False
        self._spans = np.empty(3 << 10, dtype=np.int64)
        self.spans_view = self._spans
        self.n_spans = 0
        self.namespaces = []
        self.by_name = TextIndex(self.names)
        self.by_namespace = TextIndex(self.namespaces)
        self.last_namespace = -1
        self.repeated = 0
        self._rows = np.empty(1 << 12, dtype=np.int32)
        self._offsets = np.zeros(1 << 8, dtype=np.int64)
        self._costs = np.empty(1 << 8, dtype=np.float64)
        self._namespace_ids = np.empty(1 << 8, dtype=np.int32)
        self.rows_view, self.offsets_view, self.costs_view = self._rows, self._offsets, self._costs
        self.namespace_view = self._namespace_ids
        self.n = 0
        self.n_rows = 0

    def __len__(self):
        return self.n

    cdef int reserve(self, Py_ssize_t rows) except -1:
        cdef Py_ssize_t size
        if self.n + 2 > self._costs.shape[0]:
            size = self._costs.shape[0] * 2
            self._costs = grown(self._costs, self.n, size)
            self._offsets = grown(self._offsets, self.n + 1, size)
            self._namespace_ids = grown(self._namespace_ids, self.n, size)
            self.costs_view, self.offsets_view = self._costs, self._offsets
            self.namespace_view = self._namespace_ids
        if self.n_rows + rows > self._rows.shape[0]:
            size = max(self._rows.shape[0] * 2, self.n_rows + rows)
            self._rows = grown(self._rows, self.n_rows, size)
            self.rows_view = self._rows
        return 0

    cdef Py_ssize_t namespace_number(self, const unsigned char* text, Py_ssize_t n) except -1:
        """The number of the namespace whose UTF-8 is `text`, given the first time it is seen (a
        fleet has few namespaces; the last line's is tried first)."""
        cdef Py_ssize_t m, number = self.last_namespace
        cdef const char* last
        cdef uint64_t h
        if number >= 0:
            last = PyUnicode_AsUTF8AndSize(self.namespaces[number], &m)
            if m == n and memcmp(last, text, n) == 0:
                return number
        h = text_hash(text, n)
        number = self.by_namespace.find(text, n, h)
        if number < 0:
            number = len(self.namespaces)
            self.namespaces.append(PyUnicode_DecodeUTF8(<const char*>text, n, NULL))
            self.by_namespace.add(number, h)
        return number

    cdef Py_ssize_t first_of(self, const unsigned char* text, Py_ssize_t n, uint64_t h) except -2:
        """Where the name whose UTF-8 is `text` (of `text_hash` h) is first in the batch, or -1."""
        return self.by_name.find(text, n, h)

    cdef int push(self, str name, Py_ssize_t namespace, Py_ssize_t first, uint64_t h, bytes text,
                  double cost) except -1:
        """Append an entry whose rows were just written; `first`: where its name is already, or -1."""
        cdef Py_ssize_t at = self.n
        PyList_Append(self.names, name)
        PyList_Append(self.texts, text)
        if first < 0:
            self.by_name.add(at, h)
        else:
            self.repeated += 1
        self.costs_view[at] = cost
        self.namespace_view[at] = <int32_t>namespace
        self.last_namespace = namespace
        self.n = at + 1
        self.offsets_view[self.n] = self.n_rows
        return 0

    def namespace_of(self, str name):
        """The namespace the batch holds `name` in, or None."""
        cdef Py_ssize_t n, at
        cdef const unsigned char* text = <const unsigned char*>PyUnicode_AsUTF8AndSize(name, &n)
        at = self.by_name.find(text, n, text_hash(text, n))
        return None if at < 0 else self.namespaces[self.namespace_view[at]]

    def append(self, str name, str namespace, rows, double cost, bytes text) -> None:
        """One declaration read by the careful reader (its name held in no other namespace)."""
        cdef Py_ssize_t r, n, number
        cdef const unsigned char* utf8
        cdef list numbers = []
        for r in rows:      # read once, as plain numbers, before the room for them is made
            numbers.append(r)
        self.reserve(len(numbers))
        for r in numbers:
            self.rows_view[self.n_rows] = r
            self.n_rows += 1
        utf8 = <const unsigned char*>PyUnicode_AsUTF8AndSize(namespace, &n)
        number = self.namespace_number(utf8, n)
        utf8 = <const unsigned char*>PyUnicode_AsUTF8AndSize(name, &n)
        h = text_hash(utf8, n)
        self.push(name, number, self.by_name.find(utf8, n, h), h, text, cost)

    def name_ids(self, Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t first) -> dict:
        """{names[lo + k]: first + k} for a run of distinct names, in a dict made at its size."""
        cdef dict ids = _PyDict_NewPresized(max(hi - lo, 0))
        cdef Py_ssize_t k
        for k in range(lo, hi):
            ids[self.names[k]] = first + k - lo
        return ids

    def rows_of(self, Py_ssize_t j) -> tuple:
        return tuple(self._rows[self.offsets_view[j]:self.offsets_view[j + 1]].tolist())

    def columns(self):
        """(rows, offsets, costs) as numpy arrays over the batch's own memory."""
        return (self._rows[:self.n_rows], self._offsets[:self.n + 1], self._costs[:self.n])

    def take_spans(self):
        """The entries kept as spans since the last call (see `defer_texts`): their indices (int64)
        and their (offset, length) in the data as little-endian uint64 pairs, as zstandard's
        BufferWithSegments reads them."""
        spans = self._spans[:3 * self.n_spans].reshape(-1, 3)
        self.n_spans = 0
        return spans[:, 0].copy(), spans[:, 1:].astype("<u8").tobytes()

    cdef int push_span(self, str name, Py_ssize_t namespace, Py_ssize_t first, uint64_t h,
                       Py_ssize_t offset, Py_ssize_t length, double cost) except -1:
        """`push` of an entry whose text stays in the data, at `offset` for `length` bytes."""
        cdef Py_ssize_t at = 3 * self.n_spans
        if at + 3 > self._spans.shape[0]:
            self._spans = grown(self._spans, at, 2 * self._spans.shape[0])
            self.spans_view = self._spans
        self.spans_view[at] = self.n
        self.spans_view[at + 1] = offset
        self.spans_view[at + 2] = length
        self.n_spans += 1
        return self.push(name, namespace, first, h, None, cost)


cdef class Vocabulary:
    """Rows of declared values by their bytes (a kind byte, the value, for a capability a NUL and
    its version's digits), in a C hash table: a value's row is found without making an object.
    Valid for one batch: the rows it holds may be numbered ahead of a batch that is refused."""

    cdef uint64_t* hashes      # 0 marks a free slot
    cdef int32_t* rows
    cdef Py_ssize_t* spans     # where each slot's key starts in `keys`, and its length
    cdef bytearray keys
    cdef Py_ssize_t size, used
    # per row: the number of the last line that listed it, so that a value a line repeats is found
    # in one step (a comparison with every row the line listed before was a tenth of the pass)
    cdef uint32_t* stamps
    cdef Py_ssize_t stamps_size
    cdef uint32_t line

    def __cinit__(self):
        self.size = 1024
        self.used = 0
        self.hashes = <uint64_t*>calloc(self.size, sizeof(uint64_t))
        self.rows = <int32_t*>malloc(self.size * sizeof(int32_t))
        self.spans = <Py_ssize_t*>malloc(2 * self.size * sizeof(Py_ssize_t))
        self.keys = bytearray()
        self.stamps = NULL
        self.stamps_size = 0
        self.line = 0
        if self.hashes == NULL or self.rows == NULL or self.spans == NULL:
            raise MemoryError()

    def __dealloc__(self):
        free(self.hashes)
        free(self.rows)
        free(self.spans)
        free(self.stamps)

    cdef int next_line(self) except -1:
        """Start a line: no row is listed by it yet."""
        self.line += 1
        if self.line == 0:          # the stamps wrapped around: forget them all
            memset(self.stamps, 0, self.stamps_size * sizeof(uint32_t))
            self.line = 1
        return 0

    cdef int first_listing(self, int32_t row) except -1:
        """1 the first time the current line lists `row`, 0 after that."""
        cdef Py_ssize_t size
        cdef uint32_t* grown
        if row < 0:
            raise ValueError(f"a declared value was given row {row}")
        if row >= self.stamps_size:
            size = max(2 * self.stamps_size, <Py_ssize_t>row + 1, 1024)
            grown = <uint32_t*>realloc(self.stamps, size * sizeof(uint32_t))
            if grown == NULL:
                raise MemoryError()
            memset(grown + self.stamps_size, 0, (size - self.stamps_size) * sizeof(uint32_t))
            self.stamps, self.stamps_size = grown, size
        if self.stamps[row] == self.line:
            return 0
        self.stamps[row] = self.line
        return 1

    def __len__(self):
        return self.used

    cdef Py_ssize_t slot(self, const unsigned char* key, Py_ssize_t n, uint64_t h) noexcept:
        """The slot holding `key`, or the free slot where it would go."""
        cdef Py_ssize_t mask = self.size - 1, i = <Py_ssize_t>(h & <uint64_t>mask)
        cdef const unsigned char* stored = <const unsigned char*>PyByteArray_AS_STRING(self.keys)
        while self.hashes[i] != 0:
            if (self.hashes[i] == h and self.spans[2 * i + 1] == n
                    and memcmp(stored + self.spans[2 * i], key, n) == 0):
                return i
            i = (i + 1) & mask
        return i

    cdef int grow(self) except -1:
        cdef Py_ssize_t old_size = self.size, i, j
        cdef uint64_t* old_hashes = self.hashes
        cdef int32_t* old_rows = self.rows
        cdef Py_ssize_t* old_spans = self.spans
        self.size = old_size * 2
        self.hashes = <uint64_t*>calloc(self.size, sizeof(uint64_t))
        self.rows = <int32_t*>malloc(self.size * sizeof(int32_t))
        self.spans = <Py_ssize_t*>malloc(2 * self.size * sizeof(Py_ssize_t))
        if self.hashes == NULL or self.rows == NULL or self.spans == NULL:
            raise MemoryError()
        for i in range(old_size):
            if old_hashes[i] != 0:
                j = <Py_ssize_t>(old_hashes[i] & <uint64_t>(self.size - 1))
                while self.hashes[j] != 0:
                    j = (j + 1) & (self.size - 1)
                self.hashes[j] = old_hashes[i]
                self.rows[j] = old_rows[i]
                self.spans[2 * j] = old_spans[2 * i]
                self.spans[2 * j + 1] = old_spans[2 * i + 1]
        free(old_hashes)
        free(old_rows)
        free(old_spans)
        return 0

    cdef int32_t find(self, const unsigned char* key, Py_ssize_t n, uint64_t h) noexcept:
        cdef Py_ssize_t i = self.slot(key, n, h)
        return self.rows[i] if self.hashes[i] != 0 else -1

    cdef int32_t find_item(self, const Item* item, uint64_t h) noexcept:
        """The row of the item's value (its key as `find_rows` would build it), compared part by
        part where it lies in the line — no key is built for a value seen before — or -1."""
        cdef Py_ssize_t mask = self.size - 1, i = <Py_ssize_t>(h & <uint64_t>mask), n = item.n
        cdef bint versioned = item.kind == K_CAPABILITY or item.kind == K_EVALUATED
        cdef Py_ssize_t length = 1 + n + (1 + item.n_digits if versioned else 0)
        cdef const unsigned char* stored
        while self.hashes[i] != 0:
            if self.hashes[i] == h and self.spans[2 * i + 1] == length:
                stored = <const unsigned char*>PyByteArray_AS_STRING(self.keys) + self.spans[2 * i]
                if (stored[0] == item.kind and memcmp(stored + 1, item.text, n) == 0
                        and (not versioned or (stored[1 + n] == 0
                                               and memcmp(stored + 2 + n, item.digits, item.n_digits) == 0))):
                    return self.rows[i]
            i = (i + 1) & mask
        return -1

    cdef int remember(self, const unsigned char* key, Py_ssize_t n, uint64_t h, int32_t row) except -1:
        cdef Py_ssize_t i
        if 2 * (self.used + 1) > self.size:
            self.grow()
        i = self.slot(key, n, h)
        self.spans[2 * i] = len(self.keys)
        self.spans[2 * i + 1] = n
        self.keys += PyBytes_FromStringAndSize(<const char*>key, n)
        self.hashes[i] = h
        self.rows[i] = row
        self.used += 1
        return 0


cdef inline uint64_t hash_bytes(const unsigned char* p, Py_ssize_t n, const unsigned char* limit,
                                uint64_t seed) noexcept nogil:
    """A multiplicative hash of `n` bytes eight at a time (a byte-at-a-time hash was the larger part
    of finding a line's rows). The last partial word is read whole and masked where 8 bytes are
    readable before `limit`, else byte by byte: either way the same hash. The bytes are read where
    they lie — a word read from bytes just copied stalls on the copy's smaller stores."""
    cdef uint64_t h = (seed ^ <uint64_t>n) * 0x9E3779B97F4A7C15ULL, word
    cdef Py_ssize_t i
    while n >= 8:
        word = load_le64(p)
        h = (h ^ word) * 0xBF58476D1CE4E5B9ULL
        h ^= h >> 31
        p += 8
        n -= 8
    if n > 0:
        if limit - p >= 8:
            word = load_le64(p) & ((<uint64_t>1 << (8 * n)) - 1)
        else:
            word = 0
            for i in range(n):
                word |= (<uint64_t>p[i]) << (8 * i)
        h = (h ^ word) * 0x94D049BB133111EBULL
        h ^= h >> 29
    h ^= h >> 32
    return h


cdef inline uint64_t item_hash(const Item* item, const unsigned char* limit) noexcept nogil:
    """The hash of a declared value's key (its kind, its bytes, a capability's version); never 0,
    which marks a free slot."""
    cdef uint64_t h = hash_bytes(item.text, item.n, limit, <uint64_t>item.kind + 1)
    if item.kind == K_CAPABILITY or item.kind == K_EVALUATED:
        h = (h ^ (<uint64_t>item.version + 1)) * 0xD6E8FEB86659FD93ULL
        h ^= h >> 32
    return h if h != 0 else 1


cdef int find_rows(Line* s, Batch batch, Vocabulary vocab, object intern) except -1:
    """Append the rows of the line's items, kind by kind; `vocab` maps a value's key (its kind byte,
    its bytes, for a capability a NUL and its version's digits) to its row, and `intern(kind,
    value)` gives the row of a value `vocab` has not seen."""
    cdef unsigned char key[KEY_BYTES]
    cdef Py_ssize_t n, i, j
    cdef int kind
    cdef Item* item
    cdef int32_t row
    cdef uint64_t h
    cdef int at[N_KINDS + 1]
    cdef int order[MAX_ITEMS]
    # the items in kind order, each kind's in the line's order (a counting sort)
    memset(at, 0, sizeof(at))
    for i in range(s.n_items):
        at[s.items[i].kind + 1] += 1
    for kind in range(N_KINDS):
        at[kind + 1] += at[kind]
    for i in range(s.n_items):
        order[at[s.items[i].kind]] = i
        at[s.items[i].kind] += 1
    batch.reserve(s.n_items)
    vocab.next_line()
    for j in range(s.n_items):
        item = &s.items[order[j]]
        kind = item.kind
        h = item_hash(item, s.limit)
        row = vocab.find_item(item, h)
        if row < 0:
            # the grammar bounds every value below this
            if 2 + item.n + item.n_digits > KEY_BYTES:
                raise ValueError("a declared value too long for the reader's key buffer")
            key[0] = <unsigned char>kind
            memcpy(&key[1], item.text, item.n)
            n = 1 + item.n
            if kind == K_CAPABILITY or kind == K_EVALUATED:
                key[n] = 0
                memcpy(&key[n + 1], item.digits, item.n_digits)
                n += 1 + item.n_digits
            text = PyUnicode_DecodeUTF8(<char*>item.text, item.n, NULL)
            value = (text, item.version) if kind == K_CAPABILITY or kind == K_EVALUATED else text
            row = intern(kind, value)
            vocab.remember(key, n, h, row)
        if vocab.first_listing(row):   # a repeated value keeps its first place
            batch.rows_view[batch.n_rows] = row
            batch.n_rows += 1
    return 0


def scan(bytes data, Py_ssize_t pos, Py_ssize_t lineno, Batch batch, Vocabulary vocab, object intern,
         dict held):
    """Read lines of `data` from `pos` (the start of line `lineno`) until one needs the careful
    reader or the data ends. Returns `(pos, lineno)`: where that line starts and its number, or
    `(len(data), lineno)` once every line is read. `held` maps names the fleet holds (whose lines
    go to the careful reader: a replace), as does a name the batch holds in another namespace."""
    cdef const unsigned char* base = <const unsigned char*>PyBytes_AS_STRING(data)
    cdef Py_ssize_t size = PyBytes_GET_SIZE(data), eol, namespace, first
    cdef const unsigned char* line
    cdef const unsigned char* q
    cdef Line s
    cdef double cost
    cdef uint64_t h
    cdef char number[64]
    cdef bint blank
    if pos < 0 or pos > size:
        raise ValueError("pos is outside the data")
    while pos < size:
        line = base + pos
        q = <const unsigned char*>memchr(line, c'\n', size - pos)
        eol = size if q == NULL else q - base
        blank = True
        q = line
        while q < base + eol:
            # JSON's whitespace (framing.JSON_SPACE): a vertical tab or form feed is no JSON
            if not (q[0] == c' ' or q[0] == c'\t' or q[0] == c'\r'):
                blank = False
                break
            q += 1
        if not blank:
            s.p = line
            s.end = base + eol
            s.limit = base + size
            s.n_items = 0
            s.name = s.ns = s.cost = NULL
            if not read_declaration(&s):
                return pos, lineno
            namespace = batch.namespace_number(s.ns, s.ns_n)
            h = hash_bytes(s.name, s.name_n, s.limit, 0)     # text_hash, reading whole words
            first = batch.first_of(s.name, s.name_n, h)
            if first >= 0:
                if batch.namespace_view[first] != namespace:
                    return pos, lineno     # the careful reader names the conflict
                name = batch.names[first]
            else:
                name = PyUnicode_DecodeUTF8(<char*>s.name, s.name_n, NULL)
            if PyDict_GET_SIZE(held) != 0 and name in held:
                return pos, lineno
            cost = 0.0
            if s.cost != NULL:
                # scoring.cost_score: float(Decimal(text)), which reads the decimal as float() does
                if s.cost_n >= 63:
                    cost = 1.0 / (1.0 + float(PyUnicode_DecodeUTF8(<char*>s.cost, s.cost_n, NULL)))
                else:
                    memcpy(number, s.cost, s.cost_n)
                    number[s.cost_n] = 0
                    cost = 1.0 / (1.0 + PyOS_string_to_double(number, NULL, NULL))
            find_rows(&s, batch, vocab, intern)
            length = eol - pos - (1 if eol > pos and base[eol - 1] == c'\r' else 0)
            if batch.defer_texts:
                batch.push_span(name, namespace, first, h, pos, length, cost)
            else:
                batch.push(name, namespace, first, h, PyBytes_FromStringAndSize(<char*>line, length), cost)
        pos = eol + 1
        lineno += 1
    return size, lineno


# -- §4 requirements from a dict --------------------------------------------------------------------
# The same principle for a requirements document already decoded (a dict): the reader walks it once,
# checking every member as `schema.parse_requirements` does and the document rule (a3fast.document)
# on everything else, and returns the `Requirements` the careful reader would, or None for anything
# it cannot vouch for (then `parse_requirements` reads the document itself, naming every problem).
# Only exact types are read (a subclass of str, int, list or dict is handed back), so no user code
# runs here and a value's truth or equality is that of the built-in type.

cdef extern from "Python.h":
    bint PyUnicode_IS_ASCII(object text)
    Py_ssize_t PyUnicode_GET_LENGTH(object text)
    long long PyLong_AsLongLongAndOverflow(object value, int* overflow) except? -1

cdef extern from *:
    """
    /* An empty instance of a tuple subclass (a NamedTuple) of n items, filled by the caller as
       tuple.__new__ fills one. */
    static PyObject* a3_new_tuple_of(PyObject* type, Py_ssize_t n) {
        return ((PyTypeObject*)type)->tp_alloc((PyTypeObject*)type, n);
    }
    """
    object new_tuple_of "a3_new_tuple_of"(object type, Py_ssize_t n)

from cpython.dict cimport PyDict_GetItem, PyDict_GetItemWithError, PyDict_Next, PyDict_SetItem
from cpython.list cimport PyList_AsTuple, PyList_GET_ITEM, PyList_GET_SIZE
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_New, PyTuple_SET_ITEM
from libc.math cimport isfinite
from cpython.unicode cimport PyUnicode_DATA, PyUnicode_KIND, PyUnicode_READ


@cython.final
cdef class Notes:
    """The notes of `a3fast.seen`'s rule (a set of hashes, `seen.Notes`), as a table of C integers:
    noting a hash makes no Python int and asks no set. `seen_before(key, limit)` is the rule; the
    rest (`len`, `in`, iteration, `add`, `discard`, `update`, `clear`) reads and writes the notes
    as a set of ints would. Its fields and `note`, the rule without a Python call, are declared in
    `_ingest.pxd` for `a3fast._core`."""

    def __cinit__(self):
        self.keys = NULL
        self.cap = 0
        self.count = 0
        self.shift = 64
        self.has_zero = False

    def __dealloc__(self):
        free(self.keys)

    def seen_before(self, Py_hash_t key, Py_ssize_t limit):
        """Whether `key` was noted: then its note is taken back. Otherwise it is noted, the notes
        emptied first once they hold `limit` (`a3fast.seen.seen_before`)."""
        return self.note(key, limit)

    cdef bint note(self, Py_hash_t key, Py_ssize_t limit) except -1:
        cdef uint64_t k = <uint64_t>key
        cdef Py_ssize_t at
        if k == 0:
            if self.has_zero:
                self.has_zero = False
                self.count -= 1
                return True
        else:
            at = self.find(k)
            if at >= 0:
                self.remove_at(at)
                return True
        if self.count >= limit:
            self.empty()
        self.insert(k)
        return False

    cdef Py_ssize_t find(self, uint64_t key) noexcept:
        """The slot holding `key` (not 0), or -1."""
        if self.cap == 0:
            return -1
        cdef Py_ssize_t mask = self.cap - 1
        cdef Py_ssize_t at = home_slot(key, self.shift)
        while self.keys[at] != 0:
            if self.keys[at] == key:
                return at
            at = (at + 1) & mask
        return -1

    cdef int insert(self, uint64_t key) except -1:
        """Note `key`, not held yet; the table doubles to stay at most half full."""
        cdef uint64_t* old = self.keys
        cdef Py_ssize_t old_cap = self.cap, i, at, mask
        if key == 0:
            self.has_zero = True
            self.count += 1
            return 0
        if (self.count + 1) * 2 > self.cap:
            self.cap = 16 if old_cap == 0 else old_cap * 2
            self.keys = <uint64_t*>calloc(self.cap, sizeof(uint64_t))
            if self.keys == NULL:
                self.keys, self.cap = old, old_cap
                raise MemoryError()
            self.shift = 60 if old_cap == 0 else self.shift - 1
            mask = self.cap - 1
            for i in range(old_cap):
                if old[i] != 0:
                    at = home_slot(old[i], self.shift)
                    while self.keys[at] != 0:
                        at = (at + 1) & mask
                    self.keys[at] = old[i]
            free(old)
        mask = self.cap - 1
        at = home_slot(key, self.shift)
        while self.keys[at] != 0:
            at = (at + 1) & mask
        self.keys[at] = key
        self.count += 1
        return 0

    cdef void remove_at(self, Py_ssize_t at) noexcept:
        """Take back the key at slot `at`, moving back the keys after it that probed past it, so
        that every key stays reachable from its home slot without a gap (no tombstones)."""
        cdef Py_ssize_t mask = self.cap - 1, j = at, home
        while True:
            j = (j + 1) & mask
            if self.keys[j] == 0:
                break
            home = home_slot(self.keys[j], self.shift)
            # the key at j stays unless its home lies cyclically outside (at, j]
            if (j > at and (home <= at or home > j)) or (j < at and home <= at and home > j):
                self.keys[at] = self.keys[j]
                at = j
        self.keys[at] = 0
        self.count -= 1

    cdef void empty(self) noexcept:
        if self.keys != NULL:
            memset(self.keys, 0, self.cap * sizeof(uint64_t))
        self.count = 0
        self.has_zero = False

    def clear(self):
        self.empty()

    def add(self, Py_hash_t key):
        cdef uint64_t k = <uint64_t>key
        if k == 0:
            if not self.has_zero:
                self.insert(0)
        elif self.find(k) < 0:
            self.insert(k)

    def discard(self, key):
        cdef uint64_t k
        if not _a_hash(key):
            return
        k = <uint64_t><Py_hash_t>key
        cdef Py_ssize_t at
        if k == 0:
            if self.has_zero:
                self.has_zero = False
                self.count -= 1
            return
        at = self.find(k)
        if at >= 0:
            self.remove_at(at)

    def update(self, keys):
        for key in keys:
            self.add(key)

    def __len__(self):
        return self.count

    def __contains__(self, key):
        if not _a_hash(key):
            return False
        cdef uint64_t k = <uint64_t><Py_hash_t>key
        return self.has_zero if k == 0 else self.find(k) >= 0

    def __iter__(self):
        cdef Py_ssize_t i
        out = [0] if self.has_zero else []
        for i in range(self.cap):
            if self.keys[i] != 0:
                out.append(<Py_hash_t>self.keys[i])
        return iter(out)

    def __repr__(self):
        return f"Notes({set(self)!r})"

    def __reduce__(self):
        # pickled and copied as the hashes it holds (its table is C memory)
        return notes_of, (list(self),)


def notes_of(keys):
    """A Notes holding `keys` (hashes): what a pickled or copied Notes is made again from."""
    cdef Notes notes = Notes()
    notes.update(keys)
    return notes


cdef inline Py_ssize_t home_slot(uint64_t key, int shift) noexcept:
    # Fibonacci hashing, the top bits of the product: small keys (a small int is its own hash)
    # would otherwise fill neighbouring slots
    return <Py_ssize_t>((key * 0x9E3779B97F4A7C15ULL) >> shift)


cdef bint _a_hash(object key):
    """Whether `key` is an int a hash can be (what the notes can hold; anything else is not in them,
    as no int of a set of ints equals it)."""
    if not isinstance(key, int):
        return False
    return -(2 ** 63) <= key < 2 ** 63


cdef bint note_in(object notes, Py_hash_t key, Py_ssize_t limit) except -1:
    """`a3fast.seen`'s rule on a cache's notes: a Notes without a Python call, any other
    (`seen.Notes`, a pure fleet's) by its `seen_before`. The compiled reader and `_core`'s cache
    rules both call it."""
    if type(notes) is Notes:
        return (<Notes>notes).note(key, limit)
    return notes.seen_before(key, limit)

cdef enum:
    RULE_NESTING = 128       # document.MAX_DEPTH: a container this deep breaks the rule
    MAX_VERSION_DIGITS = 19  # 2^63-1

cdef object _LATENCY_INTERACTIVE = "interactive"
cdef object _LATENCY_BATCH = "batch"


cdef bint no_surrogate(str text) noexcept:
    """The string can be written as UTF-8 (the document rule): no lone surrogate."""
    cdef int kind
    cdef void* data
    cdef Py_ssize_t i, n
    cdef Py_UCS4 c
    if PyUnicode_IS_ASCII(text):
        return True
    kind = PyUnicode_KIND(text)
    if kind == 1:  # Latin-1: no surrogate can be held
        return True
    data = PyUnicode_DATA(text)
    n = PyUnicode_GET_LENGTH(text)
    for i in range(n):
        c = PyUnicode_READ(kind, data, i)
        if 0xD800 <= c <= 0xDFFF:
            return False
    return True


cdef bint is_text_str(object value) noexcept:
    """schema's text rule (a non-empty string of at most MAX_TEXT characters, none of them a
    control character [\\x00-\\x1f\\x7f]), and the document rule's (no lone surrogate)."""
    cdef int kind
    cdef void* data
    cdef Py_ssize_t i, n
    cdef Py_UCS4 c
    if type(value) is not str:
        return False
    n = PyUnicode_GET_LENGTH(value)
    if n == 0 or n > MAX_TEXT:
        return False
    kind = PyUnicode_KIND(value)
    data = PyUnicode_DATA(value)
    if kind == 1:  # ASCII or Latin-1: no surrogate can be held
        for i in range(n):
            c = (<const unsigned char*>data)[i]
            if c < 0x20 or c == 0x7F:
                return False
        return True
    for i in range(n):
        c = PyUnicode_READ(kind, data, i)
        if c < 0x20 or c == 0x7F or 0xD800 <= c <= 0xDFFF:
            return False
    return True


cdef bint is_identifier_str(object value) noexcept:
    if type(value) is not str or not PyUnicode_IS_ASCII(value):
        return False
    return identifier_grammar(<const unsigned char*>PyUnicode_DATA(value), PyUnicode_GET_LENGTH(value))


cdef bint is_schema_version_str(object value) noexcept:
    if type(value) is not str or not PyUnicode_IS_ASCII(value):
        return False
    return is_schema_version(<const unsigned char*>PyUnicode_DATA(value), PyUnicode_GET_LENGTH(value))


cdef bint is_plain_key(object key) noexcept:
    return type(key) is str and no_surrogate(key)


cdef bint is_plain(object value, int depth) except -1:
    """`value`, found `depth` containers deep, certainly keeps the document rule (a3fast.document):
    JSON types only, integers within -2^63..2^64-1, finite floats, strings without lone surrogates,
    string keys, at most RULE_NESTING containers deep (the document itself is depth 0)."""
    cdef object t = type(value)
    cdef int overflow = 0
    cdef PyObject* key
    cdef PyObject* item
    cdef Py_ssize_t pos = 0
    if value is None or t is bool:
        return True
    if t is str:
        return no_surrogate(value)
    if t is int:
        PyLong_AsLongLongAndOverflow(value, &overflow)
        return overflow == 0 or (overflow > 0 and value.bit_length() <= 64)
    if t is float:
        return isfinite(<double>value)
    if depth >= RULE_NESTING:
        return False
    if t is list or t is tuple:
        for x in value:
            if not is_plain(x, depth + 1):
                return False
        return True
    if t is dict:
        while PyDict_Next(value, &pos, &key, &item):
            if not is_plain_key(<object>key) or not is_plain(<object>item, depth + 1):
                return False
        return True
    return False


cdef inline bint key_equals(const unsigned char* key, Py_ssize_t n, const char* word, Py_ssize_t m) noexcept:
    return n == m and memcmp(key, word, m) == 0


cdef object text_tuple(object items, bint identifiers):
    """The list's strings as a tuple, each a text (or identifier); None if it is not one."""
    cdef Py_ssize_t i, n
    cdef object item
    if type(items) is not list:
        return None
    n = PyList_GET_SIZE(items)
    for i in range(n):
        item = <object>PyList_GET_ITEM(items, i)
        if not (is_identifier_str(item) if identifiers else is_text_str(item)):
            return None
    return untracked_if_acyclic(PyList_AsTuple(items))


cdef object required_capability(RequirementsReader reader, object entry):
    """A required capability's shared Capability (schema's memo), or None if the entry is not one.
    Its other members (an `evaluation`, say) are not read, but must keep the document rule."""
    cdef PyObject* key
    cdef PyObject* item
    cdef Py_ssize_t pos = 0, n
    cdef const unsigned char* k
    cdef object name = None, version = None, found, versions
    cdef PyObject* found_ptr
    cdef PyObject* versions_ptr
    cdef int overflow = 0
    cdef long long number
    if type(entry) is not dict:
        return None
    while PyDict_Next(entry, &pos, &key, &item):
        if type(<object>key) is not str:
            return None
        if PyUnicode_IS_ASCII(<object>key):
            k = <const unsigned char*>PyUnicode_DATA(<object>key)
            n = PyUnicode_GET_LENGTH(<object>key)
            if key_equals(k, n, b"name", 4):
                name = <object>item
                continue
            if key_equals(k, n, b"version", 7):
                version = <object>item
                continue
        elif not no_surrogate(<object>key):
            return None
        if not is_plain(<object>item, 3):
            return None
    # the exact types first (a bool is not an int here, and version 1.0 would find version 1); the
    # memo (by name, then version) holds only checked names and versions, so the name's grammar
    # is read on a miss only
    if type(version) is not int or type(name) is not str:
        return None
    versions_ptr = PyDict_GetItemWithError(reader.capabilities, name)
    if versions_ptr != NULL:
        found_ptr = PyDict_GetItemWithError(<object>versions_ptr, version)
        if found_ptr != NULL:
            return <object>found_ptr
    if not is_identifier_str(name):
        return None
    number = PyLong_AsLongLongAndOverflow(version, &overflow)
    if overflow != 0 or number < 0:
        return None
    found = untracked_if_acyclic(reader.capability(name, version, None))
    # looked up again: making the capability ran Python code, during which another thread may have
    # kept a dict of versions for this name (and let go of the one found above)
    versions_ptr = PyDict_GetItemWithError(reader.capabilities, name)
    # kept within the memo's bounds, as schema's `_keep_required` keeps it
    if versions_ptr == NULL and PyDict_GET_SIZE(reader.capabilities) < reader.names_kept:
        versions = {}
        PyDict_SetItem(reader.capabilities, name, versions)
        versions_ptr = <PyObject*>versions
    if versions_ptr != NULL and PyDict_GET_SIZE(<object>versions_ptr) < reader.versions_kept:
        PyDict_SetItem(<object>versions_ptr, version, found)
    return found


cdef object capability_tuple(RequirementsReader reader, object items):
    cdef Py_ssize_t i, n
    cdef object capability, entry
    if type(items) is not list:
        return None
    n = PyList_GET_SIZE(items)
    if n == 0:
        return ()
    out = PyTuple_New(n)
    for i in range(n):
        # making a capability runs Python code, which may change the list (another thread holding
        # the document): each entry is held while it is read, and a list that changed its length
        # is left to the careful reader
        if PyList_GET_SIZE(items) != n:
            return None
        entry = <object>PyList_GET_ITEM(items, i)
        capability = required_capability(reader, entry)
        if capability is None:
            return None
        Py_INCREF(capability)
        PyTuple_SET_ITEM(out, i, capability)
    if PyList_GET_SIZE(items) != n:
        return None
    return untracked_if_acyclic(out)


cdef object latency_of(object model):
    """The model's latency class (the doc's own string, or None); False if the model is not one."""
    cdef PyObject* key
    cdef PyObject* item
    cdef Py_ssize_t pos = 0
    cdef object latency = None
    if type(model) is not dict:
        return False
    while PyDict_Next(model, &pos, &key, &item):
        if not is_plain_key(<object>key):
            return False
        if <object>key == "latency_class":
            latency = <object>item
        elif not is_plain(<object>item, 2):
            return False
    if latency is None:
        return None
    if type(latency) is str and (latency == _LATENCY_INTERACTIVE or latency == _LATENCY_BATCH):
        return latency
    return False


def requirements_reader(requirements, capability, dict capabilities, Py_ssize_t names_kept,
                        Py_ssize_t versions_kept, dict derived, Py_ssize_t derived_limit, object derived_once):
    """The compiled reader of plain requirements documents, building `requirements` (schema's
    Requirements) and `capability` (its Capability) objects: `capabilities` is the schema's memo
    of required capabilities by name, then version, kept to `names_kept` names of `versions_kept`
    versions each; `derived` is `predicates.DERIVED`, the memo of `predicates.derive` (to
    `derived_limit` sets), which this reader looks a set up in and adds a set it derives to, as
    `derive` does: from the set's second derivation on, the first noted by its hash in
    `derived_once` (`predicates.DERIVED_ONCE`)."""
    return RequirementsReader(requirements, capability, capabilities, names_kept, versions_kept, derived,
                              derived_limit, derived_once)


cdef class RequirementsReader:
    """Reads a dict as `schema.parse_requirements` does, or hands it back (see `read`)."""

    cdef object requirements, capability
    cdef dict capabilities, derived
    cdef object derived_once
    cdef Py_ssize_t names_kept, versions_kept, derived_limit

    def __init__(self, requirements, capability, dict capabilities, Py_ssize_t names_kept,
                 Py_ssize_t versions_kept, dict derived, Py_ssize_t derived_limit, object derived_once):
        self.requirements = requirements
        self.capability = capability
        self.capabilities = capabilities
        self.names_kept = names_kept
        self.versions_kept = versions_kept
        self.derived = derived
        self.derived_limit = derived_limit
        self.derived_once = derived_once

    def read(self, dict doc, bint decoded=False):
        """The §4 requirements of `doc` as `schema.parse_requirements` returns them — the same field
        values, `doc` itself, the shared required capabilities and derived predicates (the schema's
        and predicates' memos) — when `doc` is a valid requirements document that keeps the
        document rule; None when it is not, or is unusual (a subclass of a JSON type, say):
        `parse_requirements` then reads it itself. `decoded` (the document came from a JSON
        decoder, so keeps the rule) changes nothing here: the rule costs little beside the fields."""
        cdef PyObject* key
        cdef PyObject* item
        cdef Py_ssize_t pos = 0, n
        cdef const unsigned char* k
        cdef object value, v = None, capabilities = (), clearances = (), tools = (), exclude = ()
        cdef object residency = None, latency = None, session = None, agent_ref = None, kind = None
        cdef object predicates, req, derived_key
        cdef Py_hash_t derived_hash
        cdef int which
        while PyDict_Next(doc, &pos, &key, &item):
            value = <object>item
            if type(<object>key) is not str:
                return None
            which = 0
            if PyUnicode_IS_ASCII(<object>key):
                k = <const unsigned char*>PyUnicode_DATA(<object>key)
                n = PyUnicode_GET_LENGTH(<object>key)
                if key_equals(k, n, b"v", 1):
                    which = 1
                elif key_equals(k, n, b"capabilities", 12):
                    which = 2
                elif key_equals(k, n, b"clearances", 10):
                    which = 3
                elif key_equals(k, n, b"tools", 5):
                    which = 4
                elif key_equals(k, n, b"exclude", 7):
                    which = 5
                elif key_equals(k, n, b"model", 5):
                    which = 6
                elif key_equals(k, n, b"residency", 9):
                    which = 7
                elif key_equals(k, n, b"session", 7):
                    which = 8
                elif key_equals(k, n, b"agentRef", 8):
                    which = 9
                elif key_equals(k, n, b"kind", 4):
                    which = 10
            elif not no_surrogate(<object>key):
                return None
            if which == 0:                   # a member §4 does not define: kept, held to the rule
                if not is_plain(value, 1):
                    return None
            elif which == 1:
                if value is not None:        # null counts as absent, as for every optional member
                    if not is_schema_version_str(value):
                        return None
                    v = value
            elif which == 2:
                if value is not None:        # a list given as null is absent (reading 11)
                    capabilities = capability_tuple(self, value)
                    if capabilities is None:
                        return None
            elif which == 3:
                if value is not None:
                    clearances = text_tuple(value, True)
                    if clearances is None:
                        return None
            elif which == 4:
                if value is not None:
                    tools = text_tuple(value, False)
                    if tools is None:
                        return None
            elif which == 5:
                # `doc.get("exclude") or []`: any false value (null, false, 0, "", [], {}) is no
                # exclusion (docs/design.md, reading 11: traces written with one still verify)
                if not is_plain(value, 1):
                    return None
                if value:
                    exclude = text_tuple(value, False)
                    if exclude is None:
                        return None
            elif which == 6:
                if value is not None:
                    latency = latency_of(value)
                    if latency is False:
                        return None
            elif value is not None:
                if not is_text_str(value):
                    return None
                if which == 7:
                    residency = value
                elif which == 8:
                    session = value
                elif which == 9:
                    agent_ref = value
                else:
                    kind = value
        derived_key = untracked_if_acyclic((capabilities, clearances, tools, residency, latency, agent_ref, exclude))
        derived_hash = PyObject_Hash(derived_key)     # once for the lookup, the note and the store
        predicates = dict_get_hashed(self.derived, derived_key, derived_hash)
        if predicates is None:
            predicates = derive(capabilities, clearances, tools, residency, latency, agent_ref, exclude)
            # derive's rule for its memo: kept from the set's second derivation on
            if (PyDict_GET_SIZE(self.derived) < self.derived_limit
                    and note_in(self.derived_once, derived_hash, self.derived_limit)):
                dict_set_hashed(self.derived, derived_key, predicates, derived_hash)
        req = new_tuple_of(self.requirements, 12)
        put(req, 0, v)
        put(req, 1, capabilities)
        put(req, 2, clearances)
        put(req, 3, tools)
        put(req, 4, residency)
        put(req, 5, latency)
        put(req, 6, session)
        put(req, 7, agent_ref)
        put(req, 8, exclude)
        put(req, 9, kind)
        put(req, 10, doc)
        put(req, 11, predicates)
        return req


cdef inline void put(object fresh, Py_ssize_t i, object value) noexcept:
    """Fill item `i` of a tuple just made (PyTuple_SET_ITEM takes the reference it is given)."""
    Py_INCREF(value)
    PyTuple_SET_ITEM(fresh, i, value)


# -- §5 predicates, derived as predicates._derive derives them ----------------------------------------

cdef extern from "Python.h":
    object PyUnicode_New(Py_ssize_t size, Py_UCS4 maxchar)
    object PyUnicode_Concat(object left, object right)

cdef object _CLEARANCE = "clearance:"
cdef object _TOOL = "tool:"
cdef object _RESIDENCY = "residency:"
cdef object _LATENCY = "model.latency_class:"
cdef object _AGENT_REF = "agentRef:"
cdef object _ANTI_AFFINITY = "anti-affinity:"


cdef object capability_predicate(object capability):
    """`capability:{name}/{version}`: the name is an identifier, so ASCII, written straight in."""
    cdef object name = <object>PyTuple_GET_ITEM(capability, 0)
    cdef long long version = <object>PyTuple_GET_ITEM(capability, 1)
    cdef char digits[24]
    cdef Py_ssize_t n_digits = 0, n = PyUnicode_GET_LENGTH(name), i
    cdef unsigned long long rest = <unsigned long long>version
    cdef object out
    cdef unsigned char* p
    if not PyUnicode_IS_ASCII(name):  # never, for a name the reader checked
        return "capability:" + name + "/" + str(version)
    while True:
        digits[n_digits] = <char>(48 + rest % 10)
        n_digits += 1
        rest //= 10
        if rest == 0:
            break
    out = PyUnicode_New(11 + n + 1 + n_digits, 127)
    p = <unsigned char*>PyUnicode_DATA(out)
    memcpy(p, b"capability:", 11)
    memcpy(p + 11, PyUnicode_DATA(name), n)
    p[11 + n] = c'/'
    for i in range(n_digits):
        p[12 + n + i] = digits[n_digits - 1 - i]
    return out


# One predicate string for each value tasks state again and again, kept: tasks that differ as sets
# but share their values (a fleet's task types) then share their predicates' strings, and a string
# keeps its hash once computed, so the predicate set's hash, the rows' lookups and the caches find
# each one without hashing its text again; nor is it built again. Keyed by the value (an exact
# `str`; a required capability by its name, with its version), which is equal to every value giving
# the same predicate and to no other. As every cache here, it keeps a value from its second
# sighting on (`seen`'s rule, on notes of the values' hashes, each with its kind's), so a value met
# once leaves nothing in it; only values of at most KEPT_VALUE_LENGTH characters, and at most PREDICATES_KEPT of a kind,
# emptied when full: what any caller can fill it with stays small, and values that go on repeating
# come back. A predicate not kept is built as before, which changes nothing but its cost.
cdef Py_ssize_t PREDICATES_KEPT = 4096
cdef Py_ssize_t KEPT_VALUE_LENGTH = 64
cdef Py_ssize_t PREDICATES_NOTED = 16384
cdef dict _capability_predicates = {}
cdef dict _clearance_predicates = {}
cdef dict _tool_predicates = {}
cdef dict _residency_predicates = {}
cdef dict _latency_predicates = {}
cdef dict _agent_ref_predicates = {}
cdef dict _anti_affinity_predicates = {}
cdef Notes _predicates_noted = Notes()


cdef int keep_predicate(dict kept, object value, Py_hash_t kind, object predicate) except -1:
    """Keep `predicate` under its value's text `value` when the value is short and was seen before
    as the same kind of predicate (`kind`, mixed into the noted hash: a name met as a tool and as a
    clearance is met once as each); a full memo is emptied first."""
    if PyUnicode_GET_LENGTH(value) > KEPT_VALUE_LENGTH:
        return 0
    if not _predicates_noted.note(PyObject_Hash(value) ^ kind, PREDICATES_NOTED):
        return 0
    if PyDict_GET_SIZE(kept) >= PREDICATES_KEPT:
        kept.clear()
    PyDict_SetItem(kept, value, predicate)
    return 0


cdef inline object kept_predicate(dict kept, object prefix, object value):
    """`prefix + value`, the string kept for `value` when there is one (see PREDICATES_KEPT)."""
    cdef PyObject* found = PyDict_GetItemWithError(kept, value)
    if found != NULL:
        return <object>found
    predicate = PyUnicode_Concat(prefix, value)
    keep_predicate(kept, value, PyObject_Hash(prefix), predicate)
    return predicate


cdef inline object kept_capability_predicate(object capability):
    """`capability_predicate(capability)`, the string kept for its name at its version when there
    is one: kept by name (whose hash the string holds), with the version it was made for, so one
    version of each name is kept at a time."""
    cdef object name = <object>PyTuple_GET_ITEM(capability, 0)
    cdef object version = <object>PyTuple_GET_ITEM(capability, 1)
    cdef PyObject* found = PyDict_GetItemWithError(_capability_predicates, name)
    if found != NULL and <object>PyTuple_GET_ITEM(<object>found, 0) == version:
        return <object>PyTuple_GET_ITEM(<object>found, 1)
    predicate = capability_predicate(capability)
    # noted by its name at its version: two versions of one name are two predicates, each met once.
    # The version (0 to 2^63-1, as the reader checked) times an odd constant, modulo 2^64: no two
    # versions mix alike (an int's own hash is taken modulo 2^61-1, so 1 and 2^61 would)
    cdef int overflow = 0
    cdef unsigned long long number = <unsigned long long>PyLong_AsLongLongAndOverflow(version, &overflow)
    keep_predicate(_capability_predicates, name, <Py_hash_t>(number * 0x9E3779B97F4A7C15ULL + 1),
                   (version, predicate))
    return predicate


#: The bounds of the kept predicate strings (their number of a kind, a value's length), for the
#: tests of them.
KEPT_PREDICATES_LIMIT = PREDICATES_KEPT
KEPT_VALUE_LENGTH_LIMIT = KEPT_VALUE_LENGTH


def forget_kept_predicates() -> None:
    """Let go of every kept predicate string (for the tests, which fill the memo to its bound)."""
    for kept in (_capability_predicates, _clearance_predicates, _tool_predicates, _residency_predicates,
                 _latency_predicates, _agent_ref_predicates, _anti_affinity_predicates):
        kept.clear()
    _predicates_noted.clear()


def kept_predicates() -> dict:
    """How many predicate strings are kept, by kind (for the tests of their bound)."""
    return {"capability": len(_capability_predicates), "clearance": len(_clearance_predicates),
            "tool": len(_tool_predicates), "residency": len(_residency_predicates),
            "model.latency_class": len(_latency_predicates), "agentRef": len(_agent_ref_predicates),
            "anti-affinity": len(_anti_affinity_predicates)}


cdef object derive(tuple capabilities, tuple clearances, tuple tools, object residency, object latency,
                   object agent_ref, tuple exclude):
    """predicates._derive: capabilities, clearances, tools, residency, latency class, agentRef,
    anti-affinity, in that order, a predicate that repeats keeping its first place."""
    cdef list out = []
    cdef object item
    for item in capabilities:
        out.append(kept_capability_predicate(item))
    for item in clearances:
        out.append(kept_predicate(_clearance_predicates, _CLEARANCE, item))
    for item in tools:
        out.append(kept_predicate(_tool_predicates, _TOOL, item))
    if residency is not None:
        out.append(kept_predicate(_residency_predicates, _RESIDENCY, residency))
    if latency is not None:
        out.append(kept_predicate(_latency_predicates, _LATENCY, latency))
    if agent_ref is not None:
        out.append(kept_predicate(_agent_ref_predicates, _AGENT_REF, agent_ref))
    for item in exclude:
        out.append(kept_predicate(_anti_affinity_predicates, _ANTI_AFFINITY, item))
    if has_repeat(out):
        return untracked_if_acyclic(tuple(dict.fromkeys(out)))
    return untracked_if_acyclic(PyList_AsTuple(out))


cdef bint has_repeat(list items) except -1:
    """Whether a string occurs twice in `items`: compared pairwise while there are few (a set of
    predicates is short: no dict to build, no string to hash)."""
    cdef Py_ssize_t n = PyList_GET_SIZE(items), i, j
    cdef str a
    if n > 24:
        return PyDict_GET_SIZE(dict.fromkeys(items)) != n
    for i in range(1, n):
        a = <str>PyList_GET_ITEM(items, i)
        for j in range(i):
            if same_text(a, <str>PyList_GET_ITEM(items, j)):
                return True
    return False


cdef inline bint same_text(str a, str b) noexcept:
    """`a == b` without a call: a string is stored in the narrowest kind its characters fit, so two
    equal strings have the same kind and length, then the same bytes (most predicates of a set
    differ in length already)."""
    cdef Py_ssize_t n = PyUnicode_GET_LENGTH(a)
    cdef int kind = PyUnicode_KIND(a)
    if n != PyUnicode_GET_LENGTH(b) or kind != PyUnicode_KIND(b):
        return False
    return memcmp(PyUnicode_DATA(a), PyUnicode_DATA(b), n * kind) == 0


# -- a request line judged and an answer's records framed, each in one pass over the bytes ---------

cdef extern from *:
    """
    /* Whether text has at most `limit` opening brackets and no run of 19 ASCII digits, eight bytes
       at a time: a word without a digit only adds its brackets (each byte's test exact, no carry
       between bytes); a word with one is walked a byte at a time for the run. */
    /* One byte walked: a digit lengthens the run (false once it is 19), a bracket is counted. */
    static inline int a3_plain_byte(unsigned char c, Py_ssize_t* run, Py_ssize_t* brackets) {
        if ((unsigned char)(c - 48) < 10)
            return ++*run < 19;
        *run = 0;
        *brackets += c == 91 || c == 123;
        return 1;
    }
    static int a3_plainly_within(const unsigned char* p, Py_ssize_t n, Py_ssize_t limit) {
        const uint64_t ones = 0x0101010101010101ULL, low7 = 0x7F7F7F7F7F7F7F7FULL;
        const uint64_t highs = 0x8080808080808080ULL;
        Py_ssize_t i = 0, brackets = 0, run = 0;
        for (; i + 8 <= n; i += 8) {
            uint64_t w = a3_load_le64(p + i), t = w & low7;
            /* high bit of a byte: 0x30 <= byte <= 0x39 (an ASCII byte at least '0', not past '9') */
            uint64_t digits = (t + ones * 0x50) & ~(t + ones * 0x46) & ~w & highs;
            if (digits == 0) {
                uint64_t a = w ^ (ones * 0x5B), b = w ^ (ones * 0x7B);  /* zero where '[' or '{' */
                uint64_t found = ~(((a & low7) + low7) | a | low7) | ~(((b & low7) + low7) | b | low7);
                while (found) {
                    found &= found - 1;
                    brackets++;
                }
                run = 0;
                continue;
            }
            for (int k = 0; k < 8; k++) {
                if (!a3_plain_byte(p[i + k], &run, &brackets)) return 0;
            }
        }
        for (; i < n; i++) {
            if (!a3_plain_byte(p[i], &run, &brackets)) return 0;
        }
        return brackets <= limit;
    }
    """
    bint a3_plainly_within(const unsigned char* p, Py_ssize_t n, Py_ssize_t limit) noexcept nogil


def plainly_within(data, Py_ssize_t limit):
    """`document.plainly_within` of bytes, in one pass and no copy: at most `limit` opening
    brackets (`[` or `{`) and no run of 19 ASCII digits. The service asks it of every request line
    before decoding it, where two counts, a translated copy and a search took a microsecond. Any
    other value is judged by that definition itself (text by its own test; other objects never)."""
    if type(data) is not bytes:
        from .document import plainly_within as defined
        return defined(data, limit)
    return a3_plainly_within(<const unsigned char*>PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data), limit)


def lines_array(data, bytes prefix=b"", bytes suffix=b""):
    """JSON Lines as one JSON array, the records undecoded: `prefix` + `[` + the lines without their
    final newlines, each newline between them a comma, + `]` + `suffix` (`operations.records_array`;
    a stdio answer line framed around its records), in one copy. Other bytes-like objects are read
    as their bytes (a copy more); text is refused (TypeError)."""
    if isinstance(data, str):
        raise TypeError("lines_array reads bytes, not text")
    if prefix is None or suffix is None:
        raise TypeError("lines_array's prefix and suffix are bytes")
    cdef bytes lines = data if type(data) is bytes else bytes(memoryview(data))
    cdef const char* src = PyBytes_AS_STRING(lines)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(lines)
    cdef Py_ssize_t head = PyBytes_GET_SIZE(prefix), tail = PyBytes_GET_SIZE(suffix)
    while n > 0 and src[n - 1] == c'\n':
        n -= 1
    cdef bytes out = PyBytes_FromStringAndSize(NULL, head + n + 2 + tail)
    cdef char* dst = PyBytes_AS_STRING(out)
    cdef char* at
    cdef char* end = dst + head + 1 + n
    memcpy(dst, PyBytes_AS_STRING(prefix), head)
    dst[head] = c'['
    memcpy(dst + head + 1, src, n)
    end[0] = c']'
    memcpy(end + 1, PyBytes_AS_STRING(suffix), tail)
    at = <char*>memchr(dst + head + 1, c'\n', n)
    while at != NULL:
        at[0] = c','
        at = <char*>memchr(at + 1, c'\n', end - at - 1)
    return out
