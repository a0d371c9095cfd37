/* kvd/commands/_lcs.c: LCS's dynamic programme (Redis's lcsCommand in t_string.c), at C speed.
 *
 * LCS fills a table of (len(a) + 1) * (len(b) + 1) 32-bit lengths and walks it back from the end. Redis allows
 * the table up to proto-max-bulk-len bytes (512 MB: 134 million cells); Python takes about a microsecond a cell,
 * minutes for what C does in a fraction of a second, so the table and the walk are here:
 *
 *   lcs(a, b, want_matches, min_match_len) -> (length, common, matches) | None
 *       common   the longest common subsequence itself (bytes), the one Redis's walk picks among equals
 *       matches  with want_matches, the runs Redis's IDX reports, last first: a list of
 *                (a_start, a_end, b_start, b_end, length) for runs of at least min_match_len bytes; else None
 *       None     the table could not be allocated
 *
 * The walk is Redis's, step for step, so that the subsequence and the runs are the ones Redis answers (several
 * subsequences can be equally long). The GIL is released while the table is filled. kvd/commands/lcs.py has the
 * same in Python, used where this was not built; tests/unit/test_lcs.py compares the two.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>

static void fill(uint32_t *t, const unsigned char *a, size_t alen, const unsigned char *b, size_t blen) {
    size_t w = blen + 1;
    for (size_t j = 0; j <= blen; j++)
        t[j] = 0;
    for (size_t i = 1; i <= alen; i++) {
        uint32_t *row = t + i * w, *up = row - w;
        row[0] = 0;
        unsigned char ai = a[i - 1];
        for (size_t j = 1; j <= blen; j++) {
            if (ai == b[j - 1])
                row[j] = up[j - 1] + 1;
            else
                row[j] = up[j] > row[j - 1] ? up[j] : row[j - 1];
        }
    }
}

static PyObject *lcs(PyObject *self, PyObject *args) {
    Py_buffer va, vb;
    int want_matches;
    long long min_len;
    if (!PyArg_ParseTuple(args, "y*y*pL", &va, &vb, &want_matches, &min_len))
        return NULL;
    PyObject *result = NULL, *common = NULL, *matches = NULL;
    const unsigned char *a = va.buf, *b = vb.buf;
    size_t alen = (size_t)va.len, blen = (size_t)vb.len, w = blen + 1;
    uint32_t *t = malloc((alen + 1) * w * sizeof(uint32_t));
    if (t == NULL) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    fill(t, a, alen, b, blen);
    Py_END_ALLOW_THREADS
#define T(I, J) t[(size_t)(I) * w + (J)]
    uint32_t length = T(alen, blen);
    common = PyBytes_FromStringAndSize(NULL, length);
    if (common == NULL)
        goto done;
    if (want_matches && (matches = PyList_New(0)) == NULL)
        goto done;
    char *out = PyBytes_AS_STRING(common);
    size_t i = alen, j = blen, idx = length;
    size_t a_start = alen, a_end = 0, b_start = 0, b_end = 0; /* a_start == alen: no run open */
    while (i > 0 && j > 0) {
        int emit = 0;
        if (a[i - 1] == b[j - 1]) {
            out[--idx] = (char)a[i - 1];
            if (a_start == alen) {
                a_start = a_end = i - 1;
                b_start = b_end = j - 1;
            } else if (a_start == i && b_start == j) {
                a_start--;
                b_start--;
            } else {
                emit = 1;
            }
            if (a_start == 0 || b_start == 0)
                emit = 1;
            i--;
            j--;
        } else {
            if (T(i - 1, j) > T(i, j - 1))
                i--;
            else
                j--;
            if (a_start != alen)
                emit = 1;
        }
        if (emit) {
            long long run = (long long)(a_end - a_start + 1);
            if (matches != NULL && (min_len == 0 || run >= min_len)) {
                PyObject *m = Py_BuildValue("(nnnnL)", (Py_ssize_t)a_start, (Py_ssize_t)a_end, (Py_ssize_t)b_start,
                                            (Py_ssize_t)b_end, run);
                if (m == NULL || PyList_Append(matches, m) < 0) {
                    Py_XDECREF(m);
                    goto done;
                }
                Py_DECREF(m);
            }
            a_start = alen;
        }
    }
#undef T
    result = Py_BuildValue("(IOO)", length, common, matches != NULL ? matches : Py_None);
done:
    free(t);
    Py_XDECREF(common);
    Py_XDECREF(matches);
    PyBuffer_Release(&va);
    PyBuffer_Release(&vb);
    return result;
}

static PyMethodDef methods[] = {
    {"lcs", lcs, METH_VARARGS, "lcs(a, b, want_matches, min_match_len) -> (length, common, matches) or None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "kvd.commands._lcs", NULL, -1, methods};

PyMODINIT_FUNC PyInit__lcs(void) { return PyModule_Create(&module); }
