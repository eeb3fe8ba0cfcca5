# cython: language_level=3
# What a3fast._core takes from this module at C level: the caches' notes, the rule on any
# cache's notes (`note_in`), and a dict's lookup and store with the key's hash given.
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


cdef extern from *:
    """
    /* A cache's lookup and store with its key's hash given: a tuple's hash is not kept, so a key
       hashed once serves a cache's lookup, its note and its store, where each would hash it again
       (a predicate set of a dozen strings costs about 200 instructions a hash). The lookup is a
       new reference, None when the key is absent, NULL with an exception only if comparing keys
       raised. Where the interpreter does not export the calls with a known hash (3.13 on), the
       dict hashes the key again. */
    static PyObject* a3_dict_get_hashed(PyObject* d, PyObject* key, Py_hash_t hash) {
    #if PY_VERSION_HEX < 0x030D0000
        PyObject* found = _PyDict_GetItem_KnownHash(d, key, hash);
    #else
        PyObject* found = PyDict_GetItemWithError(d, key);
        (void)hash;
    #endif
        if (found == NULL) {
            if (PyErr_Occurred()) return NULL;
            found = Py_None;
        }
        Py_INCREF(found);
        return found;
    }
    static int a3_dict_set_hashed(PyObject* d, PyObject* key, PyObject* value, Py_hash_t hash) {
    #if PY_VERSION_HEX < 0x030D0000
        return _PyDict_SetItem_KnownHash(d, key, value, hash);
    #else
        (void)hash;
        return PyDict_SetItem(d, key, value);
    #endif
    }
    """
    object dict_get_hashed "a3_dict_get_hashed"(dict d, object key, Py_hash_t hash)
    int dict_set_hashed "a3_dict_set_hashed"(dict d, object key, object value, Py_hash_t hash) except -1
