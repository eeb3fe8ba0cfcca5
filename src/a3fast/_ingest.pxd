# cython: language_level=3
# What a3fast._core takes from this module at C level: the caches' notes, the rule on any
# cache's notes (`note_in`), a dict's lookup and store with the key's hash given, and a container
# let out of the cyclic collector's passes when it cannot be part of a cycle.
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
    /* A tuple or list made here let out of the cyclic collector's passes when none of its items
       can lead back to it: CPython's own rule for a tuple (it untracks one whose items are all
       untracked at the first collection that meets it), applied when it is made, so that the
       young collection a batch's placements meet does not walk thousands of tuples of strings
       and lists of row ids only to let them go (docs/performance.md, "Containers the collector
       need not walk"). An item may lead back if the collector tracks it, or if it is a container
       that could come to be tracked (a dict is untracked while it holds no container and tracked
       again when it takes one); a tuple with no `__dict__`, and a list this code untracked and
       never changes, stay as they are. Untracking a list is sound only because the lists given
       here (a task's rows) are never changed after: nothing is ever added to them. */
    static int a3_may_lead_back(PyObject* item) {
        if (!PyObject_IS_GC(item)) return 0;
        if (PyObject_GC_IsTracked(item)) return 1;
        if (PyTuple_Check(item) && Py_TYPE(item)->tp_dictoffset == 0) return 0;
        return !PyList_CheckExact(item);
    }
    static PyObject* a3_untracked_if_acyclic(PyObject* c) {
        Py_ssize_t i, n;
        PyObject** items;
        Py_INCREF(c);
        /* only a tuple with no __dict__ or an exact list; anything else is handed back as it is */
        if (PyTuple_Check(c) && Py_TYPE(c)->tp_dictoffset == 0) {
            n = PyTuple_GET_SIZE(c);
            items = ((PyTupleObject*)c)->ob_item;
        } else if (PyList_CheckExact(c)) {
            n = PyList_GET_SIZE(c);
            items = ((PyListObject*)c)->ob_item;
        } else {
            return c;
        }
        for (i = 0; i < n; i++)
            if (a3_may_lead_back(items[i])) return c;
        PyObject_GC_UnTrack(c);
        return c;
    }
    """
    object untracked_if_acyclic "a3_untracked_if_acyclic"(object container)
    object dict_get_hashed "a3_dict_get_hashed"(dict d, object key, Py_hash_t hash)
    int dict_set_hashed "a3_dict_set_hashed"(dict d, object key, object value, Py_hash_t hash) except -1
