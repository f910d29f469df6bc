/* The records section of a RecordBatch v2, decoded in C (the consumer's hot loop) and
 * encoded in C (the producer's; see the encoding section at the end).
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

/* ------------------------------------------------------------------------------- encoding
 *
 * The producer's record encoder (pulllog.client.accumulator.ProducerBatch), the other hot
 * loop: records are appended to a batch's records section (a bytearray) in the layout above,
 * with attributes 0. The pure-Python encoder in ProducerBatch.append / .extend is the
 * reference; tests/records/test_encoding.py checks that both make the same bytes.
 *
 * - append_record(records, offset_delta, timestamp_delta, key, value, headers): one record;
 *   key and value are None (null) or bytes-like, headers the encoded headers part (bytes).
 * - append_values(records, items, offset_delta, timestamp_delta): a message set, items being
 *   values (bytes or None) or tuples (key, value[, None[, None]]) of bytes or None; returns
 *   how many it appended, or -1 and appends nothing when an item needs the general encoder
 *   (headers, its own timestamp, a value that is not bytes). Sizes are computed first, so
 *   the bytearray grows once and is left as it was on any error.
 */

static inline uint64_t
zigzag(int64_t v)
{
    return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

static inline Py_ssize_t
varint_size(int64_t value)
{
    uint64_t v = zigzag(value);
    Py_ssize_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static inline char *
put_varint(char *p, int64_t value)
{
    uint64_t v = zigzag(value);
    while (v >= 0x80) {
        *p++ = (char)((v & 0x7F) | 0x80);
        v >>= 7;
    }
    *p++ = (char)v;
    return p;
}

/* A record's size after its length field, for lk / lv < 0 meaning null. */
static inline Py_ssize_t
record_body_size(int64_t td, int64_t od, Py_ssize_t lk, Py_ssize_t lv, Py_ssize_t lh)
{
    return 1 + varint_size(td) + varint_size(od) + (lk < 0 ? 1 : varint_size(lk) + lk)
           + (lv < 0 ? 1 : varint_size(lv) + lv) + lh;
}

static inline char *
put_record(char *p, Py_ssize_t body, int64_t td, int64_t od, const char *k, Py_ssize_t lk,
           const char *v, Py_ssize_t lv, const char *h, Py_ssize_t lh)
{
    p = put_varint(p, body);
    *p++ = 0;  /* attributes */
    p = put_varint(p, td);
    p = put_varint(p, od);
    p = put_varint(p, lk < 0 ? -1 : lk);
    if (lk > 0) {
        memcpy(p, k, lk);
        p += lk;
    }
    p = put_varint(p, lv < 0 ? -1 : lv);
    if (lv > 0) {
        memcpy(p, v, lv);
        p += lv;
    }
    memcpy(p, h, lh);
    return p + lh;
}

static int
get_int64(PyObject *obj, int64_t *out)
{
    long long v = PyLong_AsLongLong(obj);
    if (v == -1 && PyErr_Occurred()) {
        return -1;
    }
    *out = (int64_t)v;
    return 0;
}

static int
grow(PyObject *records, Py_ssize_t more, char **at)
{
    Py_ssize_t old = PyByteArray_GET_SIZE(records);
    if (more > PY_SSIZE_T_MAX - old) {
        PyErr_NoMemory();
        return -1;
    }
    if (PyByteArray_Resize(records, old + more) < 0) {  /* over-allocates: appends are amortised */
        return -1;
    }
    *at = PyByteArray_AS_STRING(records) + old;
    return 0;
}

PyDoc_STRVAR(append_record_doc,
"append_record(records, offset_delta, timestamp_delta, key, value, headers)\n"
"\n"
"Append one record (attributes 0) to the bytearray ``records``; key and value are None or\n"
"bytes-like, ``headers`` the encoded headers part.");

static PyObject *
append_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_Format(PyExc_TypeError, "append_record() takes 6 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *records = args[0], *key = args[3], *value = args[4], *headers = args[5];
    int64_t od, td;
    if (!PyByteArray_Check(records)) {
        PyErr_SetString(PyExc_TypeError, "append_record(): records must be a bytearray");
        return NULL;
    }
    if (get_int64(args[1], &od) < 0 || get_int64(args[2], &td) < 0) {
        return NULL;
    }
    if (!PyBytes_Check(headers)) {
        PyErr_SetString(PyExc_TypeError, "append_record(): headers must be bytes (encoded)");
        return NULL;
    }
    Py_buffer kview = {0}, vview = {0};
    Py_ssize_t lk = -1, lv = -1;
    if (key != Py_None) {
        if (PyObject_GetBuffer(key, &kview, PyBUF_SIMPLE) < 0) {
            return NULL;
        }
        lk = kview.len;
    }
    if (value != Py_None) {
        if (PyObject_GetBuffer(value, &vview, PyBUF_SIMPLE) < 0) {
            goto fail;
        }
        lv = vview.len;
    }
    Py_ssize_t lh = PyBytes_GET_SIZE(headers);
    Py_ssize_t body = record_body_size(td, od, lk, lv, lh);
    char *p;
    if (grow(records, varint_size(body) + body, &p) < 0) {
        goto fail;
    }
    put_record(p, body, td, od, kview.buf, lk, vview.buf, lv, PyBytes_AS_STRING(headers), lh);
    if (lk >= 0) {
        PyBuffer_Release(&kview);
    }
    if (lv >= 0) {
        PyBuffer_Release(&vview);
    }
    Py_RETURN_NONE;
fail:
    if (lk >= 0) {
        PyBuffer_Release(&kview);
    }
    return NULL;
}

/* An item of a message set in the simple form append_values takes: 1 and key / value
 * (borrowed, NULL meaning null), or 0 when it needs the general encoder. */
static inline int
simple_item(PyObject *item, PyObject **key, PyObject **value)
{
    if (PyBytes_CheckExact(item)) {
        *key = NULL;
        *value = item;
        return 1;
    }
    if (item == Py_None) {
        *key = *value = NULL;
        return 1;
    }
    if (!PyTuple_CheckExact(item)) {
        return 0;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(item);
    if (n < 2 || n > 4) {
        return 0;
    }
    if (n >= 3 && PyTuple_GET_ITEM(item, 2) != Py_None) {
        return 0;  /* headers */
    }
    if (n == 4 && PyTuple_GET_ITEM(item, 3) != Py_None) {
        return 0;  /* its own timestamp */
    }
    PyObject *k = PyTuple_GET_ITEM(item, 0), *v = PyTuple_GET_ITEM(item, 1);
    if ((k != Py_None && !PyBytes_CheckExact(k)) || (v != Py_None && !PyBytes_CheckExact(v))) {
        return 0;
    }
    *key = k == Py_None ? NULL : k;
    *value = v == Py_None ? NULL : v;
    return 1;
}

PyDoc_STRVAR(append_values_doc,
"append_values(records, items, offset_delta, timestamp_delta) -> int\n"
"\n"
"Append a message set of simple items (bytes or None values, or (key, value) tuples of bytes\n"
"or None, optionally followed by None headers and None timestamp), the first at\n"
"``offset_delta``, all at ``timestamp_delta``; return how many, or -1 (nothing appended) if\n"
"an item needs the general encoder.");

static PyObject *
append_values(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError, "append_values() takes 4 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *records = args[0];
    int64_t od, td;
    if (!PyByteArray_Check(records)) {
        PyErr_SetString(PyExc_TypeError, "append_values(): records must be a bytearray");
        return NULL;
    }
    if (get_int64(args[2], &od) < 0 || get_int64(args[3], &td) < 0) {
        return NULL;
    }
    PyObject *seq = PySequence_Fast(args[1], "append_values(): items must be a sequence");
    if (seq == NULL) {
        return NULL;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    PyObject *key = NULL, *value = NULL;
    /* pass 1: check every item and add up the sizes; no Python code runs until pass 2 ends,
     * so the items cannot change in between */
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (!simple_item(items[i], &key, &value)) {
            Py_DECREF(seq);
            return PyLong_FromLong(-1);
        }
        Py_ssize_t lk = key ? PyBytes_GET_SIZE(key) : -1, lv = value ? PyBytes_GET_SIZE(value) : -1;
        Py_ssize_t body = record_body_size(td, od + i, lk, lv, 1);
        total += varint_size(body) + body;
    }
    char *p;
    if (count && grow(records, total, &p) < 0) {
        Py_DECREF(seq);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        simple_item(items[i], &key, &value);
        Py_ssize_t lk = key ? PyBytes_GET_SIZE(key) : -1, lv = value ? PyBytes_GET_SIZE(value) : -1;
        Py_ssize_t body = record_body_size(td, od + i, lk, lv, 1);
        p = put_record(p, body, td, od + i, key ? PyBytes_AS_STRING(key) : NULL, lk,
                       value ? PyBytes_AS_STRING(value) : NULL, lv, "\0", 1);
    }
    Py_DECREF(seq);
    return PyLong_FromSsize_t(count);
}

static PyMethodDef methods[] = {
    {"decode_records", decode_records, METH_VARARGS, decode_records_doc},
    {"append_record", (PyCFunction)(void (*)(void))append_record, METH_FASTCALL, append_record_doc},
    {"append_values", (PyCFunction)(void (*)(void))append_values, METH_FASTCALL, append_values_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "pulllog.records._crecords",
    "RecordBatch v2 records decoded and encoded in C (optional; see pulllog.records.decoding and .encoding).", -1, methods,
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
