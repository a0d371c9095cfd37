/* kvd/commands/_bitops.c: the byte loops of the bitmap commands (Redis's bitops.c), at memory speed.
 *
 * BITCOUNT, BITPOS and BITOP read every byte of their range, and a bitmap can be as large as any value
 * (512 MiB by default). In Python the same loops go through big integers: on a 32 MiB value BITCOUNT took
 * 86 ms and BITOP AND of two 200 ms, every one of them a stall of the event loop. Here:
 *
 *   popcount(data) -> int            set bits in a buffer, 64 bits at a time (__builtin_popcountll)
 *   bitpos(data, bit) -> int         Redis's redisBitpos(): the position of the first bit equal to ``bit``
 *                                    (bit 0 is the most significant bit of byte 0); when there is none, -1 for
 *                                    a 1 and len * 8 for a 0 (the string is taken as padded with zeros)
 *   bitop(op, sources) -> bytearray  AND (0), OR (1), XOR (2) or NOT (3) of buffers, None meaning a missing key;
 *                                    as long as the longest, shorter ones padded with zero bytes
 *
 * The GIL is released over inputs of 1 MiB and more; the buffers stay exported meanwhile, so nobody can
 * resize them (kvd never mutates a stored value anyway). kvd/commands/bitops.py has the same three in Python
 * (correct, slower), used where this was not built; tests/unit/test_bitops.py compares them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define RELEASE_GIL_FROM (1 << 20)

static long long count_bits(const unsigned char *p, size_t n) {
    long long count = 0;
    while (n >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        count += __builtin_popcountll(word);
        p += 8;
        n -= 8;
    }
    while (n--)
        count += __builtin_popcount(*p++);
    return count;
}

static PyObject *popcount(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    long long count;
    if (view.len >= RELEASE_GIL_FROM) {
        Py_BEGIN_ALLOW_THREADS
        count = count_bits(view.buf, (size_t)view.len);
        Py_END_ALLOW_THREADS
    } else {
        count = count_bits(view.buf, (size_t)view.len);
    }
    PyBuffer_Release(&view);
    return PyLong_FromLongLong(count);
}

/* The first byte that is not ``skip`` (0x00 when looking for a 1, 0xff for a 0), or n. */
static size_t first_other(const unsigned char *p, size_t n, unsigned char skip) {
    size_t i = 0;
    uint64_t all = skip ? UINT64_MAX : 0;
    while (i < n && ((uintptr_t)(p + i) & 7) && p[i] == skip)
        i++;
    if (i < n && p[i] != skip)
        return i;
    while (i + 8 <= n) {
        uint64_t word;
        memcpy(&word, p + i, 8);
        if (word != all)
            break;
        i += 8;
    }
    while (i < n && p[i] == skip)
        i++;
    return i;
}

static PyObject *bitpos(PyObject *self, PyObject *args) {
    Py_buffer view;
    int bit;
    if (!PyArg_ParseTuple(args, "y*p", &view, &bit))
        return NULL;
    const unsigned char *p = view.buf;
    size_t n = (size_t)view.len;
    unsigned char skip = bit ? 0x00 : 0xff;
    size_t at;
    if (view.len >= RELEASE_GIL_FROM) {
        Py_BEGIN_ALLOW_THREADS
        at = first_other(p, n, skip);
        Py_END_ALLOW_THREADS
    } else {
        at = first_other(p, n, skip);
    }
    long long pos;
    if (at == n) {
        pos = bit ? -1 : (long long)n * 8;
    } else {
        unsigned char byte = bit ? p[at] : (unsigned char)~p[at];
        int lead = 0;
        while (!(byte & (0x80 >> lead)))
            lead++;
        pos = (long long)at * 8 + lead;
    }
    PyBuffer_Release(&view);
    return PyLong_FromLongLong(pos);
}

enum { OP_AND, OP_OR, OP_XOR, OP_NOT };

static void combine(int op, unsigned char *out, size_t maxlen, Py_buffer *views, int *present, Py_ssize_t count) {
    /* The first source, then each other one folded in; bytes past a source's end (or of a missing key) are 0. */
    size_t len0 = present[0] ? (size_t)views[0].len : 0;
    if (len0)
        memcpy(out, views[0].buf, len0);
    memset(out + len0, 0, maxlen - len0);
    if (op == OP_NOT) {
        for (size_t i = 0; i < maxlen; i++)
            out[i] = (unsigned char)~out[i];
        return;
    }
    for (Py_ssize_t k = 1; k < count; k++) {
        size_t len = present[k] ? (size_t)views[k].len : 0;
        const unsigned char *src = present[k] ? views[k].buf : NULL;
        size_t i = 0;
        if (op == OP_AND) {
            for (; i + 8 <= len; i += 8) {
                uint64_t a, b;
                memcpy(&a, out + i, 8);
                memcpy(&b, src + i, 8);
                a &= b;
                memcpy(out + i, &a, 8);
            }
            for (; i < len; i++)
                out[i] &= src[i];
            memset(out + len, 0, maxlen - len); /* AND with the zero padding */
        } else {
            for (; i + 8 <= len; i += 8) {
                uint64_t a, b;
                memcpy(&a, out + i, 8);
                memcpy(&b, src + i, 8);
                a = op == OP_OR ? a | b : a ^ b;
                memcpy(out + i, &a, 8);
            }
            for (; i < len; i++)
                out[i] = op == OP_OR ? out[i] | src[i] : out[i] ^ src[i];
        }
    }
}

static PyObject *bitop(PyObject *self, PyObject *args) {
    int op;
    PyObject *sources;
    if (!PyArg_ParseTuple(args, "iO", &op, &sources))
        return NULL;
    if (op < OP_AND || op > OP_NOT) {
        PyErr_SetString(PyExc_ValueError, "op must be 0 (AND), 1 (OR), 2 (XOR) or 3 (NOT)");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(sources, "sources must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    if (count < 1 || (op == OP_NOT && count != 1)) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "one source for NOT, at least one for the others");
        return NULL;
    }
    Py_buffer *views = PyMem_Calloc((size_t)count, sizeof(Py_buffer));
    int *present = PyMem_Calloc((size_t)count, sizeof(int));
    PyObject *result = NULL;
    Py_ssize_t got = 0;
    size_t maxlen = 0;
    if (views == NULL || present == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (; got < count; got++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, got);
        if (item == Py_None)
            continue;
        if (PyObject_GetBuffer(item, &views[got], PyBUF_SIMPLE) < 0)
            goto done;
        present[got] = 1;
        if ((size_t)views[got].len > maxlen)
            maxlen = (size_t)views[got].len;
    }
    result = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)maxlen);
    if (result == NULL || maxlen == 0)
        goto done;
    unsigned char *out = (unsigned char *)PyByteArray_AS_STRING(result);
    if (maxlen >= RELEASE_GIL_FROM) {
        Py_BEGIN_ALLOW_THREADS
        combine(op, out, maxlen, views, present, count);
        Py_END_ALLOW_THREADS
    } else {
        combine(op, out, maxlen, views, present, count);
    }
done:
    if (views != NULL && present != NULL)
        for (Py_ssize_t k = 0; k < got; k++)
            if (present[k])
                PyBuffer_Release(&views[k]);
    PyMem_Free(views);
    PyMem_Free(present);
    Py_DECREF(seq);
    return result;
}

static PyMethodDef methods[] = {
    {"popcount", popcount, METH_O, "popcount(data) -> number of set bits"},
    {"bitpos", bitpos, METH_VARARGS, "bitpos(data, bit) -> first position of bit, -1 or len*8 when none"},
    {"bitop", bitop, METH_VARARGS, "bitop(op, sources) -> bytearray: AND 0, OR 1, XOR 2, NOT 3; None = empty"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "kvd.commands._bitops", NULL, -1, methods};

PyMODINIT_FUNC PyInit__bitops(void) { return PyModule_Create(&module); }
