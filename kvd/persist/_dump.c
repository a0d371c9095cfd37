/* kvd/persist/_dump.c: the two byte loops of Redis's DUMP format that Python cannot run at memory speed.
 *
 * A DUMP payload ends with a CRC-64 of everything before it (Redis's crc64.c: the "Jones" polynomial
 * 0xad93d23594c935a9, reflected, initial value 0, no final xor; check value of "123456789" 0xe9c6d914c4b8d9ca),
 * and a string inside it may be LZF-compressed (Redis compresses strings of more than 20 bytes when that saves
 * space). KV-cache chunks are megabytes: in Python the CRC alone ran at about 10 MB/s, so a 32 MiB DUMP would
 * stop the event loop for seconds. Here:
 *
 *   crc64(data, crc=0) -> int        slice-by-8 tables, ~2 GB/s; the GIL is released for large inputs
 *   lzf_decompress(data, size) -> bytes
 *                                    the LZF format (liblzf, which Redis vendors), written from its spec: a
 *                                    control byte below 32 starts a run of ctrl+1 literal bytes; otherwise its top
 *                                    3 bits are a length (7 = read one more byte and add it) and the rest with
 *                                    the next byte a back reference. ValueError on a truncated or lying input
 *                                    rather than reading or writing outside either buffer.
 *
 * kvd/persist/dump.py has the same two in Python (slow, correct), used where this was not built; the tests
 * compare both (tests/unit/test_dump_payload.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define POLY_REFLECTED 0x95ac9329ac4bc9b5ULL /* 0xad93d23594c935a9 with its bits reversed */
#define RELEASE_GIL_FROM (1 << 20)

static uint64_t table[8][256];

static void build_tables(void) {
    for (int i = 0; i < 256; i++) {
        uint64_t crc = (uint64_t)i;
        for (int k = 0; k < 8; k++)
            crc = (crc & 1) ? (crc >> 1) ^ POLY_REFLECTED : crc >> 1;
        table[0][i] = crc;
    }
    for (int i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xff];
}

static uint64_t crc64_update(uint64_t crc, const unsigned char *p, size_t n) {
    while (n && ((uintptr_t)p & 7)) {
        crc = table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
        n--;
    }
    while (n >= 8) {
        uint64_t word;
        memcpy(&word, p, 8); /* little-endian host: x86-64 and arm64 */
        crc ^= word;
        crc = table[7][crc & 0xff] ^ table[6][(crc >> 8) & 0xff] ^ table[5][(crc >> 16) & 0xff] ^
              table[4][(crc >> 24) & 0xff] ^ table[3][(crc >> 32) & 0xff] ^ table[2][(crc >> 40) & 0xff] ^
              table[1][(crc >> 48) & 0xff] ^ table[0][crc >> 56];
        p += 8;
        n -= 8;
    }
    while (n--)
        crc = table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc;
}

static PyObject *py_crc64(PyObject *self, PyObject *args) {
    Py_buffer view;
    unsigned long long crc = 0;
    if (!PyArg_ParseTuple(args, "y*|K", &view, &crc))
        return NULL;
    uint64_t out;
    if (view.len >= RELEASE_GIL_FROM) {
        Py_BEGIN_ALLOW_THREADS
        out = crc64_update(crc, view.buf, (size_t)view.len);
        Py_END_ALLOW_THREADS
    } else {
        out = crc64_update(crc, view.buf, (size_t)view.len);
    }
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLongLong(out);
}

static PyObject *py_lzf_decompress(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t size;
    if (!PyArg_ParseTuple(args, "y*n", &view, &size))
        return NULL;
    if (size < 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "negative LZF output size");
        return NULL;
    }
    PyObject *result = PyBytes_FromStringAndSize(NULL, size);
    if (result == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    const unsigned char *ip = view.buf, *in_end = ip + view.len;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(result), *op = out, *out_end = out + size;
    const char *error = NULL;
    while (ip < in_end) {
        unsigned int ctrl = *ip++;
        if (ctrl < 32) { /* a literal run */
            size_t len = ctrl + 1;
            if ((size_t)(in_end - ip) < len || (size_t)(out_end - op) < len) {
                error = "LZF literal run past the end of its buffer";
                break;
            }
            memcpy(op, ip, len);
            op += len;
            ip += len;
        } else { /* a back reference */
            size_t len = ctrl >> 5;
            if (len == 7) {
                if (ip >= in_end) {
                    error = "LZF input ends inside a length";
                    break;
                }
                len += *ip++;
            }
            if (ip >= in_end) {
                error = "LZF input ends inside a reference";
                break;
            }
            size_t back = ((size_t)(ctrl & 0x1f) << 8) + *ip++ + 1;
            len += 2;
            if ((size_t)(op - out) < back || (size_t)(out_end - op) < len) {
                error = "LZF reference outside the output";
                break;
            }
            const unsigned char *ref = op - back;
            while (len--) /* may overlap its own output: byte by byte */
                *op++ = *ref++;
        }
    }
    if (error == NULL && op != out_end)
        error = "LZF output shorter than announced";
    PyBuffer_Release(&view);
    if (error != NULL) {
        Py_DECREF(result);
        PyErr_SetString(PyExc_ValueError, error);
        return NULL;
    }
    return result;
}

static PyMethodDef methods[] = {
    {"crc64", py_crc64, METH_VARARGS, "crc64(data, crc=0): Redis's CRC-64 (Jones, reflected) of data, continuing crc."},
    {"lzf_decompress", py_lzf_decompress, METH_VARARGS, "lzf_decompress(data, size): the size bytes data decodes to."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "kvd.persist._dump", NULL, -1, methods};

PyMODINIT_FUNC PyInit__dump(void) {
    build_tables();
    return PyModule_Create(&module);
}
