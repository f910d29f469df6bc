/* The checks of a Produce request's record batches before they are appended, in C.
 *
 * An optional accelerator for pulllog.log.log.Log.validate, whose Python code (with
 * pulllog.records.batch.validate_batch) holds the rules and stays the reference:
 * tests/log/test_clog.py checks that both accept the same data with the same headers. The
 * broker runs this once per partition of every Produce request; in Python it took ~15,000
 * instructions for a one-batch request, a seventh of the broker's whole request then.
 *
 * validate(data, max_message_bytes) walks the batches of `data` (bytes, bytearray or any
 * buffer) and returns [(position, BatchHeader), ...] when every batch is valid:
 *
 * - the 61-byte header is there and its magic byte is 2;
 * - batchLength covers at least the header, and the batch ends within the data;
 * - lastOffsetDelta and the record count are not negative, and a batch with records counts
 *   lastOffsetDelta + 1 of them (producers send dense batches);
 * - the CRC-32C of everything after the CRC field is the stored one (computed by the same
 *   function the Python code calls, given to bind());
 * - the batch (with its 12-byte offset and length prefix) is at most max_message_bytes.
 *
 * It returns None for empty data or at the first rule broken, and the Python code then
 * raises its own error for it, so every refusal and its message stay the Python code's.
 * Headers are BatchHeader named tuples made as tuple.__new__ makes them, with the fields
 * read as struct ">qiibIhiqqqhii" reads them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define HEADER_SIZE 61
#define LOG_OVERHEAD 12
#define CRC_START 21

static PyTypeObject *header_type = NULL;  /* pulllog.records.batch.BatchHeader */
static PyObject *crc32c = NULL;           /* pulllog.records.crc.crc32c */

static int64_t
be(const unsigned char *p, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) {
        v = (v << 8) | p[i];
    }
    return (int64_t)v;
}

/* The 13 header fields as struct ">qiibIhiqqqhii" gives them. */
static void
read_fields(const unsigned char *p, int64_t f[13])
{
    f[0] = be(p, 8);                          /* base_offset */
    f[1] = (int32_t)(uint32_t)be(p + 8, 4);   /* batch_length */
    f[2] = (int32_t)(uint32_t)be(p + 12, 4);  /* partition_leader_epoch */
    f[3] = (int8_t)p[16];                     /* magic */
    f[4] = (uint32_t)be(p + 17, 4);           /* crc */
    f[5] = (int16_t)(uint16_t)be(p + 21, 2);  /* attributes */
    f[6] = (int32_t)(uint32_t)be(p + 23, 4);  /* last_offset_delta */
    f[7] = be(p + 27, 8);                     /* base_timestamp */
    f[8] = be(p + 35, 8);                     /* max_timestamp */
    f[9] = be(p + 43, 8);                     /* producer_id */
    f[10] = (int16_t)(uint16_t)be(p + 51, 2); /* producer_epoch */
    f[11] = (int32_t)(uint32_t)be(p + 53, 4); /* base_sequence */
    f[12] = (int32_t)(uint32_t)be(p + 57, 4); /* records_count */
}

static PyObject *
make_header(const int64_t f[13])
{
    PyObject *header = header_type->tp_alloc(header_type, 13);
    if (header == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < 13; i++) {
        PyObject *value = PyLong_FromLongLong(f[i]);
        if (value == NULL) {
            Py_DECREF(header);  /* (a tuple dealloc skips the items not set yet) */
            return NULL;
        }
        PyTuple_SET_ITEM(header, i, value);
    }
    return header;
}

/* 1: the CRC matches; 0: it does not (or the function refused: Python finds out); -1: error. */
static int
crc_matches(const unsigned char *start, Py_ssize_t length, int64_t stored)
{
    PyObject *view = PyMemoryView_FromMemory((char *)start, length, PyBUF_READ);
    if (view == NULL) {
        return -1;
    }
    PyObject *computed = PyObject_CallOneArg(crc32c, view);
    Py_DECREF(view);
    if (computed == NULL) {
        PyErr_Clear();
        return 0;
    }
    int overflow;
    long long value = PyLong_AsLongLongAndOverflow(computed, &overflow);
    Py_DECREF(computed);
    if (value == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return !overflow && value == stored;
}

static PyObject *
validate(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "validate(data, max_message_bytes)");
        return NULL;
    }
    if (header_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "bind() was not called");
        return NULL;
    }
    long long max_bytes = PyLong_AsLongLong(args[1]);
    if (max_bytes == -1 && PyErr_Occurred()) {
        return NULL;
    }
    Py_buffer buffer;
    if (PyObject_GetBuffer(args[0], &buffer, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    const unsigned char *data = buffer.buf;
    Py_ssize_t end = buffer.len, pos = 0;
    PyObject *batches = end > 0 ? PyList_New(0) : NULL;
    if (batches == NULL) {
        goto refuse;
    }
    while (pos < end) {
        int64_t f[13];
        if (end - pos < HEADER_SIZE) {
            goto refuse;
        }
        read_fields(data + pos, f);
        int64_t batch_end = pos + LOG_OVERHEAD + f[1];
        if (f[3] != 2 || f[1] < HEADER_SIZE - LOG_OVERHEAD || batch_end > end || f[6] < 0 || f[12] < 0
                || LOG_OVERHEAD + f[1] > max_bytes || (f[12] != f[6] + 1 && f[12] > 0)) {
            goto refuse;
        }
        int crc = crc_matches(data + pos + CRC_START, (Py_ssize_t)batch_end - pos - CRC_START, f[4]);
        if (crc != 1) {
            if (crc < 0) {
                goto fail;
            }
            goto refuse;
        }
        PyObject *header = make_header(f);
        if (header == NULL) {
            goto fail;
        }
        PyObject *position = PyLong_FromSsize_t(pos);
        if (position == NULL) {
            Py_DECREF(header);
            goto fail;
        }
        PyObject *entry = PyTuple_Pack(2, position, header);
        Py_DECREF(position);
        Py_DECREF(header);
        if (entry == NULL || PyList_Append(batches, entry) < 0) {
            Py_XDECREF(entry);
            goto fail;
        }
        Py_DECREF(entry);
        pos = (Py_ssize_t)batch_end;
    }
    PyBuffer_Release(&buffer);
    return batches;
refuse:
    if (PyErr_Occurred()) {  /* (only PyList_New(0) can have failed) */
        goto fail;
    }
    Py_XDECREF(batches);
    PyBuffer_Release(&buffer);
    Py_RETURN_NONE;
fail:
    Py_XDECREF(batches);
    PyBuffer_Release(&buffer);
    return NULL;
}

/* bind(BatchHeader, crc32c) */
static PyObject *
bind(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyType_Check(args[0]) || !PyType_IsSubtype((PyTypeObject *)args[0], &PyTuple_Type)
            || !PyCallable_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "bind(BatchHeader, crc32c): a named tuple type and a function");
        return NULL;
    }
    Py_INCREF(args[0]);
    Py_XSETREF(header_type, (PyTypeObject *)args[0]);
    Py_INCREF(args[1]);
    Py_XSETREF(crc32c, args[1]);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"validate", (PyCFunction)(void (*)(void))validate, METH_FASTCALL,
     "validate(data, max_message_bytes) -> [(position, BatchHeader), ...] | None: the batches of a "
     "Produce request's records when all are valid, else None (the Python code says why)."},
    {"bind", (PyCFunction)(void (*)(void))bind, METH_FASTCALL, "bind(BatchHeader, crc32c)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_clog", "Record batches checked before an append, in C (see pulllog.log.log).",
    -1, methods,
};

PyMODINIT_FUNC
PyInit__clog(void)
{
    return PyModule_Create(&module_def);
}
