/* kvd/protocol/_multibulk.c: whole small requests parsed without running Python per request or per argument.
 *
 * A small request (SET key value, GET key, EXISTS k1 k2 ...) is a few dozen bytes, and parsing it is most of what
 * the daemon's Python does for it. The parser (kvd/protocol/parser.py) had two ways to take such requests
 * whole: two compiled patterns per request and argument (_FAST_MULTIBULK/_FAST_BULK), and hiredis's C reader for
 * longer reads, which needs a guard pattern over the bytes, a probe to tell a whole request from a partial one,
 * and a join per request to refuse non-bulk elements. Both still cost several Python calls per read.
 *
 * parse_requests(buf, pos, end, out, max_args, max_bulk) reads complete requests from buf[pos:end] and appends
 * each, as a list of bytes, to out. It reads exactly one shape: "*<count>\r\n" then <count> times
 * "$<len>\r\n<len bytes>" and two bytes after each payload, skipped unread as Redis and the parser's other paths
 * skip them. Counts from 1 to max_args and lengths below max_bulk are read as Redis's string2ll reads them
 * (digits only, no sign, no leading zero). At anything else (a partial request, an inline command, an empty or
 * negative count, a large bulk that the parser receives in place, a malformed header) it stops before that
 * request and returns the bytes it consumed, so the parser's general path reads the rest and gives Redis's exact
 * error. So where this parser takes a request, it means exactly what the general path would have produced.
 *
 * Complexity: O(bytes consumed), one pass; no allocation but the argument bytes and the lists.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* A decimal of 1 to `digits` digits, no leading zero (a lone 0 only if `zero`), then CRLF, in p[0:n].
 * Returns the bytes read (CRLF included), 0 if more input is needed, -1 if it is not such a number. */
static inline Py_ssize_t
read_number(const unsigned char *p, Py_ssize_t n, int digits, int zero, long *value)
{
    long v = 0;
    Py_ssize_t i = 0;
    for (; i < n && i <= digits && p[i] >= '0' && p[i] <= '9'; i++)
        v = v * 10 + (p[i] - '0');
    if (i == n)
        return i > digits ? -1 : 0; /* the number may go on, or its CRLF is still to come */
    if (i == 0 || i > digits || (p[0] == '0' && (i > 1 || !zero)))
        return -1;
    if (p[i] != '\r')
        return -1;
    if (i + 1 == n)
        return 0;
    if (p[i + 1] != '\n')
        return -1;
    *value = v;
    return i + 2;
}

/* One whole request at p[0:n]: appended to out, returns its length; 0: incomplete or not this parser's. */
static Py_ssize_t
parse_one(const unsigned char *p, Py_ssize_t n, PyObject *out, long max_args, long max_bulk, int *failed)
{
    long count, len;
    if (n < 1 || p[0] != '*')
        return 0;
    Py_ssize_t at = 1, r = read_number(p + at, n - at, 9, 0, &count);
    if (r <= 0 || count > max_args)
        return 0;
    at += r;
    /* Walk the headers first: nothing is allocated for a request that is not whole. */
    Py_ssize_t start = at;
    for (long i = 0; i < count; i++) {
        if (at >= n || p[at] != '$')
            return 0;
        r = read_number(p + at + 1, n - at - 1, 9, 1, &len);
        if (r <= 0 || len >= max_bulk)
            return 0;
        at += 1 + r + len + 2;
        if (at > n)
            return 0;
    }
    PyObject *args = PyList_New(count);
    if (args == NULL) {
        *failed = 1;
        return 0;
    }
    at = start;
    for (long i = 0; i < count; i++) {
        r = read_number(p + at + 1, n - at - 1, 9, 1, &len);
        at += 1 + r;
        PyObject *arg = PyBytes_FromStringAndSize((const char *)p + at, len);
        if (arg == NULL) {
            Py_DECREF(args);
            *failed = 1;
            return 0;
        }
        PyList_SET_ITEM(args, i, arg);
        at += len + 2;
    }
    int appended = PyList_Append(out, args);
    Py_DECREF(args);
    if (appended < 0) {
        *failed = 1;
        return 0;
    }
    return at;
}

static PyObject *
parse_requests(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 6 || !PyList_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "parse_requests(buf, pos, end, out: list, max_args, max_bulk)");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]), end = PyLong_AsSsize_t(args[2]);
    long max_args = PyLong_AsLong(args[4]), max_bulk = PyLong_AsLong(args[5]);
    if (PyErr_Occurred()) {
        PyBuffer_Release(&view);
        return NULL;
    }
    if (pos < 0 || end > view.len || pos > end) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "parse_requests: pos and end must satisfy 0 <= pos <= end <= len(buf)");
        return NULL;
    }
    const unsigned char *p = (const unsigned char *)view.buf;
    Py_ssize_t at = pos;
    int failed = 0;
    for (;;) {
        Py_ssize_t used = parse_one(p + at, end - at, args[3], max_args, max_bulk, &failed);
        if (used == 0)
            break;
        at += used;
    }
    PyBuffer_Release(&view);
    if (failed) {
        if (at == pos)
            return NULL;
        PyErr_Clear(); /* what was parsed stands; the general path retries the rest, and raises if it must */
    }
    return PyLong_FromSsize_t(at - pos);
}

static PyMethodDef multibulk_methods[] = {
    {"parse_requests", (PyCFunction)(void (*)(void))parse_requests, METH_FASTCALL,
     "parse_requests(buf, pos, end, out, max_args, max_bulk) -> bytes consumed\n\n"
     "Append each whole request of bulk strings at buf[pos:end] to out (a list of bytes per request) and stop\n"
     "before the first that is not one; see the module's header comment."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef multibulk_module = {
    PyModuleDef_HEAD_INIT, "kvd.protocol._multibulk", "Whole small requests parsed in C (see parser.py).", -1,
    multibulk_methods,
};

PyMODINIT_FUNC
PyInit__multibulk(void)
{
    return PyModule_Create(&multibulk_module);
}
