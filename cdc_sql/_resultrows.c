/*
 * cdc_sql._resultrows: the compiled reader of a snapshot's rows.
 *
 * Decodes the rows of a MySQL/MariaDB binary-protocol result set (the answer to
 * COM_STMT_EXECUTE: "ProtocolBinary::ResultsetRow" packets) into Arrow column buffers. The
 * Python side (cdc_sql/source/result_rows.py) prepares and executes the statement on a pymysql
 * connection, reads the socket in large chunks and hands them here; each call decodes every
 * whole packet it is given, up to a batch's rows or bytes, without the GIL, and says why it
 * stopped. It never reads past the result set: the end (EOF or OK packet), an error packet or a
 * packet of 16 MB or more (a row split over packets, put together by the caller) is left to
 * Python, unread; any other packet is an error.
 *
 * Column kinds, one per wire format: fixed widths (1, 2, 4, 8 bytes, little-endian, copied as
 * they are: signedness is the Arrow type's), DATE (days), DATETIME/TIMESTAMP (microseconds),
 * and length-encoded bytes (text, optionally checked to be UTF-8).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_buffers.h"

enum { K_FIX1 = 1, K_FIX2 = 2, K_FIX4 = 4, K_FIX8 = 8, K_DATE = 10, K_DATETIME = 12, K_BYTES = 15 };
#define F_UTF8 1

/* why decode() stopped */
enum { S_MORE = 0, S_FULL = 1, S_END = 2, S_ERROR = 3, S_LONG = 4 };

typedef struct {
    int kind, flags;
    Buf values, offsets, validity;
    int64_t nulls;
    int invalid_utf8;
} Col;

typedef struct {
    PyObject_HEAD
    int ncols;
    Col *cols;
    int64_t rows;
    size_t nbytes;  /* bytes of values held (the batch's size) */
    char error[160];
} Rows;

static int width(int kind) {
    switch (kind) {
    case K_FIX1: return 1;
    case K_FIX2: return 2;
    case K_FIX4: case K_DATE: return 4;
    case K_FIX8: case K_DATETIME: return 8;
    }
    return 0;
}

static int start(Rows *r) {
    int32_t zero = 0;
    for (int i = 0; i < r->ncols; i++)
        if (r->cols[i].kind == K_BYTES && buf_put(&r->cols[i].offsets, &zero, 4)) return -1;
    return 0;
}

static void release(Rows *r) {
    for (int i = 0; i < r->ncols; i++) {
        Col *c = &r->cols[i];
        free(c->values.data); free(c->offsets.data); free(c->validity.data);
        memset(&c->values, 0, sizeof(Buf)); memset(&c->offsets, 0, sizeof(Buf));
        memset(&c->validity, 0, sizeof(Buf));
        c->nulls = 0;
        c->invalid_utf8 = 0;
    }
    r->rows = 0;
    r->nbytes = 0;
}

/* A length-encoded integer at p (of at most `left` bytes): its size in bytes, 0 if cut off,
   -1 for a NULL marker or an invalid first byte. */
static int lenenc(const unsigned char *p, size_t left, uint64_t *value) {
    if (left < 1) return 0;
    unsigned char first = p[0];
    if (first < 0xFB) { *value = first; return 1; }
    int n = first == 0xFC ? 2 : first == 0xFD ? 3 : first == 0xFE ? 8 : -1;
    if (n < 0) return -1;
    if (left < (size_t)n + 1) return 0;
    *value = le(p + 1, n);
    return n + 1;
}

/* One row packet's payload (without its header byte 0x00): every column appended, or -1 with
   r->error set. */
static int decode_row(Rows *r, const unsigned char *p, size_t n) {
    size_t bitmap = (size_t)(r->ncols + 7 + 2) / 8;
    if (n < bitmap) goto cut;
    const unsigned char *nulls = p, *at = p + bitmap, *end = p + n;
    int64_t row = r->rows;
    for (int i = 0; i < r->ncols; i++) {
        Col *c = &r->cols[i];
        int bit = i + 2;
        if (nulls[bit / 8] & (1 << (bit % 8))) {
            c->nulls++;
            if (set_valid(&c->validity, row, 0)) goto memory;
            if (c->kind == K_BYTES) {
                if (end_var(&c->values, &c->offsets)) goto memory;
            } else {
                int w = width(c->kind);
                if (buf_reserve(&c->values, w)) goto memory;
                memset(c->values.data + c->values.len, 0, w);
                c->values.len += w;
            }
            continue;
        }
        if (set_valid(&c->validity, row, 1)) goto memory;
        switch (c->kind) {
        case K_FIX1: case K_FIX2: case K_FIX4: case K_FIX8:
            if ((size_t)(end - at) < (size_t)c->kind) goto cut;
            if (buf_put(&c->values, at, c->kind)) goto memory;
            at += c->kind;
            break;
        case K_DATE: case K_DATETIME: {
            if (at >= end) goto cut;
            int len = at[0];
            if ((size_t)(end - at) < (size_t)len + 1) goto cut;
            const unsigned char *v = at + 1;
            if (len != 4 && len != 7 && len != 11) {
                snprintf(r->error, sizeof r->error,
                         "column %d: a date of %d bytes (a zero date where none was expected)",
                         i + 1, len);
                return -1;
            }
            int64_t days = days_from_civil((int64_t)le(v, 2), v[2], v[3]);
            if (c->kind == K_DATE) {
                int32_t d = (int32_t)days;
                if (buf_put(&c->values, &d, 4)) goto memory;
            } else {
                int64_t micros = days * 86400000000LL;
                if (len >= 7) micros += ((int64_t)v[4] * 3600 + v[5] * 60 + v[6]) * 1000000LL;
                if (len == 11) micros += (int64_t)le(v + 7, 4);
                if (buf_put(&c->values, &micros, 8)) goto memory;
            }
            at += len + 1;
            break;
        }
        case K_BYTES: {
            uint64_t len;
            int k = lenenc(at, (size_t)(end - at), &len);
            if (k <= 0 || (uint64_t)(end - at - k) < len) goto cut;
            at += k;
            if ((c->flags & F_UTF8) && !c->invalid_utf8 && !utf8_valid(at, (size_t)len))
                c->invalid_utf8 = 1;
            if (buf_put(&c->values, at, (size_t)len) || end_var(&c->values, &c->offsets))
                goto memory;
            r->nbytes += (size_t)len;
            at += len;
            break;
        }
        }
    }
    if (at != end) {
        snprintf(r->error, sizeof r->error, "a row of %zu bytes holds %zu more than its columns",
                 n, (size_t)(end - at));
        return -1;
    }
    r->rows++;
    return 0;
cut:
    snprintf(r->error, sizeof r->error, "a row of %zu bytes ends inside its columns", n);
    return -1;
memory:
    snprintf(r->error, sizeof r->error, "out of memory");
    return -1;
}

/* decode(buffer, start, max_rows, max_bytes) -> (position, status): the whole packets from
   `start` decoded until the batch holds max_rows rows or max_bytes bytes of values (S_FULL),
   the data ends inside a packet (S_MORE), or a packet that is not a row of under 16 MB comes
   (S_END: EOF, S_ERROR: an error packet, S_LONG: a row in several packets), `position` that
   packet's start; any other packet raises ValueError. */
static PyObject *Rows_decode(Rows *r, PyObject *args) {
    Py_buffer view;
    Py_ssize_t begin;
    long long max_rows, max_bytes;
    if (!PyArg_ParseTuple(args, "y*nLL", &view, &begin, &max_rows, &max_bytes)) return NULL;
    const unsigned char *data = view.buf;
    size_t size = (size_t)view.len, at = (size_t)begin;
    int status = S_MORE, failed = 0;
    r->error[0] = 0;
    if (begin < 0 || at > size) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "start past the buffer's end");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    while (1) {
        if (r->rows >= max_rows || r->nbytes >= (size_t)max_bytes) { status = S_FULL; break; }
        if (size - at < 4) break;
        size_t len = (size_t)le(data + at, 3);
        if (len == 0xFFFFFF) { status = S_LONG; break; }
        if (size - at - 4 < len) break;
        const unsigned char *payload = data + at + 4;
        if (len == 0 || payload[0] != 0x00) {
            if (len > 0 && payload[0] == 0xFF) status = S_ERROR;
            else if (len > 0 && payload[0] == 0xFE) status = S_END;
            else {
                snprintf(r->error, sizeof r->error, "a packet of %zu bytes where a row was due",
                         len);
                failed = 1;
            }
            break;
        }
        if (decode_row(r, payload + 1, len - 1)) { failed = 1; break; }
        at += 4 + len;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (failed) {
        PyErr_SetString(PyExc_ValueError, r->error);
        return NULL;
    }
    return Py_BuildValue("(ni)", (Py_ssize_t)at, status);
}

/* add(payload) -> None: one row packet's payload (header byte included), put together by the
   caller from the packets of a row of 16 MB or more. */
static PyObject *Rows_add(Rows *r, PyObject *args) {
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*", &view)) return NULL;
    const unsigned char *p = view.buf;
    int failed;
    r->error[0] = 0;
    if (view.len < 1 || p[0] != 0x00) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "not a row packet");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    failed = decode_row(r, p + 1, (size_t)view.len - 1);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (failed) {
        PyErr_SetString(PyExc_ValueError, r->error);
        return NULL;
    }
    Py_RETURN_NONE;
}

/* finish() -> (rows, [(values, offsets|None, validity, nulls, invalid_utf8)...]); the batch
   starts empty again. */
static PyObject *Rows_finish(Rows *r, PyObject *unused) {
    PyObject *columns = PyList_New(r->ncols);
    if (!columns) return NULL;
    for (int i = 0; i < r->ncols; i++) {
        Col *c = &r->cols[i];
        PyObject *item = Py_BuildValue(
            "(NNNLi)", bytes_of(&c->values),
            c->kind == K_BYTES ? bytes_of(&c->offsets) : Py_NewRef(Py_None),
            bytes_of(&c->validity), (long long)c->nulls, c->invalid_utf8);
        if (!item) { Py_DECREF(columns); return NULL; }
        PyList_SET_ITEM(columns, i, item);
    }
    PyObject *result = Py_BuildValue("(LN)", (long long)r->rows, columns);
    release(r);
    if (start(r)) return PyErr_NoMemory();
    return result;
}

static PyObject *Rows_rows(Rows *r, void *closure) { return PyLong_FromLongLong(r->rows); }

/* Rows(columns): columns are (kind, flags). */
static int Rows_init(Rows *r, PyObject *args, PyObject *kwds) {
    PyObject *columns;
    if (!PyArg_ParseTuple(args, "O", &columns)) return -1;
    PyObject *cols = PySequence_Fast(columns, "columns must be a sequence");
    if (!cols) return -1;
    r->ncols = (int)PySequence_Fast_GET_SIZE(cols);
    r->cols = calloc(r->ncols ? r->ncols : 1, sizeof(Col));
    for (int i = 0; i < r->ncols; i++) {
        Col *c = &r->cols[i];
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(cols, i), "ii", &c->kind, &c->flags)) {
            Py_DECREF(cols);
            return -1;
        }
        if (c->kind != K_BYTES && !width(c->kind)) {
            Py_DECREF(cols);
            PyErr_Format(PyExc_ValueError, "column %d: unknown kind %d", i + 1, c->kind);
            return -1;
        }
    }
    Py_DECREF(cols);
    if (start(r)) { PyErr_NoMemory(); return -1; }
    return 0;
}

static void Rows_dealloc(Rows *r) {
    if (r->cols) release(r);
    free(r->cols);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

static PyMethodDef Rows_methods[] = {
    {"decode", (PyCFunction)Rows_decode, METH_VARARGS,
     "decode(buffer, start, max_rows, max_bytes) -> (position, status)"},
    {"add", (PyCFunction)Rows_add, METH_VARARGS, "add(payload): one row's whole payload"},
    {"finish", (PyCFunction)Rows_finish, METH_NOARGS, "the batch's buffers; starts empty again"},
    {NULL}
};

static PyGetSetDef Rows_getset[] = {
    {"rows", (getter)Rows_rows, NULL, "rows held", NULL},
    {NULL}
};

static PyTypeObject RowsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cdc_sql._resultrows.Rows",
    .tp_basicsize = sizeof(Rows),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Rows_init,
    .tp_dealloc = (destructor)Rows_dealloc,
    .tp_methods = Rows_methods,
    .tp_getset = Rows_getset,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_resultrows",
                                    "The compiled reader of snapshot rows of cdc-sql.", -1, NULL};

PyMODINIT_FUNC PyInit__resultrows(void) {
    if (PyType_Ready(&RowsType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&RowsType);
    if (PyModule_AddObject(m, "Rows", (PyObject *)&RowsType) < 0) {
        Py_DECREF(&RowsType);
        Py_DECREF(m);
        return NULL;
    }
    PyModule_AddIntConstant(m, "MORE", S_MORE);
    PyModule_AddIntConstant(m, "FULL", S_FULL);
    PyModule_AddIntConstant(m, "END", S_END);
    PyModule_AddIntConstant(m, "ERROR", S_ERROR);
    PyModule_AddIntConstant(m, "LONG", S_LONG);
    return m;
}
