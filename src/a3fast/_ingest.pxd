# cython: language_level=3
# What a3fast._core takes from this module at C level: the caches' notes, and the rule on any
# cache's notes (`note_in`).
from libc.stdint cimport uint64_t


cdef class Notes:
    cdef uint64_t* keys        # open addressing, linear probing; 0 marks an empty slot
    cdef Py_ssize_t cap        # slots (a power of two, or 0 before the first note)
    cdef Py_ssize_t count      # keys held, the zero key included
    cdef int shift             # 64 - log2(cap): a key's home slot is the top bits of its product
    cdef bint has_zero         # whether the key 0, which cannot sit in a slot, is held

    cdef bint note(self, Py_hash_t key, Py_ssize_t limit) except -1
    cdef Py_ssize_t find(self, uint64_t key) noexcept
    cdef int insert(self, uint64_t key) except -1
    cdef void remove_at(self, Py_ssize_t at) noexcept
    cdef void empty(self) noexcept


cdef bint note_in(object notes, Py_hash_t key, Py_ssize_t limit) except -1
