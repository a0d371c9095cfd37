/* kvd/commands/_hll.c: the register loops of HyperLogLog sketches (kvd/commands/hll.py), in C.
 *
 * A dense sketch has 16384 registers of 6 bits, which every count or merge reads; a sparse one is up to
 * hll-sparse-max-bytes (3000) of run-length opcodes, which every write scans. In Python (hll.py's fallbacks)
 * a sparse write is up to 1 ms, a histogram 0.8 ms and a merge of two sketches 1.3 ms; a hash 1 us. Here each
 * is a plain loop over at most 16 KiB:
 *
 *   pattern(element) -> (index, count)   MurmurHash64A with Redis's seed; the register the element falls in
 *                                         and the run of zeros (+1) of the hash's upper 50 bits
 *   unpack(packed) -> bytearray           12288 bytes of 6-bit registers -> 16384 bytes, one per register
 *   pack(registers) -> bytes              the reverse; every register must be below 64
 *   dense_set(sketch, index, count)       raise register ``index`` of a dense sketch (the whole string, a
 *       -> bool                           writable buffer) to ``count`` in place; True if it grew
 *   sparse_set(sketch, index, count,      Redis's hllSparseSet on a sparse sketch in a bytearray, in place:
 *       max_bytes) -> int                 0 no change, 1 grew, 2 must turn dense first, -1 corrupt
 *   sparse_registers(sketch)              a sparse sketch's registers, one byte each; None unless its opcodes
 *       -> bytearray | None               cover exactly 16384
 *   histogram(registers) -> list          how many registers hold each value 0..63
 *   merge_max(into, registers) -> None    into[i] = max(into[i], registers[i]), in place
 *   nonzero(registers) -> list            the indexes of the registers that are not zero
 *   max_registers(sketches)               the registerwise maximum of whole sketches, dense or sparse, in one
 *       -> bytearray | None               pass (PFCOUNT of several keys, PFMERGE); None if one is corrupt
 *
 * The bit layout is Redis's: register i starts at bit 6 * i, bits numbered from the least significant bit
 * of byte 0 up. tests/unit/test_hll.py compares each function with its Python twin and with a bit-by-bit
 * model. No GIL release: each call is microseconds.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define P 14
#define REGISTERS (1 << P)
#define Q (64 - P)
#define PACKED (REGISTERS * 6 / 8)
#define HEADER 16
#define SPARSE_VAL_MAX_VALUE 32
#define SPARSE_VAL_MAX_LEN 4
#define SPARSE_ZERO_MAX_LEN 64

static uint64_t murmur64a(const unsigned char *data, size_t len) {
    const uint64_t m = 0xc6a4a7935bd1e995ULL;
    const int r = 47;
    uint64_t h = 0xadc83b19ULL ^ (len * m);
    size_t whole = len & ~(size_t)7;
    for (size_t i = 0; i < whole; i += 8) {
        uint64_t k = 0;
        for (int b = 7; b >= 0; b--) /* little endian whatever the host */
            k = (k << 8) | data[i + b];
        k *= m;
        k ^= k >> r;
        k *= m;
        h ^= k;
        h *= m;
    }
    size_t tail = len & 7;
    if (tail) {
        for (size_t b = tail; b-- > 0;)
            h ^= (uint64_t)data[whole + b] << (8 * b);
        h *= m;
    }
    h ^= h >> r;
    h *= m;
    h ^= h >> r;
    return h;
}

static PyObject *pattern(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    uint64_t hash = murmur64a(view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    long index = (long)(hash & (REGISTERS - 1));
    uint64_t rest = (hash >> P) | ((uint64_t)1 << Q);
    return Py_BuildValue("(li)", index, __builtin_ctzll(rest) + 1);
}

static int exact(Py_buffer *view, Py_ssize_t len, const char *what) {
    if (view->len != len) {
        PyErr_Format(PyExc_ValueError, "%s must be %zd bytes, not %zd", what, len, view->len);
        return -1;
    }
    return 0;
}

/* The 16384 6-bit registers at ``in`` (PACKED bytes), one byte each into ``regs``. */
static void unpack_into(unsigned char *regs, const unsigned char *in) {
    for (int i = 0; i < REGISTERS; i += 4, in += 3) {
        regs[i] = in[0] & 63;
        regs[i + 1] = (unsigned char)((in[0] >> 6) | ((in[1] & 15) << 2));
        regs[i + 2] = (unsigned char)((in[1] >> 4) | ((in[2] & 3) << 4));
        regs[i + 3] = in[2] >> 2;
    }
}

/* a[i] = max(a[i], b[i]) for every register; branch-free, so that the compiler vectorises it. */
static void max_into(unsigned char *a, const unsigned char *b) {
    for (int i = 0; i < REGISTERS; i++)
        a[i] = a[i] > b[i] ? a[i] : b[i];
}

static PyObject *unpack(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (exact(&view, PACKED, "packed registers") < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    PyObject *out = PyByteArray_FromStringAndSize(NULL, REGISTERS);
    if (out != NULL)
        unpack_into((unsigned char *)PyByteArray_AS_STRING(out), view.buf);
    PyBuffer_Release(&view);
    return out;
}

static PyObject *pack(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (exact(&view, REGISTERS, "registers") < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    const unsigned char *regs = view.buf;
    for (int i = 0; i < REGISTERS; i++) {
        if (regs[i] > 63) {
            PyBuffer_Release(&view);
            return PyErr_Format(PyExc_ValueError, "register %d holds %d, above 63", i, regs[i]);
        }
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, PACKED);
    if (out != NULL) {
        unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
        for (int i = 0; i < REGISTERS; i += 4, p += 3) {
            p[0] = (unsigned char)(regs[i] | (regs[i + 1] << 6));
            p[1] = (unsigned char)((regs[i + 1] >> 2) | (regs[i + 2] << 4));
            p[2] = (unsigned char)((regs[i + 2] >> 4) | (regs[i + 3] << 2));
        }
    }
    PyBuffer_Release(&view);
    return out;
}

/* Raise register ``index`` of a dense sketch (the whole string, header included) to ``count``. */
static PyObject *dense_set(PyObject *self, PyObject *args) {
    Py_buffer view;
    int index, count;
    if (!PyArg_ParseTuple(args, "w*ii", &view, &index, &count))
        return NULL;
    if (exact(&view, HEADER + PACKED, "a dense sketch") < 0 || index < 0 || index >= REGISTERS || count < 0 ||
        count > 63) {
        PyBuffer_Release(&view);
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "register index or count out of range");
        return NULL;
    }
    unsigned char *p = (unsigned char *)view.buf + HEADER;
    int bit = index * 6, at = bit >> 3, shift = bit & 7;
    unsigned pair = p[at] | (at + 1 < PACKED ? (unsigned)p[at + 1] << 8 : 0);
    int grew = (int)((pair >> shift) & 63) < count;
    if (grew) {
        pair = (pair & ~(63u << shift)) | ((unsigned)count << shift);
        p[at] = (unsigned char)pair;
        if (at + 1 < PACKED)
            p[at + 1] = (unsigned char)(pair >> 8);
    }
    PyBuffer_Release(&view);
    return PyBool_FromLong(grew);
}

/* The sparse opcode at p (end: the end of the string): registers covered, value (0: zeros), bytes. An XZERO cut
 * by the end of the string reads its second byte as 0, the NUL Redis finds after its strings. */
static void opcode(const unsigned char *p, const unsigned char *end, long *run, int *value, int *size) {
    if (*p & 0x80) {
        *run = (*p & 3) + 1;
        *value = ((*p >> 2) & 0x1f) + 1;
        *size = 1;
    } else if (*p & 0x40) {
        *run = ((long)(*p & 0x3f) << 8 | (p + 1 < end ? p[1] : 0)) + 1;
        *value = 0;
        *size = 2;
    } else {
        *run = (*p & 0x3f) + 1;
        *value = 0;
        *size = 1;
    }
}

static unsigned char val_op(int value, long run) { return (unsigned char)(0x80 | ((value - 1) << 2) | (run - 1)); }

/* An opcode for ``run`` zero registers into out: ZERO up to 64, XZERO beyond; returns its length. */
static int zeros_op(unsigned char *out, long run) {
    if (run > SPARSE_ZERO_MAX_LEN) {
        out[0] = (unsigned char)(0x40 | ((run - 1) >> 8));
        out[1] = (unsigned char)((run - 1) & 0xff);
        return 2;
    }
    out[0] = (unsigned char)(run - 1);
    return 1;
}

/* Step 4 of Redis's hllSparseSet: from ``from`` (the opcode before the changed one, or the first), five steps
 * at most, fold a VAL into the next when both hold the same value and together cover at most four registers.
 * Returns the new length of the string. */
static Py_ssize_t fold(unsigned char *s, Py_ssize_t from, Py_ssize_t len) {
    Py_ssize_t p = from;
    for (int step = 0; step < 5 && p < len; step++) {
        unsigned char b = s[p];
        if (!(b & 0x80)) {
            p += (b & 0x40) ? 2 : 1;
            continue;
        }
        if (p + 1 < len && (s[p + 1] & 0x80)) {
            unsigned char n = s[p + 1];
            int runs = (b & 3) + (n & 3) + 2;
            if (((b ^ n) & 0x7c) == 0 && runs <= SPARSE_VAL_MAX_LEN) {
                s[p + 1] = (unsigned char)((n & 0xfc) | (runs - 1));
                memmove(s + p, s + p + 1, (size_t)(len - p - 1));
                len--;
                continue;
            }
        }
        p++;
    }
    return len;
}

/* sparse_set(sketch, index, count, sparse_max_bytes): Redis's hllSparseSet on a sparse sketch held in a
 * bytearray (the whole string), changed in place. Returns 0 (no change), 1 (grew), 2 (must turn dense first:
 * nothing was changed) or -1 (the register is not covered: corrupt). hll.py's sparse_set_python is the same. */
static PyObject *sparse_set(PyObject *self, PyObject *args) {
    PyObject *obj;
    long index, max_bytes;
    int count;
    if (!PyArg_ParseTuple(args, "O!lil", &PyByteArray_Type, &obj, &index, &count, &max_bytes))
        return NULL;
    if (index < 0 || index >= REGISTERS || count < 1 || count > 63)
        return PyErr_Format(PyExc_ValueError, "register %ld or count %d out of range", index, count);
    if (count > SPARSE_VAL_MAX_VALUE)
        return PyLong_FromLong(2);
    Py_ssize_t len = PyByteArray_GET_SIZE(obj);
    unsigned char *s = (unsigned char *)PyByteArray_AS_STRING(obj);
    const unsigned char *end = s + len;
    Py_ssize_t p = HEADER, prev = -1;
    long first = 0, run = 0;
    int value = 0, size = 0, found = 0;
    while (p < len) {
        opcode(s + p, end, &run, &value, &size);
        if (index < first + run) {
            found = 1;
            break;
        }
        prev = p;
        p += size;
        first += run;
    }
    if (!found || p + size > len)
        return PyLong_FromLong(-1);
    Py_ssize_t from = prev >= 0 ? prev : HEADER;
    if (value) {
        if (value >= count)
            return PyLong_FromLong(0);
        if (run == 1) {
            s[p] = val_op(count, 1);
            if (PyByteArray_Resize(obj, fold(s, from, len)) < 0)
                return NULL;
            return PyLong_FromLong(1);
        }
    } else if (run == 1 && size == 1) {
        s[p] = val_op(count, 1);
        if (PyByteArray_Resize(obj, fold(s, from, len)) < 0)
            return NULL;
        return PyLong_FromLong(1);
    }
    unsigned char seq[5];
    int n = 0;
    long last = first + run - 1;
    if (index != first) {
        if (value)
            seq[n++] = val_op(value, index - first);
        else
            n += zeros_op(seq + n, index - first);
    }
    seq[n++] = val_op(count, 1);
    if (index != last) {
        if (value)
            seq[n++] = val_op(value, last - index);
        else
            n += zeros_op(seq + n, last - index);
    }
    Py_ssize_t delta = n - size;
    if (delta > 0 && len + delta > max_bytes)
        return PyLong_FromLong(2);
    if (delta > 0) {
        if (PyByteArray_Resize(obj, len + delta) < 0)
            return NULL;
        s = (unsigned char *)PyByteArray_AS_STRING(obj);
    }
    memmove(s + p + n, s + p + size, (size_t)(len - p - size));
    memcpy(s + p, seq, (size_t)n);
    len += delta;
    if (PyByteArray_Resize(obj, fold(s, from, len)) < 0)
        return NULL;
    return PyLong_FromLong(1);
}

static PyObject *histogram(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    /* Most registers of a small sketch are zero, and counting a run of equal bytes into one counter is a chain
     * of dependent increments: whole zero words are counted at once, the other bytes into four tables. */
    Py_ssize_t counts[4][256] = {{0}};
    const unsigned char *regs = view.buf;
    Py_ssize_t i = 0;
    for (; i + 8 <= view.len; i += 8) {
        uint64_t word;
        memcpy(&word, regs + i, 8);
        if (word == 0) {
            counts[0][0] += 8;
            continue;
        }
        for (int k = 0; k < 8; k++)
            counts[k & 3][regs[i + k]]++;
    }
    for (; i < view.len; i++)
        counts[0][regs[i]]++;
    PyBuffer_Release(&view);
    for (int v = 0; v < 256; v++)
        counts[0][v] += counts[1][v] + counts[2][v] + counts[3][v];
    for (int v = 64; v < 256; v++) {
        if (counts[0][v])
            return PyErr_Format(PyExc_ValueError, "a register holds %d, above 63", v);
    }
    PyObject *out = PyList_New(64);
    if (out == NULL)
        return NULL;
    for (int v = 0; v < 64; v++) {
        PyObject *n = PyLong_FromSsize_t(counts[0][v]);
        if (n == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, v, n);
    }
    return out;
}

/* Raise regs to the registers of a sparse sketch (the whole string); 0, or -1 unless its opcodes cover exactly
 * 16384 registers. */
static int raise_to_sparse(unsigned char *regs, const unsigned char *s, Py_ssize_t len) {
    const unsigned char *p = s + (len < HEADER ? len : HEADER), *end = s + len;
    long first = 0, run;
    int value, size;
    while (p < end) {
        opcode(p, end, &run, &value, &size);
        if (first + run > REGISTERS)
            return -1;
        for (long i = first; value && i < first + run; i++)
            regs[i] = regs[i] > value ? regs[i] : (unsigned char)value;
        p += size;
        first += run;
    }
    return first == REGISTERS ? 0 : -1;
}

/* sparse_registers(sketch) -> bytearray | None: a sparse sketch's registers, one byte each; None unless its
 * opcodes cover exactly 16384 registers. */
static PyObject *sparse_registers(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *out = PyByteArray_FromStringAndSize(NULL, REGISTERS);
    int corrupt = 0;
    if (out != NULL) {
        unsigned char *regs = (unsigned char *)PyByteArray_AS_STRING(out);
        memset(regs, 0, REGISTERS);
        corrupt = raise_to_sparse(regs, view.buf, view.len) < 0;
    }
    PyBuffer_Release(&view);
    if (corrupt) {
        Py_DECREF(out);
        Py_RETURN_NONE;
    }
    return out;
}

/* max_registers(sketches) -> bytearray | None: the registerwise maximum of sketches whose headers hll.check
 * passed (PFCOUNT of several keys, PFMERGE), without a bytearray per sketch; None if one is corrupt. */
static PyObject *max_registers(PyObject *self, PyObject *arg) {
    PyObject *seq = PySequence_Fast(arg, "max_registers takes a sequence of sketches");
    if (seq == NULL)
        return NULL;
    PyObject *out = PyByteArray_FromStringAndSize(NULL, REGISTERS);
    if (out == NULL) {
        Py_DECREF(seq);
        return NULL;
    }
    unsigned char *regs = (unsigned char *)PyByteArray_AS_STRING(out);
    memset(regs, 0, REGISTERS);
    int corrupt = 0;
    for (Py_ssize_t j = 0; j < PySequence_Fast_GET_SIZE(seq) && !corrupt; j++) {
        Py_buffer view;
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(seq, j), &view, PyBUF_SIMPLE) < 0) {
            Py_DECREF(seq);
            Py_DECREF(out);
            return NULL;
        }
        if (view.len < HEADER || (((const unsigned char *)view.buf)[4] == 0 && view.len != HEADER + PACKED)) {
            PyBuffer_Release(&view);
            Py_DECREF(seq);
            Py_DECREF(out);
            return PyErr_Format(PyExc_ValueError, "sketch %zd has no valid header", j);
        }
        if (((const unsigned char *)view.buf)[4] == 0) { /* dense */
            unsigned char mine[REGISTERS];
            unpack_into(mine, (const unsigned char *)view.buf + HEADER);
            max_into(regs, mine);
        } else {
            corrupt = raise_to_sparse(regs, view.buf, view.len) < 0;
        }
        PyBuffer_Release(&view);
    }
    Py_DECREF(seq);
    if (corrupt) {
        Py_DECREF(out);
        Py_RETURN_NONE;
    }
    return out;
}

/* nonzero(registers) -> list: the indexes of the registers that are not zero, skipping zero words at once. */
static PyObject *nonzero(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *out = PyList_New(0);
    const unsigned char *regs = view.buf;
    for (Py_ssize_t i = 0; out != NULL && i < view.len; i++) {
        if ((i & 7) == 0 && i + 8 <= view.len) {
            uint64_t word;
            memcpy(&word, regs + i, 8);
            if (word == 0) {
                i += 7;
                continue;
            }
        }
        if (regs[i]) {
            PyObject *index = PyLong_FromSsize_t(i);
            if (index == NULL || PyList_Append(out, index) < 0)
                Py_CLEAR(out);
            Py_XDECREF(index);
        }
    }
    PyBuffer_Release(&view);
    return out;
}

static PyObject *merge_max(PyObject *self, PyObject *args) {
    Py_buffer into, regs;
    if (!PyArg_ParseTuple(args, "w*y*", &into, &regs))
        return NULL;
    PyObject *result = NULL;
    if (exact(&into, REGISTERS, "into") == 0 && exact(&regs, REGISTERS, "registers") == 0) {
        max_into(into.buf, regs.buf);
        result = Py_NewRef(Py_None);
    }
    PyBuffer_Release(&into);
    PyBuffer_Release(&regs);
    return result;
}

static PyMethodDef methods[] = {
    {"pattern", pattern, METH_O, "pattern(element) -> (register index, count)"},
    {"unpack", unpack, METH_O, "unpack(packed) -> bytearray of 16384 registers"},
    {"pack", pack, METH_O, "pack(registers) -> bytes of 12288 (6 bits a register)"},
    {"dense_set", dense_set, METH_VARARGS, "dense_set(sketch, index, count) -> True if the register grew"},
    {"sparse_set", sparse_set, METH_VARARGS, "sparse_set(sketch, index, count, max_bytes) -> 0, 1, 2 or -1"},
    {"sparse_registers", sparse_registers, METH_O, "sparse_registers(sketch) -> bytearray, or None if corrupt"},
    {"histogram", histogram, METH_O, "histogram(registers) -> [registers holding 0, 1, ..., 63]"},
    {"max_registers", max_registers, METH_O, "max_registers(sketches) -> registerwise max, or None if corrupt"},
    {"nonzero", nonzero, METH_O, "nonzero(registers) -> indexes of the registers that are not zero"},
    {"merge_max", merge_max, METH_VARARGS, "merge_max(into, registers): into[i] = max(into[i], registers[i])"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "kvd.commands._hll", NULL, -1, methods};

PyMODINIT_FUNC PyInit__hll(void) { return PyModule_Create(&module); }
