/* The records section of a RecordBatch v2, decoded in C: the consumer's hot loop.
 *
 * An optional accelerator for pulllog.records.decoding, which holds the pure-Python decoder
 * this file must agree with exactly (tests/log/test_decoding.py checks both on random and
 * on damaged input). The record layout is in pulllog/records/batch.py; in short, each record
 * is
 *
 *     length: varint, attributes: int8, timestampDelta: varlong, offsetDelta: varint,
 *     keyLength: varint (negative = null), key, valueLength: varint (negative = null),
 *     value, headersCount: varint, then per header keyLength: varint, key (utf-8),
 *     valueLength: varint (negative = null), value
 *
 * with zigzag varints of at most 10 bytes (64 bits). Rules kept here, as in Python:
 *
 * - Never read outside data[pos:end]; malformed bytes raise CorruptRecordError (never crash):
 *   a varint past the end or longer than 64 bits, a field past the record's declared
 *   length or the end, a null or negative count of headers, bytes left over.
 * - Offsets and timestamps are base + delta as Python ints: on int64 overflow (only
 *   damaged or hostile data does that) the sum is made with Python's arbitrary-precision
 *   ints, so the result is the pure-Python decoder's.
 * - Records are made as the Python decoder makes them: ``record_type`` allocated bare and
 *   its eight slots (topic, partition, offset, timestamp, timestamp_type, key, value,
 *   headers) set through their descriptors, so a frozen dataclass with slots works and the
 *   objects are the very same as ``record_type(...)`` would make.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <structmember.h>  /* T_OBJECT_EX, READONLY (Python.h has them from 3.12 as Py_T_...) */

#define N_FIELDS 8
static const char *const FIELD_NAMES[N_FIELDS] = {
    "topic", "partition", "offset", "timestamp", "timestamp_type", "key", "value", "headers"};
enum { F_TOPIC, F_PARTITION, F_OFFSET, F_TIMESTAMP, F_TIMESTAMP_TYPE, F_KEY, F_VALUE, F_HEADERS };

/* The descriptors of the last record type seen (one in practice: ConsumerRecord). */
static PyTypeObject *cached_type = NULL;
static PyObject *cached_descr[N_FIELDS];
static descrsetfunc cached_set[N_FIELDS];
/* Where a plain slot (a member descriptor of an object field: what __slots__ and a dataclass
 * with slots=True make) lives in the object, else -1: filling a fresh record's slot is then
 * a store, as the descriptor's own setter would do it, without its call and checks. */
static Py_ssize_t cached_offset[N_FIELDS];
static PyObject *empty_tuple = NULL;
static PyObject *corrupt_error = NULL;  /* pulllog.records.errors.CorruptRecordError, as the Python decoder raises */

static int
load_descriptors(PyTypeObject *type)
{
    PyObject *descr[N_FIELDS];
    for (int i = 0; i < N_FIELDS; i++) {
        descr[i] = PyObject_GetAttrString((PyObject *)type, FIELD_NAMES[i]);
        if (descr[i] == NULL || Py_TYPE(descr[i])->tp_descr_set == NULL) {
            if (descr[i] != NULL) {
                PyErr_Format(PyExc_TypeError, "%.200s.%s is not a slot (a dataclass with slots=True is expected)",
                             type->tp_name, FIELD_NAMES[i]);
            }
            for (int j = 0; j <= i; j++) {
                Py_XDECREF(descr[j]);
            }
            return -1;
        }
    }
    if (cached_type != NULL) {
        for (int i = 0; i < N_FIELDS; i++) {
            Py_DECREF(cached_descr[i]);
        }
        Py_DECREF(cached_type);
    }
    Py_INCREF(type);
    cached_type = type;
    for (int i = 0; i < N_FIELDS; i++) {
        cached_descr[i] = descr[i];
        cached_set[i] = Py_TYPE(descr[i])->tp_descr_set;
        cached_offset[i] = -1;
        if (Py_IS_TYPE(descr[i], &PyMemberDescr_Type)) {
            PyMemberDef *member = ((PyMemberDescrObject *)descr[i])->d_member;
            if (member->type == T_OBJECT_EX && !(member->flags & READONLY) && member->offset > 0 &&
                (size_t)member->offset + sizeof(PyObject *) <= (size_t)type->tp_basicsize) {
                cached_offset[i] = member->offset;
            }
        }
    }
    return 0;
}

static int
corrupt(const char *message)
{
    PyErr_SetString(corrupt_error, message);
    return -1;
}

/* A zigzag varint at data[*pos], not reading at or past ``end``; the same checks, in
 * the same order, as pulllog.records.batch.decode_varint. */
static inline int
read_varint(const unsigned char *data, Py_ssize_t *pos, Py_ssize_t end, int64_t *out)
{
    Py_ssize_t p = *pos;
    uint64_t result = 0;
    int shift = 0;
    if (p < end && data[p] < 0x80) {  /* one byte: the common case */
        result = data[p];
        *out = (int64_t)((result >> 1) ^ (0 - (result & 1)));
        *pos = p + 1;
        return 0;
    }
    for (;;) {
        if (p >= end) {
            return corrupt("varint runs past the end of the buffer");
        }
        unsigned char b = data[p++];
        if (shift == 63 && (b & 0x7F) > 1) {
            return corrupt("varint does not fit in 64 bits");
        }
        result |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            break;
        }
        shift += 7;
        if (shift > 63) {
            return corrupt("varint is longer than 10 bytes");
        }
    }
    *out = (int64_t)((result >> 1) ^ (0 - (result & 1)));
    *pos = p;
    return 0;
}

/* base + delta as a Python int, exact even where int64 would overflow. */
static PyObject *
add_exact(int64_t base, int64_t delta)
{
    long long sum;
    if (!__builtin_add_overflow((long long)base, (long long)delta, &sum)) {
        return PyLong_FromLongLong(sum);
    }
    PyObject *a = PyLong_FromLongLong(base);
    PyObject *b = a == NULL ? NULL : PyLong_FromLongLong(delta);
    PyObject *r = b == NULL ? NULL : PyNumber_Add(a, b);
    Py_XDECREF(a);
    Py_XDECREF(b);
    return r;
}

/* data[pos:pos+n] as bytes, or None for a negative n; NULL (CorruptRecordError) past ``limit``. */
static PyObject *
read_bytes(const unsigned char *data, Py_ssize_t *pos, Py_ssize_t limit, int64_t n)
{
    if (n < 0) {
        Py_RETURN_NONE;
    }
    if (n > limit - *pos) {
        corrupt("a field runs past the end of its record");
        return NULL;
    }
    PyObject *b = PyBytes_FromStringAndSize((const char *)data + *pos, (Py_ssize_t)n);
    *pos += (Py_ssize_t)n;
    return b;
}

static PyObject *
read_headers(const unsigned char *data, Py_ssize_t *pos, Py_ssize_t end)
{
    int64_t count, n;
    if (read_varint(data, pos, end, &count) < 0) {
        return NULL;
    }
    if (count < 0) {
        corrupt("a record has a negative number of headers");
        return NULL;
    }
    if (count > (end - *pos) / 2) {  /* each header takes at least two bytes */
        corrupt("a record's headers run past the end of the batch");
        return NULL;
    }
    PyObject *headers = PyTuple_New((Py_ssize_t)count);
    if (headers == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < (Py_ssize_t)count; i++) {
        if (read_varint(data, pos, end, &n) < 0) {
            goto fail;
        }
        if (n < 0) {
            corrupt("a record header key is null");
            goto fail;
        }
        if (n > end - *pos) {
            corrupt("a record header key runs past the end of the batch");
            goto fail;
        }
        PyObject *key = PyUnicode_DecodeUTF8((const char *)data + *pos, (Py_ssize_t)n, "replace");
        if (key == NULL) {
            goto fail;
        }
        *pos += (Py_ssize_t)n;
        PyObject *value = NULL;
        if (read_varint(data, pos, end, &n) < 0 || (value = read_bytes(data, pos, end, n)) == NULL) {
            Py_DECREF(key);
            goto fail;
        }
        PyObject *pair = PyTuple_Pack(2, key, value);
        Py_DECREF(key);
        Py_DECREF(value);
        if (pair == NULL) {
            goto fail;
        }
        PyTuple_SET_ITEM(headers, i, pair);
    }
    return headers;
fail:
    Py_DECREF(headers);
    return NULL;
}

/* Set a slot through its descriptor and drop our reference to ``value``. */
static inline int
set_field(PyObject *record, int field, PyObject *value)
{
    if (value == NULL) {
        return -1;
    }
    Py_ssize_t offset = cached_offset[field];
    if (offset >= 0) {  /* the record is fresh: each slot is set once, from NULL */
        PyObject **slot = (PyObject **)((char *)record + offset);
        PyObject *old = *slot;
        *slot = value;  /* our reference moves into the slot */
        Py_XDECREF(old);
        return 0;
    }
    int rc = cached_set[field](cached_descr[field], record, value);
    Py_DECREF(value);
    return rc;
}

PyDoc_STRVAR(decode_records_doc,
"decode_records(record_type, data, pos, end, count, base_offset, base_timestamp,\n"
"               timestamp_type, log_append_time, topic, partition) -> list\n\n"
"Decode ``count`` records from ``data[pos:end]`` (uncompressed record bytes) into\n"
"``record_type`` objects; CorruptRecordError on malformed bytes. See pulllog.records.decoding.");

static PyObject *
decode_records(PyObject *self, PyObject *args)
{
    PyTypeObject *type;
    Py_buffer view;
    Py_ssize_t pos, end, count;
    long long base_offset, base_timestamp, log_append_time;
    int timestamp_type;
    PyObject *topic, *partition;
    if (!PyArg_ParseTuple(args, "O!y*nnnLLiLOO:decode_records", &PyType_Type, &type, &view, &pos, &end, &count,
                          &base_offset, &base_timestamp, &timestamp_type, &log_append_time, &topic, &partition)) {
        return NULL;
    }
    PyObject *out = NULL, *ts_type = NULL, *fixed_timestamp = NULL;
    const unsigned char *data = (const unsigned char *)view.buf;
    if (pos < 0 || end > view.len || pos > end) {
        PyErr_Format(corrupt_error, "records at %zd..%zd are outside the %zd bytes given", pos, end, view.len);
        goto done;
    }
    if (type != cached_type && load_descriptors(type) < 0) {
        goto done;
    }
    if (count < 0) {
        count = 0;  /* as range(count) in Python: then the bytes must be used up by none */
    }
    if (count > (end - pos) / 7) {  /* a record takes at least seven bytes */
        PyErr_Format(corrupt_error, "%zd records cannot fit in %zd bytes", count, end - pos);
        goto done;
    }
    ts_type = PyLong_FromLong(timestamp_type);
    if (ts_type == NULL) {
        goto done;
    }
    if (timestamp_type) {
        fixed_timestamp = PyLong_FromLongLong(log_append_time);
        if (fixed_timestamp == NULL) {
            goto done;
        }
    }
    out = PyList_New(count);
    if (out == NULL) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t length, ts_delta, offset_delta, n;
        if (read_varint(data, &pos, end, &length) < 0) {
            goto fail;
        }
        if (length < 0 || length > end - pos) {
            corrupt("a record's length runs past the end of the batch");
            goto fail;
        }
        Py_ssize_t record_end = pos + (Py_ssize_t)length;
        pos += 1;  /* record attributes: unused */
        if (read_varint(data, &pos, record_end, &ts_delta) < 0 ||
            read_varint(data, &pos, record_end, &offset_delta) < 0) {
            goto fail;
        }
        PyObject *record = type->tp_alloc(type, 0);
        if (record == NULL) {
            goto fail;
        }
        PyList_SET_ITEM(out, i, record);  /* the list owns it from here, even half-filled */
        Py_INCREF(topic);
        Py_INCREF(partition);
        Py_INCREF(ts_type);
        if (set_field(record, F_TOPIC, topic) < 0 || set_field(record, F_PARTITION, partition) < 0 ||
            set_field(record, F_OFFSET, add_exact(base_offset, offset_delta)) < 0 ||
            set_field(record, F_TIMESTAMP_TYPE, ts_type) < 0) {
            goto fail;
        }
        if (fixed_timestamp != NULL) {
            Py_INCREF(fixed_timestamp);
            if (set_field(record, F_TIMESTAMP, fixed_timestamp) < 0) {
                goto fail;
            }
        } else if (set_field(record, F_TIMESTAMP, add_exact(base_timestamp, ts_delta)) < 0) {
            goto fail;
        }
        if (read_varint(data, &pos, record_end, &n) < 0 ||
            set_field(record, F_KEY, read_bytes(data, &pos, record_end, n)) < 0) {
            goto fail;
        }
        if (read_varint(data, &pos, record_end, &n) < 0 ||
            set_field(record, F_VALUE, read_bytes(data, &pos, record_end, n)) < 0) {
            goto fail;
        }
        if (pos < record_end && data[pos] == 0) {  /* no headers: the common case */
            pos += 1;
            Py_INCREF(empty_tuple);
            if (set_field(record, F_HEADERS, empty_tuple) < 0) {
                goto fail;
            }
        } else if (set_field(record, F_HEADERS, read_headers(data, &pos, record_end)) < 0) {
            goto fail;
        }
        if (pos != record_end) {
            PyErr_Format(corrupt_error, "a record declared %lld bytes but its fields took %lld",
                         (long long)length, (long long)(length + pos - record_end));
            goto fail;
        }
    }
    if (pos != end) {
        PyErr_Format(corrupt_error, "%zd bytes left over after %zd records", end - pos, count);
        goto fail;
    }
    goto done;
fail:
    Py_CLEAR(out);
done:
    Py_XDECREF(ts_type);
    Py_XDECREF(fixed_timestamp);
    PyBuffer_Release(&view);
    return out;
}

static PyMethodDef methods[] = {
    {"decode_records", decode_records, METH_VARARGS, decode_records_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "pulllog.records._crecords",
    "RecordBatch v2 records decoded in C (optional; see pulllog.records.decoding).", -1, methods,
};

PyMODINIT_FUNC
PyInit__crecords(void)
{
    PyObject *records = PyImport_ImportModule("pulllog.records.errors");
    if (records == NULL) {
        return NULL;
    }
    corrupt_error = PyObject_GetAttrString(records, "CorruptRecordError");
    Py_DECREF(records);
    if (corrupt_error == NULL) {
        return NULL;
    }
    empty_tuple = PyTuple_New(0);
    if (empty_tuple == NULL) {
        return NULL;
    }
    return PyModule_Create(&module);
}
