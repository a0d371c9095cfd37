/* kvd/_buffers.c: the buffer operations of kvd/buffers.py as direct calls into CPython's C API.
 *
 * Python can express neither: bytearray(n) always clears its memory, and every view Python can make of a
 * bytearray exports it, which forbids resizing the bytearray until the view is released. kvd/buffers.py says
 * what each operation is for and why it is safe; this file only makes each one a single C call. The same calls
 * through ctypes (kvd/buffers.py's fallback, where this file was not compiled) go through libffi and ctypes'
 * type machinery, whose cache footprint made them cost 4-5 us each in the running server, right after a
 * 256 KiB value had been copied through the caches.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

PyDoc_STRVAR(uninitialized_doc,
             "uninitialized(size, /)\n--\n\n"
             "A bytearray of size bytes with arbitrary contents (not cleared): for memory that is fully\n"
             "written before anything reads it.");

static PyObject *
uninitialized(PyObject *module, PyObject *arg)
{
    Py_ssize_t size = PyNumber_AsSsize_t(arg, PyExc_OverflowError);
    if (size == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (size < 0) {
        PyErr_SetString(PyExc_ValueError, "uninitialized(): negative size");
        return NULL;
    }
    return PyByteArray_FromStringAndSize(NULL, size);
}

PyDoc_STRVAR(unpinned_view_doc,
             "unpinned_view(buf, start, /)\n--\n\n"
             "A writable memoryview of buf[start:] that neither keeps buf alive nor stops it from being\n"
             "resized: the caller must hold buf and leave its size alone while the view may be written.");

static PyObject *
unpinned_view(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "unpinned_view() takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *buf = args[0];
    if (!PyByteArray_CheckExact(buf)) {
        PyErr_Format(PyExc_TypeError, "unpinned_view() needs a bytearray, not %.100s", Py_TYPE(buf)->tp_name);
        return NULL;
    }
    Py_ssize_t start = PyNumber_AsSsize_t(args[1], PyExc_OverflowError);
    if (start == -1 && PyErr_Occurred()) {
        return NULL;
    }
    Py_ssize_t size = PyByteArray_GET_SIZE(buf);
    if (start < 0 || start > size) {
        PyErr_Format(PyExc_IndexError, "unpinned_view(): start %zd outside a bytearray of %zd bytes", start, size);
        return NULL;
    }
    return PyMemoryView_FromMemory(PyByteArray_AS_STRING(buf) + start, size - start, PyBUF_WRITE);
}

PyDoc_STRVAR(copy_doc,
             "copy(dst, src, /)\n--\n\n"
             "Copy the bytes of src into dst (a writable buffer of the same length) with the GIL released,\n"
             "so that copies on several threads run at once and the event loop's thread is not held.");

static PyObject *
copy(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "copy() takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    Py_buffer dst, src;
    if (PyObject_GetBuffer(args[0], &dst, PyBUF_WRITABLE) != 0) {
        return NULL;
    }
    if (PyObject_GetBuffer(args[1], &src, PyBUF_SIMPLE) != 0) {
        PyBuffer_Release(&dst);
        return NULL;
    }
    if (dst.len != src.len) {
        PyErr_Format(PyExc_ValueError, "copy(): %zd bytes into %zd", src.len, dst.len);
        PyBuffer_Release(&src);
        PyBuffer_Release(&dst);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    memcpy(dst.buf, src.buf, (size_t)src.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    Py_RETURN_NONE;
}

static PyMethodDef buffers_methods[] = {
    {"uninitialized", uninitialized, METH_O, uninitialized_doc},
    {"unpinned_view", (PyCFunction)(void (*)(void))unpinned_view, METH_FASTCALL, unpinned_view_doc},
    {"copy", (PyCFunction)(void (*)(void))copy, METH_FASTCALL, copy_doc},
    {NULL, NULL, 0, NULL},
};

static PyModuleDef_Slot buffers_slots[] = {
    {0, NULL},
};

static struct PyModuleDef buffers_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "kvd._buffers",
    .m_doc = "Buffer operations CPython's C API has and Python does not (see kvd/buffers.py).",
    .m_size = 0,
    .m_methods = buffers_methods,
    .m_slots = buffers_slots,
};

PyMODINIT_FUNC
PyInit__buffers(void)
{
    return PyModuleDef_Init(&buffers_module);
}
