/* kvd/persist/_records.c: packs runs of small records, and their hint entries, without running Python per record.
 *
 * With the log on, every write's record goes through the writer's loop (kvd/persist/writer.py), on the writer
 * thread or, for a small batch, on the event loop itself. For a small value that loop is most of what the log
 * costs: per record it unpacks the batch entry, joins key and value, hashes them, packs and checksums the
 * 44-byte header, appends both to the staging buffer and packs the hint entry (kvd/persist/segment.py's
 * HintBuilder), some twenty steps of interpreter for a few dozen bytes written. Measured under redis-benchmark
 * -P 1 with appendfsync everysec (docs/benchmarks.md, "Where the time goes"), these steps were a tenth of the
 * daemon's CPU.
 *
 * pack_run(batch, start, seg_id, offset, staged, hint, small, limit) does the same steps in C for the longest run
 * of batch[start:] that is plain: OP_REC entries of bytes keys and bytes/bytearray values of at most `small`
 * bytes, at the expected position (segment `seg_id`, `offset` onwards, back to back). Anything else ends the run
 * and is left to the Python loop, which handles it as before (a large value's iovecs, a roll, a sync, or the
 * RuntimeError of a record out of place). It returns (next index, last ticket, bytes appended); the caller
 * counts the hint entries as next - start.
 *
 * The bytes are exactly those of record.py's encode_header + key + value, and of segment.py's _HINT_ENT + key
 * (tests/unit/test_records_c.py compares the two byte for byte): the checksum is xxh3-64 of key and value
 * (the header-only <xxhash.h>, the same XXH3 as the xxhash package's), the header's last field zlib's crc32
 * of the 40 bytes before it. All integers little-endian.
 *
 * The run holds the GIL; `limit` bounds the bytes one call appends, so a large batch of small records still lets
 * the event loop in between calls (the writer passes 256 KiB: tens of microseconds).
 *
 * Complexity: O(bytes appended). Not thread-safe for the same buffers (the writer owns both while it writes).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <zlib.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

/* record.py: _REC_HDR "<4sBBHIIqQQ" + crc32; segment.py: _HINT_ENT "<BIQQIqQ". */
#define OP_REC 0
#define HDR_SIZE 44
#define HINT_ENT_SIZE 41
static const unsigned char REC_MAGIC[4] = {0xab, 'K', 'V', 'R'};

/* The batch entry (log.py's _Inflight): OP_REC, ticket, seg_id, offset, rtype, key, value, expire, lsn, ... */
enum { F_OP, F_TICKET, F_SEG, F_OFFSET, F_RTYPE, F_KEY, F_VALUE, F_EXPIRE, F_LSN, F_COUNT };

static inline unsigned char *
put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
    return p + 4;
}

static inline unsigned char *
put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
    return p + 8;
}

/* An int field of the entry, or -1 with no exception set if it is not a small enough int for the format. */
static inline int
field_ll(PyObject *entry, int index, long long *out)
{
    PyObject *obj = PyTuple_GET_ITEM(entry, index);
    if (!PyLong_CheckExact(obj))
        return -1;
    int overflow = 0;
    *out = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (overflow || (*out == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return -1;
    }
    return 0;
}

/* The same for an unsigned 64-bit field (the LSN). */
static inline int
field_ull(PyObject *entry, int index, unsigned long long *out)
{
    PyObject *obj = PyTuple_GET_ITEM(entry, index);
    if (!PyLong_CheckExact(obj))
        return -1;
    *out = PyLong_AsUnsignedLongLong(obj);
    if (*out == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    return 0;
}

/* Grow a bytearray by n bytes; a pointer to the new bytes, or NULL with an exception set. */
static inline unsigned char *
grow(PyObject *buf, Py_ssize_t n)
{
    Py_ssize_t old = PyByteArray_GET_SIZE(buf);
    if (PyByteArray_Resize(buf, old + n) < 0)
        return NULL;
    return (unsigned char *)PyByteArray_AS_STRING(buf) + old;
}

static PyObject *
pack_run(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "pack_run(batch, start, seg_id, offset, staged, hint, small, limit)");
        return NULL;
    }
    PyObject *batch = args[0], *staged = args[4], *hint = args[5];
    if (!PyList_Check(batch) || !PyByteArray_Check(staged) || (hint != Py_None && !PyByteArray_Check(hint))) {
        PyErr_SetString(PyExc_TypeError, "pack_run: batch must be a list, staged and hint bytearrays (hint or None)");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    long long seg_id = PyLong_AsLongLong(args[2]);
    long long offset = PyLong_AsLongLong(args[3]);
    Py_ssize_t small = PyLong_AsSsize_t(args[6]);
    Py_ssize_t limit = PyLong_AsSsize_t(args[7]);
    if (PyErr_Occurred())
        return NULL;
    if (start < 0)
        start = 0;

    Py_ssize_t i = start, appended = 0;
    long long ticket = -1;
    for (; i < PyList_GET_SIZE(batch) && appended < limit; i++) {
        PyObject *entry = PyList_GET_ITEM(batch, i);
        if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) < F_COUNT)
            break;
        PyObject *key = PyTuple_GET_ITEM(entry, F_KEY);
        PyObject *value = PyTuple_GET_ITEM(entry, F_VALUE);
        long long op;
        if (field_ll(entry, F_OP, &op) || op != OP_REC || !PyBytes_CheckExact(key))
            break;
        const char *vdata;
        Py_ssize_t vlen;
        if (PyBytes_CheckExact(value)) {
            vdata = PyBytes_AS_STRING(value);
            vlen = PyBytes_GET_SIZE(value);
        } else if (PyByteArray_CheckExact(value)) {
            vdata = PyByteArray_AS_STRING(value);
            vlen = PyByteArray_GET_SIZE(value);
        } else {
            break; /* a memoryview: its own iovec, in Python */
        }
        Py_ssize_t klen = PyBytes_GET_SIZE(key);
        long long t, seg, off, rtype, expire;
        unsigned long long lsn;
        if (vlen > small || (uint64_t)klen > UINT32_MAX || field_ll(entry, F_TICKET, &t) ||
            field_ll(entry, F_SEG, &seg) || field_ll(entry, F_OFFSET, &off) || field_ll(entry, F_RTYPE, &rtype) ||
            field_ll(entry, F_EXPIRE, &expire) || field_ull(entry, F_LSN, &lsn) || seg != seg_id || off != offset ||
            rtype < 0 || rtype > 255)
            break;

        Py_ssize_t rec_len = HDR_SIZE + klen + vlen;
        unsigned char *p = grow(staged, rec_len);
        if (p == NULL)
            return NULL;
        unsigned char *body = p + HDR_SIZE;
        memcpy(body, PyBytes_AS_STRING(key), (size_t)klen);
        memcpy(body + klen, vdata, (size_t)vlen);
        uint64_t csum = XXH3_64bits(body, (size_t)(klen + vlen));
        unsigned char *h = p;
        memcpy(h, REC_MAGIC, 4);
        h[4] = (unsigned char)rtype;
        h[5] = 0;
        h[6] = h[7] = 0;
        h = put_u32(h + 8, (uint32_t)klen);
        h = put_u32(h, (uint32_t)vlen);
        h = put_u64(h, (uint64_t)expire);
        h = put_u64(h, (uint64_t)lsn);
        h = put_u64(h, csum);
        put_u32(h, (uint32_t)crc32(0L, p, HDR_SIZE - 4));

        if (hint != Py_None) {
            unsigned char *e = grow(hint, HINT_ENT_SIZE + klen);
            if (e == NULL)
                return NULL;
            e[0] = (unsigned char)rtype;
            e = put_u32(e + 1, (uint32_t)klen);
            e = put_u64(e, (uint64_t)offset);
            e = put_u64(e, (uint64_t)rec_len);
            e = put_u32(e, (uint32_t)vlen);
            e = put_u64(e, (uint64_t)expire);
            e = put_u64(e, (uint64_t)lsn);
            memcpy(e, PyBytes_AS_STRING(key), (size_t)klen);
        }
        offset += rec_len;
        appended += rec_len;
        ticket = t;
    }
    return Py_BuildValue("(nLn)", i, ticket, appended);
}

static PyMethodDef records_methods[] = {
    {"pack_run", (PyCFunction)(void (*)(void))pack_run, METH_FASTCALL,
     "pack_run(batch, start, seg_id, offset, staged, hint, small, limit) -> (next, last_ticket, appended)\n\n"
     "Append the records of the run of small OP_REC entries at batch[start:] to staged, and their hint entries\n"
     "to hint (a bytearray, or None); see the module's header comment."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef records_module = {
    PyModuleDef_HEAD_INIT, "kvd.persist._records", "Packs runs of small log records in C (see writer.py).", -1,
    records_methods,
};

PyMODINIT_FUNC
PyInit__records(void)
{
    return PyModule_Create(&records_module);
}
