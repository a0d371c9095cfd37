/* kvd/protocol/_receive.c: the reads in the middle of a large value, and whole landing requests, taken without
 * running Python.
 *
 * A 1 MiB SET reaches the server in pieces, and with the receive low-water mark (kvd/protocol/lowat.py) the
 * event loop still wakes once per 256 KiB of it. Each of those wake-ups used to run two Python callbacks
 * (the parser's get_buffer, the connection's buffer_updated) and the mark's update, some 5 us of interpreter
 * per wake-up on these machines, right after the piece's copy had gone through the caches. None of it decides
 * anything: once the parser has read a large argument's header, the next reads can only go to the rest of
 * that argument's buffer.
 *
 * So a Receiver sits between the event loop and the connection. It is the protocol's get_buffer and
 * buffer_updated. Normally it passes both calls on to Python. Once the parser tells it where the rest of a
 * large value goes (expect(buf, pos, end)), it hands the loop views of that buffer and counts what arrives,
 * keeping the socket's low-water mark on the rest, and calls Python again only when the value is complete:
 * buffer_updated(nbytes, reads) reports all the bytes of the reads it took as one, with their count. For the
 * parser it looks as if the kernel had delivered the rest of the value in one read.
 *
 * Landing (kvd/protocol/landing.py) goes further. Between requests, after a run of large requests of one shape,
 * the parser arms the Receiver with that shape (land(template)). The next read then goes into a bytearray the
 * size of such a request, allocated here; the Receiver checks the header as it arrives (match() below),
 * takes the value's reads as above, and calls Python once, with the whole request: buffer_updated(nbytes,
 * reads, buf). A request of another shape is handed over the same way as soon as the header says so, and the
 * parser reads what landed with its general path. So a repeated SET of a KV chunk runs Python once, not once
 * for its first read and once for the rest.
 *
 * The views it hands out do not export the buffer (PyMemoryView_FromMemory over its memory, as kvd/buffers.py's
 * unpinned_view), so the parser may cut a landed request's header off the buffer as soon as it is reported
 * (kvd/protocol/landing.py). That is safe because the Receiver holds the buffer and nothing resizes it until
 * the fill is reported, and every event loop kvd runs on writes only in the read that directly follows
 * get_buffer.
 *
 * The mark: SO_RCVLOWAT of the connection's descriptor, set with setsockopt(2) directly (the loop owns the
 * descriptor; a system call on it from inside its own callbacks is safe). While at least `least` bytes are
 * missing it waits for `chunk` of them at a time (or all, if fewer); once fewer are missing, the rest is read as
 * it arrives, so the copy of the end of a value overlaps the client's (the policy and its measurements are in
 * kvd/protocol/lowat.py, which keeps it for interpreters without this module). It goes back to 1 after
 * Python has handled a completed value, so that system call follows the reply instead of preceding it, and
 * Linux signals readiness at once if the next request is already queued.
 *
 * Complexity: O(1) per read, O(header) per read while a landing request's header arrives. Not thread-safe (one
 * per connection, used on the event loop's thread).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <sys/socket.h>
#include <time.h>

/* A landing template's shape (kvd/protocol/landing.py's Template): what the header must read, and sizes. */
typedef struct {
    PyObject *prefix; /* bytes, NULL: no shape */
    PyObject *suffix; /* bytes */
    Py_ssize_t key_max;
    Py_ssize_t value_len;
    Py_ssize_t size; /* of the buffer a request of this shape lands in */
} Shape;

static void
shape_clear(Shape *shape)
{
    Py_CLEAR(shape->prefix);
    Py_CLEAR(shape->suffix);
}

static void
shape_copy(Shape *to, const Shape *from)
{
    Py_XINCREF(from->prefix);
    Py_XINCREF(from->suffix);
    shape_clear(to);
    *to = *from;
}

typedef struct {
    PyObject_HEAD
    PyObject *get_buffer;     /* Python's: the parser's get_buffer */
    PyObject *buffer_updated; /* Python's: the connection's buffer_updated(nbytes, reads=1) */
    PyObject *buf;            /* the bytearray being filled, NULL when the reads go to Python */
    Py_ssize_t pos;           /* the next byte of buf to fill */
    Py_ssize_t end;           /* the fill is complete once pos reaches this */
    int landing;              /* buf is a landing buffer: HEADER while its header arrives, then VALUE */
    Shape armed;              /* what the next request may land as (land()); no prefix: not armed */
    Shape shape;              /* what the request in buf is landing as (a later land() does not change it) */
    Py_ssize_t taken;         /* bytes received since expect(), not yet reported */
    Py_ssize_t reads;         /* reads since expect(), not yet reported */
    Py_ssize_t least;         /* below this much missing the mark stays at 1 */
    Py_ssize_t chunk;         /* the mark waits for at most this much at a time */
    int fd;                   /* the connection's descriptor for the mark; -1: no mark */
    int mark;                 /* the mark as last set */
    double last_read;         /* CLOCK_MONOTONIC seconds of the last read taken here (idle time, CLIENT LIST) */
} Receiver;

enum { NOT_LANDING = 0, HEADER = 1, VALUE = 2 };

static double
monotonic_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* An argument as a Py_ssize_t; 0 with an exception set if it is not an integer that fits. */
static int
as_ssize(PyObject *arg, Py_ssize_t *out)
{
    *out = PyNumber_AsSsize_t(arg, PyExc_OverflowError);
    return !(*out == -1 && PyErr_Occurred());
}

/* Set the mark for `missing` bytes still to come; a system call only when it changes. A refusal turns the mark
 * off for good (reads then wake up for every piece, as without it). */
static void
follow(Receiver *self, Py_ssize_t missing)
{
    if (self->fd < 0) {
        return;
    }
    int mark = missing >= self->least ? (int)(missing < self->chunk ? missing : self->chunk) : 1;
    if (mark == self->mark) {
        return;
    }
    if (setsockopt(self->fd, SOL_SOCKET, SO_RCVLOWAT, &mark, sizeof(mark)) != 0) {
        self->fd = -1;
        return;
    }
    self->mark = mark;
}

static int
Receiver_init(Receiver *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"get_buffer", "buffer_updated", "least", "chunk", NULL};
    PyObject *get_buffer, *buffer_updated;
    Py_ssize_t least, chunk;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOnn:Receiver", kwlist, &get_buffer, &buffer_updated, &least,
                                     &chunk)) {
        return -1;
    }
    if (least < 1 || chunk < 1 || chunk > INT_MAX) {
        PyErr_SetString(PyExc_ValueError, "Receiver(): need least >= 1 and 1 <= chunk <= INT_MAX");
        return -1;
    }
    Py_INCREF(get_buffer);
    Py_XSETREF(self->get_buffer, get_buffer);
    Py_INCREF(buffer_updated);
    Py_XSETREF(self->buffer_updated, buffer_updated);
    Py_CLEAR(self->buf);
    shape_clear(&self->armed);
    shape_clear(&self->shape);
    self->landing = NOT_LANDING;
    self->least = least;
    self->chunk = chunk;
    self->fd = -1;
    self->mark = 1;
    self->last_read = 0.0;
    return 0;
}

static int
Receiver_traverse(Receiver *self, visitproc visit, void *arg)
{
    Py_VISIT(self->get_buffer);
    Py_VISIT(self->buffer_updated);
    Py_VISIT(self->buf);
    return 0; /* the shapes hold bytes only */
}

static int
Receiver_clear(Receiver *self)
{
    Py_CLEAR(self->get_buffer);
    Py_CLEAR(self->buffer_updated);
    Py_CLEAR(self->buf);
    shape_clear(&self->armed);
    shape_clear(&self->shape);
    return 0;
}

static void
Receiver_dealloc(Receiver *self)
{
    PyObject_GC_UnTrack(self);
    Receiver_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* How the first `filled` bytes of b start, against a landing template: MATCHED (with the header's length and
 * the key's, the key ending where the suffix starts), UNFINISHED while it may still become one, else NOT_IT.
 * The same steps as landing.py's match_header_python, which documents them; tests/unit/test_landing_match.py
 * runs both on the same inputs. */
enum { NOT_IT = -1, UNFINISHED = 0, MATCHED = 1 };

static int
match(const char *b, Py_ssize_t filled, PyObject *prefix, PyObject *suffix, Py_ssize_t key_max,
      Py_ssize_t *header_len, Py_ssize_t *key_len_out)
{
    const char *p = PyBytes_AS_STRING(prefix);
    Py_ssize_t n = PyBytes_GET_SIZE(prefix);
    if (filled < n) {
        return memcmp(b, p, filled) == 0 ? UNFINISHED : NOT_IT;
    }
    if (memcmp(b, p, n) != 0) {
        return NOT_IT;
    }
    Py_ssize_t nl = -1;
    for (Py_ssize_t i = n; i + 1 < filled; i++) {
        if (b[i] == '\r' && b[i + 1] == '\n') {
            nl = i;
            break;
        }
    }
    if (nl < 0) {
        return filled - n <= 20 ? UNFINISHED : NOT_IT;
    }
    Py_ssize_t digits = nl - n;
    if (digits < 1 || digits > 20 || (b[n] == '0' && digits > 1)) {
        return NOT_IT;
    }
    Py_ssize_t key_len = 0;
    for (Py_ssize_t i = n; i < nl; i++) {
        if (b[i] < '0' || b[i] > '9') {
            return NOT_IT;
        }
        if (key_len <= key_max) { /* stop growing once over: 20 digits would overflow */
            key_len = key_len * 10 + (b[i] - '0');
        }
    }
    if (key_len > key_max) {
        return NOT_IT;
    }
    Py_ssize_t key_end = nl + 2 + key_len;
    if (filled <= key_end) {
        return UNFINISHED;
    }
    const char *s = PyBytes_AS_STRING(suffix);
    Py_ssize_t m = PyBytes_GET_SIZE(suffix);
    if (filled < key_end + m) {
        return memcmp(b + key_end, s, filled - key_end) == 0 ? UNFINISHED : NOT_IT;
    }
    if (memcmp(b + key_end, s, m) != 0) {
        return NOT_IT;
    }
    *header_len = key_end + m;
    *key_len_out = key_len;
    return MATCHED;
}

PyDoc_STRVAR(get_buffer_doc,
             "get_buffer(sizehint, /)\n--\n\n"
             "The protocol's get_buffer: the rest of the value or landing request being filled, a new landing\n"
             "buffer when armed, else the parser's answer.");

static PyObject *
not_ready(void)
{
    PyErr_SetString(PyExc_RuntimeError, "Receiver used before __init__ or after close()");
    return NULL;
}

static PyObject *
Receiver_get_buffer(Receiver *self, PyObject *sizehint)
{
    PyObject *buf = self->buf;
    if (buf == NULL) {
        if (self->armed.prefix != NULL) { /* the next request may land whole */
            /* uninitialised, as kvd/buffers.py's uninitialized() */
            buf = self->buf = PyByteArray_FromStringAndSize(NULL, self->armed.size);
            if (buf == NULL) {
                return NULL;
            }
            shape_copy(&self->shape, &self->armed);
            self->pos = self->taken = self->reads = 0;
            self->end = self->shape.size;
            self->landing = HEADER;
        }
        else {
            PyObject *callback = self->get_buffer;
            if (callback == NULL) {
                return not_ready();
            }
            Py_INCREF(callback); /* Python may close() this Receiver while it runs */
            PyObject *result = PyObject_CallOneArg(callback, sizehint);
            Py_DECREF(callback);
            return result;
        }
    }
    /* Up to the buffer's end, past `end`: a landing buffer has room for a longer key, and a read that stops
     * short of what was offered tells libuv not to try another read at once. */
    return PyMemoryView_FromMemory(PyByteArray_AS_STRING(buf) + self->pos, PyByteArray_GET_SIZE(buf) - self->pos,
                                   PyBUF_WRITE);
}

PyDoc_STRVAR(buffer_updated_doc,
             "buffer_updated(nbytes, /)\n--\n\n"
             "The protocol's buffer_updated: counted here while a value or a landing request is being filled,\n"
             "reported to Python with all the reads it took once it is complete, else passed on.");

/* A landing buffer's header has grown by a read: HEADER while it is still arriving; VALUE, with `end` where the
 * request stops, once it matched and fits the buffer; NOT_LANDING when Python must see it now (another shape). */
static int
landing_step(Receiver *self)
{
    Py_ssize_t header_len, key_len;
    const Shape *shape = &self->shape;
    switch (match(PyByteArray_AS_STRING(self->buf), self->pos, shape->prefix, shape->suffix, shape->key_max,
                  &header_len, &key_len)) {
    case UNFINISHED:
        return self->pos < PyByteArray_GET_SIZE(self->buf) ? HEADER : NOT_LANDING;
    case MATCHED:
        if (header_len + shape->value_len + 2 <= PyByteArray_GET_SIZE(self->buf)) { /* true by the shape's size */
            self->end = header_len + shape->value_len + 2; /* the value's CRLF included */
            return VALUE;
        }
        return NOT_LANDING;
    default:
        return NOT_LANDING;
    }
}

/* Call Python's buffer_updated with what was taken: (nbytes, reads), plus the buffer for a landing. */
static PyObject *
report(Receiver *self, PyObject *callback)
{
    PyObject *buf = self->buf; /* the reference moves to the call, or is dropped: the parser holds its own */
    int landing = self->landing;
    self->buf = NULL;
    self->landing = NOT_LANDING;
    shape_clear(&self->shape);
    PyObject *args[3] = {PyLong_FromSsize_t(self->taken), PyLong_FromSsize_t(self->reads), buf};
    self->taken = self->reads = 0;
    PyObject *result = NULL;
    if (args[0] != NULL && args[1] != NULL) {
        Py_INCREF(callback); /* Python may close() this Receiver while it runs */
        result = PyObject_Vectorcall(callback, args, landing ? 3 : 2, NULL);
        Py_DECREF(callback);
    }
    Py_XDECREF(args[0]);
    Py_XDECREF(args[1]);
    Py_DECREF(buf);
    return result;
}

static PyObject *
Receiver_buffer_updated(Receiver *self, PyObject *arg)
{
    Py_ssize_t nbytes;
    if (!as_ssize(arg, &nbytes)) {
        return NULL;
    }
    PyObject *callback = self->buffer_updated;
    if (callback == NULL) {
        return not_ready();
    }
    PyObject *result;
    if (self->buf != NULL) {
        if (nbytes < 0 || nbytes > PyByteArray_GET_SIZE(self->buf) - self->pos) {
            PyErr_Format(PyExc_ValueError, "buffer_updated(): %zd bytes do not fit the buffer handed out", nbytes);
            return NULL;
        }
        self->pos += nbytes;
        self->taken += nbytes;
        self->reads += 1;
        self->last_read = monotonic_now();
        if (self->landing == HEADER) {
            int step = landing_step(self);
            if (step == HEADER) {
                Py_RETURN_NONE; /* the mark stays at 1: how much is missing is not known yet */
            }
            if (step == VALUE) {
                self->landing = VALUE;
            }
            else {
                self->end = self->pos; /* another shape: Python reads what landed, now */
            }
        }
        if (self->pos < self->end) {
            follow(self, self->end - self->pos);
            Py_RETURN_NONE;
        }
        result = report(self, callback);
    }
    else {
        Py_INCREF(callback);
        result = PyObject_CallOneArg(callback, arg);
        Py_DECREF(callback);
    }
    if (self->buf == NULL) {
        follow(self, 0); /* after Python's replies: nothing large is pending unless it called expect() */
    }
    return result;
}

PyDoc_STRVAR(expect_doc,
             "expect(buf, pos, end, /)\n--\n\n"
             "Take the next reads into buf, from pos on, until end (len(buf) at most) is reached; then report\n"
             "them to buffer_updated as one. The caller keeps buf referenced and its size unchanged until then.");

static PyObject *
Receiver_expect(Receiver *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "expect() takes 3 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *buf = args[0];
    if (!PyByteArray_CheckExact(buf)) {
        PyErr_Format(PyExc_TypeError, "expect() needs a bytearray, not %.100s", Py_TYPE(buf)->tp_name);
        return NULL;
    }
    Py_ssize_t pos, end;
    if (!as_ssize(args[1], &pos) || !as_ssize(args[2], &end)) {
        return NULL;
    }
    if (pos < 0 || pos >= end || end > PyByteArray_GET_SIZE(buf)) {
        PyErr_Format(PyExc_ValueError, "expect(): need 0 <= pos (%zd) < end (%zd) <= len(buf) (%zd)", pos, end,
                     PyByteArray_GET_SIZE(buf));
        return NULL;
    }
    if (self->buf != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "expect(): a value is already being filled");
        return NULL;
    }
    Py_INCREF(buf);
    self->buf = buf;
    self->landing = NOT_LANDING;
    self->pos = pos;
    self->end = end;
    self->taken = self->reads = 0;
    follow(self, end - pos);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(land_doc,
             "land(template, /)\n--\n\n"
             "Arm landing: the next read that finds no value being filled goes into a new bytearray of\n"
             "template.size bytes, and the request reaches buffer_updated whole, as (nbytes, reads, buf), or as\n"
             "soon as its header shows another shape. None disarms; a landing already begun goes on.\n"
             "template is kvd/protocol/landing.py's Template (prefix, suffix, key_max, value_len, size).");

static int
size_attr(PyObject *template, const char *name, Py_ssize_t *out)
{
    PyObject *value = PyObject_GetAttrString(template, name);
    if (value == NULL) {
        return 0;
    }
    int ok = as_ssize(value, out);
    Py_DECREF(value);
    if (ok && *out < 0) {
        PyErr_Format(PyExc_ValueError, "land(): template.%s is negative", name);
        return 0;
    }
    return ok;
}

static PyObject *
Receiver_land(Receiver *self, PyObject *template)
{
    if (template == Py_None) {
        shape_clear(&self->armed);
        Py_RETURN_NONE;
    }
    Shape shape;
    if (!size_attr(template, "key_max", &shape.key_max) || !size_attr(template, "value_len", &shape.value_len) ||
        !size_attr(template, "size", &shape.size)) {
        return NULL;
    }
    PyObject *prefix = PyObject_GetAttrString(template, "prefix");
    if (prefix == NULL) {
        return NULL;
    }
    PyObject *suffix = PyObject_GetAttrString(template, "suffix");
    if (suffix == NULL) {
        Py_DECREF(prefix);
        return NULL;
    }
    if (!PyBytes_CheckExact(prefix) || !PyBytes_CheckExact(suffix) || shape.size < 1) {
        PyErr_SetString(PyExc_ValueError, "land(): template.prefix and .suffix must be bytes, .size positive");
        Py_DECREF(prefix);
        Py_DECREF(suffix);
        return NULL;
    }
    shape_clear(&self->armed);
    shape.prefix = prefix; /* the references move in */
    shape.suffix = suffix;
    self->armed = shape;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(use_fd_doc,
             "use_fd(fd, /)\n--\n\n"
             "Keep the receive low-water mark of this TCP descriptor on the value being filled; -1: no mark\n"
             "(TLS, Unix sockets, or the connection is gone).");

static PyObject *
Receiver_use_fd(Receiver *self, PyObject *arg)
{
    long fd = PyLong_AsLong(arg);
    if (fd == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (fd > INT_MAX) {
        PyErr_Format(PyExc_OverflowError, "use_fd(): %ld is no descriptor", fd);
        return NULL;
    }
    self->fd = fd < 0 ? -1 : (int)fd;
    self->mark = 1;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(close_doc,
             "close()\n--\n\n"
             "The connection is gone: drop the value being filled and the Python callbacks, and never touch the\n"
             "descriptor again.");

/* Dropping the callbacks matters: buffer_updated is a method of the connection, which holds this Receiver, and
 * kvd's collector never looks again at objects that survived a young collection (kvd/memory.py), so the cycle
 * would keep every long-lived connection, its buffers included, after it closed. */
static PyObject *
Receiver_close(Receiver *self, PyObject *Py_UNUSED(ignored))
{
    self->fd = -1;
    Py_CLEAR(self->buf);
    shape_clear(&self->armed);
    shape_clear(&self->shape);
    self->landing = NOT_LANDING;
    Py_CLEAR(self->get_buffer);
    Py_CLEAR(self->buffer_updated);
    self->taken = self->reads = 0;
    Py_RETURN_NONE;
}

static PyObject *
Receiver_get_filling(Receiver *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(self->buf != NULL);
}

static PyObject *
Receiver_get_armed(Receiver *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(self->armed.prefix != NULL);
}

PyDoc_STRVAR(match_header_doc,
             "match_header(buf, filled, prefix, suffix, key_max, /)\n--\n\n"
             "kvd/protocol/landing.py's match_header in C: (header length, key) once the whole header of a\n"
             "landing request is in buf[:filled], None while what arrived may still become one, False if not.");

static PyObject *
match_header(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_Format(PyExc_TypeError, "match_header() takes 5 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *buf = args[0], *prefix = args[2], *suffix = args[3];
    if (!PyByteArray_CheckExact(buf) || !PyBytes_CheckExact(prefix) || !PyBytes_CheckExact(suffix)) {
        PyErr_SetString(PyExc_TypeError, "match_header(): buf is a bytearray, prefix and suffix are bytes");
        return NULL;
    }
    Py_ssize_t filled, key_max;
    if (!as_ssize(args[1], &filled) || !as_ssize(args[4], &key_max)) {
        return NULL;
    }
    if (filled < 0 || filled > PyByteArray_GET_SIZE(buf)) {
        PyErr_Format(PyExc_ValueError, "match_header(): filled %zd outside a bytearray of %zd bytes", filled,
                     PyByteArray_GET_SIZE(buf));
        return NULL;
    }
    const char *b = PyByteArray_AS_STRING(buf);
    Py_ssize_t header_len, key_len;
    switch (match(b, filled, prefix, suffix, key_max, &header_len, &key_len)) {
    case MATCHED:
        return Py_BuildValue("(ny#)", header_len, b + header_len - PyBytes_GET_SIZE(suffix) - key_len, key_len);
    case UNFINISHED:
        Py_RETURN_NONE;
    default:
        Py_RETURN_FALSE;
    }
}

static PyMethodDef module_methods[] = {
    {"match_header", (PyCFunction)(void (*)(void))match_header, METH_FASTCALL, match_header_doc},
    {NULL, NULL, 0, NULL},
};

static PyMethodDef Receiver_methods[] = {
    {"get_buffer", (PyCFunction)Receiver_get_buffer, METH_O, get_buffer_doc},
    {"buffer_updated", (PyCFunction)Receiver_buffer_updated, METH_O, buffer_updated_doc},
    {"expect", (PyCFunction)(void (*)(void))Receiver_expect, METH_FASTCALL, expect_doc},
    {"land", (PyCFunction)Receiver_land, METH_O, land_doc},
    {"use_fd", (PyCFunction)Receiver_use_fd, METH_O, use_fd_doc},
    {"close", (PyCFunction)Receiver_close, METH_NOARGS, close_doc},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef Receiver_members[] = {
    {"mark", T_INT, offsetof(Receiver, mark), READONLY, "the receive low-water mark as last set"},
    {"last_read", T_DOUBLE, offsetof(Receiver, last_read), READONLY,
     "time.monotonic() of the last read taken without Python (0.0: none yet)"},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef Receiver_getset[] = {
    {"filling", (getter)Receiver_get_filling, NULL, "whether reads go to a value or a landing request", NULL},
    {"armed", (getter)Receiver_get_armed, NULL, "whether the next request may land (land())", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyDoc_STRVAR(Receiver_doc,
             "Receiver(get_buffer, buffer_updated, least, chunk)\n--\n\n"
             "A connection's get_buffer/buffer_updated that take the reads in the middle of a large value,\n"
             "and whole landing requests, without calling Python (kvd/protocol/_receive.c says why).");

static PyTypeObject ReceiverType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kvd.protocol._receive.Receiver",
    .tp_basicsize = sizeof(Receiver),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = Receiver_doc,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Receiver_init,
    .tp_dealloc = (destructor)Receiver_dealloc,
    .tp_traverse = (traverseproc)Receiver_traverse,
    .tp_clear = (inquiry)Receiver_clear,
    .tp_methods = Receiver_methods,
    .tp_members = Receiver_members,
    .tp_getset = Receiver_getset,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "kvd.protocol._receive",
    .m_doc = "The receive path's per-read steps in C: the reads in the middle of a large value, taken\n"
             "without running Python, and the check of a landing request's header.",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC
PyInit__receive(void)
{
    if (PyType_Ready(&ReceiverType) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    Py_INCREF(&ReceiverType);
    if (PyModule_AddObject(m, "Receiver", (PyObject *)&ReceiverType) < 0) {
        Py_DECREF(&ReceiverType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
