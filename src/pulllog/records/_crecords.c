/* The records section of a RecordBatch v2, decoded in C (the consumer's hot loop) and
 * encoded in C (the producer's; see the encoding, RecordsBuilder, SlotsMaker, Ready and SendPath
 * sections at the end, and pulllog.records.encoding for the Python they must agree with).
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
#include <time.h>
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
    /* not PyLong_AsLongLong: for an int of two digits or more (any timestamp in ms) it goes
     * through _PyLong_AsByteArray, several times slower on the per-record path */
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (overflow) {
        PyErr_SetString(PyExc_OverflowError, "Python int too large to convert to C long long");
        return -1;
    }
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

typedef int (*grow_function)(PyObject *records, Py_ssize_t more, char **at);

/* The message set ``items`` appended to ``records`` (grown by ``grow_records``) from offset
 * delta ``od``, all at timestamp delta ``td``: how many, -1 (nothing appended) when an item
 * is not simple, -2 with an exception set. */
static Py_ssize_t
put_values(PyObject *records, PyObject *items_obj, int64_t od, int64_t td, grow_function grow_records)
{
    PyObject *seq = PySequence_Fast(items_obj, "append_values(): items must be a sequence");
    if (seq == NULL) {
        return -2;
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
            return -1;
        }
        Py_ssize_t lk = key ? PyBytes_GET_SIZE(key) : -1, lv = value ? PyBytes_GET_SIZE(value) : -1;
        Py_ssize_t body = record_body_size(td, od + i, lk, lv, 1);
        total += varint_size(body) + body;
    }
    char *p;
    if (count && grow_records(records, total, &p) < 0) {
        Py_DECREF(seq);
        return -2;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        simple_item(items[i], &key, &value);
        Py_ssize_t lk = key ? PyBytes_GET_SIZE(key) : -1, lv = value ? PyBytes_GET_SIZE(value) : -1;
        Py_ssize_t body = record_body_size(td, od + i, lk, lv, 1);
        p = put_record(p, body, td, od + i, key ? PyBytes_AS_STRING(key) : NULL, lk,
                       value ? PyBytes_AS_STRING(value) : NULL, lv, "\0", 1);
    }
    Py_DECREF(seq);
    return count;
}

PyDoc_STRVAR(values_size_doc,
"values_size(items) -> int\n"
"\n"
"The bytes of keys and values in a message set of simple items (as append_values takes),\n"
"plus one for each tuple of three or four (its None headers); -1 if an item is not simple.");

static PyObject *
values_size(PyObject *self, PyObject *items_obj)
{
    PyObject *seq = PySequence_Fast(items_obj, "values_size(): items must be a sequence");
    if (seq == NULL) {
        return NULL;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq), total = 0;
    PyObject **items = PySequence_Fast_ITEMS(seq);
    PyObject *key, *value;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (!simple_item(items[i], &key, &value)) {
            total = -1;
            break;
        }
        total += (key ? PyBytes_GET_SIZE(key) : 0) + (value ? PyBytes_GET_SIZE(value) : 0)
                 + (PyTuple_CheckExact(items[i]) && PyTuple_GET_SIZE(items[i]) > 2);
    }
    Py_DECREF(seq);
    return PyLong_FromSsize_t(total);
}

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
    Py_ssize_t n = put_values(records, args[1], od, td, grow);
    return n == -2 ? NULL : PyLong_FromSsize_t(n);
}

/* ------------------------------------------------------------------------ RecordsBuilder
 *
 * A batch's records section as it is built: a bytearray (so len(), bytes() and memoryview()
 * are the bytearray's) that also keeps the batch's record count and its base and max
 * timestamps, so that adding a record is one call that encodes it, checks the batch has room
 * and updates the counters: the producer's per-record path (pulllog.client.accumulator).
 * pulllog.records.encoding.PyRecordsBuilder is the pure-Python twin this must agree with.
 *
 * - add_record(key, value, headers, timestamp, reserved=0, room=-1) -> offset delta: appends
 *   the record unless ``room`` >= 0, the builder holds records and len + reserved > room
 *   (then -1, nothing appended). ``reserved`` and ``room`` are the caller's estimate and
 *   bound (the accumulator's batch_size rule), not the record's exact size, so the C and
 *   Python twins cut batches at the same records.
 * - add_values(items, timestamp) -> n or -1: append_values on the builder.
 * - add_encoded(data, n, max_timestamp): n records the caller encoded (the general loop).
 * - seal(attributes, producer_id, producer_epoch, base_sequence, crc32c) -> bytes: the
 *   uncompressed batch, header and CRC included, in one allocation.
 * - add(key, value, headers, timestamp, reserved, room) -> make_future(result, delta,
 *   timestamp), or None without room: add_record, then ``reserved`` counted in
 *   self.reserved; the accumulator's whole per-record step in one call (RecordsBuilder's
 *   optional ``result`` and ``make_future``: the batch's outcome and how a record's future
 *   is made from it).
 */

typedef struct {
    PyByteArrayObject bytes;
    Py_ssize_t count;
    long long base_timestamp;
    long long max_timestamp;
    Py_ssize_t reserved;      /* the sum of add()'s ``reserved`` */
    PyObject *result;         /* add()'s first argument to make_future */
    PyObject *make_future;    /* add() returns make_future(result, offset delta, timestamp), or None */
} RecordsBuilder;

/* Make room for ``more`` bytes at the end of the builder's bytearray; *at points there.
 *
 * A bytearray grows by an eighth at a time (PyByteArray_Resize), so filling a 256 KiB batch
 * record by record reallocates it ~60 times, and realloc copies: measured, a few percent of
 * the producer's time. The builder doubles its allocation instead (the bytearray's own
 * fields: ob_bytes is its PyObject_Malloc'd block of ob_alloc bytes, a NUL after the data),
 * which copies each byte about once. Only on the plain layout it makes itself (no buffer
 * exported, no offset start); anything else goes through PyByteArray_Resize. */
static int
builder_grow(RecordsBuilder *self, Py_ssize_t more, char **at)
{
    PyByteArrayObject *b = &self->bytes;
    Py_ssize_t old = Py_SIZE(b);
    if (more > PY_SSIZE_T_MAX / 2 - old) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t need = old + more;
    if (b->ob_exports > 0 || (b->ob_bytes != NULL && b->ob_start != b->ob_bytes)) {
        return grow((PyObject *)self, more, at);
    }
    if (need + 1 > b->ob_alloc) {
        /* The first records get what they need and no more: a batch of one record (a batch-1
         * producer's every batch) or one message set never grows, and a small block comes
         * from pymalloc, where 1 KiB was a malloc'd block, fresh pages, for each of the
         * thousands of such batches a producer may hold unsent. From the next growth on, at
         * least 1 KiB and doubling. */
        Py_ssize_t alloc = b->ob_alloc == 0 ? need + 1 : b->ob_alloc < 512 ? 1024 : b->ob_alloc * 2;
        if (alloc < need + 1) {
            alloc = need + 1;
        }
        char *bytes = PyObject_Realloc(b->ob_bytes, (size_t)alloc);
        if (bytes == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        b->ob_bytes = b->ob_start = bytes;
        b->ob_alloc = alloc;
    }
    Py_SET_SIZE(b, need);
    b->ob_start[need] = '\0';
    *at = b->ob_start + old;
    return 0;
}

static int
builder_grow_records(PyObject *self, Py_ssize_t more, char **at)
{
    return builder_grow((RecordsBuilder *)self, more, at);
}

static void
builder_dealloc(RecordsBuilder *self)
{
    Py_CLEAR(self->result);
    Py_CLEAR(self->make_future);
    PyByteArray_Type.tp_dealloc((PyObject *)self);
}

static int
builder_init(RecordsBuilder *self, PyObject *args, PyObject *kwargs)
{
    long long base_timestamp;
    PyObject *result = Py_None, *make_future = Py_None;
    static char *kwlist[] = {"base_timestamp", "result", "make_future", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "L|OO:RecordsBuilder", kwlist, &base_timestamp, &result,
                                     &make_future)) {
        return -1;
    }
    Py_INCREF(result);
    Py_XSETREF(self->result, result);
    Py_INCREF(make_future);
    Py_XSETREF(self->make_future, make_future);
    self->reserved = 0;
    if (PyByteArray_GET_SIZE(self) != 0 && PyByteArray_Resize((PyObject *)self, 0) < 0) {
        return -1;
    }
    self->count = 0;
    self->base_timestamp = base_timestamp;
    self->max_timestamp = base_timestamp;
    return 0;
}

/* timestamp - base as an int64 delta, OverflowError if it does not fit */
static int
timestamp_delta(RecordsBuilder *self, PyObject *timestamp, int64_t *ts, int64_t *td)
{
    if (get_int64(timestamp, ts) < 0) {
        return -1;
    }
    long long d;
    if (__builtin_sub_overflow((long long)*ts, self->base_timestamp, &d)) {
        PyErr_SetString(PyExc_OverflowError, "a record's timestamp is too far from its batch's base timestamp");
        return -1;
    }
    *td = (int64_t)d;
    return 0;
}

PyDoc_STRVAR(builder_add_record_doc,
"add_record(key, value, headers, timestamp, reserved=0, room=-1) -> int\n"
"\n"
"Append one record and return its offset delta; -1 (nothing appended) when ``room`` >= 0,\n"
"the builder holds records and len(self) + reserved > room.");

static PyObject *
builder_add_record(RecordsBuilder *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 4 || nargs > 6) {
        PyErr_Format(PyExc_TypeError, "add_record() takes 4 to 6 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *key = args[0], *value = args[1], *headers = args[2];
    Py_ssize_t used = PyByteArray_GET_SIZE(self);
    if (nargs == 6 && self->count > 0) {
        Py_ssize_t reserved = PyLong_AsSsize_t(args[4]), room = PyLong_AsSsize_t(args[5]);
        if ((reserved == -1 || room == -1) && PyErr_Occurred()) {
            return NULL;
        }
        if (room >= 0 && used + reserved > room) {
            return PyLong_FromLong(-1);
        }
    }
    int64_t ts, td;
    if (timestamp_delta(self, args[3], &ts, &td) < 0) {
        return NULL;
    }
    if (!PyBytes_Check(headers)) {
        PyErr_SetString(PyExc_TypeError, "add_record(): headers must be bytes (encoded)");
        return NULL;
    }
    Py_buffer kview = {0}, vview = {0};
    Py_ssize_t lk = -1, lv = -1;
    const char *k = NULL, *v = NULL;
    if (key != Py_None) {
        if (PyBytes_CheckExact(key)) {  /* the common case: no buffer to take and release */
            k = PyBytes_AS_STRING(key);
            lk = PyBytes_GET_SIZE(key);
        } else {
            if (PyObject_GetBuffer(key, &kview, PyBUF_SIMPLE) < 0) {
                return NULL;
            }
            k = kview.buf;
            lk = kview.len;
        }
    }
    if (value != Py_None) {
        if (PyBytes_CheckExact(value)) {
            v = PyBytes_AS_STRING(value);
            lv = PyBytes_GET_SIZE(value);
        } else {
            if (PyObject_GetBuffer(value, &vview, PyBUF_SIMPLE) < 0) {
                goto fail;
            }
            v = vview.buf;
            lv = vview.len;
        }
    }
    Py_ssize_t lh = PyBytes_GET_SIZE(headers);
    Py_ssize_t od = self->count;
    Py_ssize_t body = record_body_size(td, od, lk, lv, lh);
    char *p;
    if (builder_grow(self, varint_size(body) + body, &p) < 0) {
        goto fail;
    }
    put_record(p, body, td, od, k, lk, v, lv, PyBytes_AS_STRING(headers), lh);
    if (kview.obj != NULL) {
        PyBuffer_Release(&kview);
    }
    if (vview.obj != NULL) {
        PyBuffer_Release(&vview);
    }
    self->count = od + 1;
    if (ts > self->max_timestamp) {
        self->max_timestamp = ts;
    }
    return PyLong_FromSsize_t(od);
fail:
    if (kview.obj != NULL) {
        PyBuffer_Release(&kview);
    }
    if (vview.obj != NULL) {
        PyBuffer_Release(&vview);
    }
    return NULL;
}

PyDoc_STRVAR(builder_add_doc,
"add(key, value, headers, timestamp, reserved, room) -> object or None\n"
"\n"
"add_record() with room, and then: ``reserved`` added to self.reserved and\n"
"make_future(result, offset delta, timestamp) returned; None (nothing appended) if no room.");

static PyObject *
builder_add(RecordsBuilder *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_Format(PyExc_TypeError, "add() takes 6 arguments (%zd given)", nargs);
        return NULL;
    }
    Py_ssize_t reserved = PyLong_AsSsize_t(args[4]);
    if (reserved == -1 && PyErr_Occurred()) {
        return NULL;
    }
    PyObject *delta = builder_add_record(self, args, nargs);
    if (delta == NULL) {
        return NULL;
    }
    if (PyLong_AsSsize_t(delta) < 0) {  /* -1: no room */
        Py_DECREF(delta);
        Py_RETURN_NONE;
    }
    self->reserved += reserved;
    PyObject *call[3] = {self->result, delta, args[3]};
    PyObject *future = PyObject_Vectorcall(self->make_future, call, 3, NULL);
    Py_DECREF(delta);
    return future;
}

PyDoc_STRVAR(builder_add_values_doc,
"add_values(items, timestamp) -> int\n"
"\n"
"append_values() on this builder: a message set of simple items, all at ``timestamp``;\n"
"how many were appended, or -1 (nothing appended) if an item needs the general encoder.");

static PyObject *
builder_add_values(RecordsBuilder *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "add_values() takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    int64_t ts, td;
    if (timestamp_delta(self, args[1], &ts, &td) < 0) {
        return NULL;
    }
    Py_ssize_t added = put_values((PyObject *)self, args[0], self->count, td, builder_grow_records);
    if (added == -2) {
        return NULL;
    }
    if (added > 0) {
        self->count += added;
        if (ts > self->max_timestamp) {
            self->max_timestamp = ts;
        }
    }
    return PyLong_FromSsize_t(added);
}

PyDoc_STRVAR(builder_add_encoded_doc,
"add_encoded(data, n, max_timestamp)\n"
"\n"
"Append ``n`` records the caller encoded (``data``), the latest timestamp among them being\n"
"``max_timestamp``.");

static PyObject *
builder_add_encoded(RecordsBuilder *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "add_encoded() takes 3 arguments (%zd given)", nargs);
        return NULL;
    }
    Py_ssize_t n = PyLong_AsSsize_t(args[1]);
    int64_t ts;
    if ((n == -1 && PyErr_Occurred()) || get_int64(args[2], &ts) < 0) {
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    char *p;
    int rc = builder_grow(self, view.len, &p);
    if (rc == 0) {
        memcpy(p, view.buf, view.len);
    }
    PyBuffer_Release(&view);
    if (rc < 0) {
        return NULL;
    }
    self->count += n;
    if (n > 0 && ts > self->max_timestamp) {
        self->max_timestamp = ts;
    }
    Py_RETURN_NONE;
}

static void
put_be(char *p, uint64_t v, int n)
{
    for (int i = n - 1; i >= 0; i--) {
        p[i] = (char)(v & 0xff);
        v >>= 8;
    }
}

PyDoc_STRVAR(builder_seal_doc,
"seal(attributes, producer_id, producer_epoch, base_sequence, crc32c) -> bytes\n"
"\n"
"The uncompressed RecordBatch v2 of the records so far: its 61-byte header (baseOffset 0,\n"
"partitionLeaderEpoch -1, magic 2, lastOffsetDelta count - 1, the base and max timestamps,\n"
"the producer fields, the count) and the records, with the CRC-32C that ``crc32c(data)``\n"
"gives for everything after the crc field, in one bytes object: what ProducerBatch.seal\n"
"packs and joins in Python (PyRecordsBuilder.seal).");

static PyObject *
builder_seal(RecordsBuilder *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_Format(PyExc_TypeError, "seal() takes 5 arguments (%zd given)", nargs);
        return NULL;
    }
    int64_t attributes, producer_id, producer_epoch, base_sequence;
    if (get_int64(args[0], &attributes) < 0 || get_int64(args[1], &producer_id) < 0 ||
        get_int64(args[2], &producer_epoch) < 0 || get_int64(args[3], &base_sequence) < 0) {
        return NULL;
    }
    if (attributes < INT16_MIN || attributes > INT16_MAX || producer_epoch < INT16_MIN ||
        producer_epoch > INT16_MAX || base_sequence < INT32_MIN || base_sequence > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "seal(): a header field is out of its range");
        return NULL;
    }
    Py_ssize_t count = self->count;
    Py_ssize_t size = PyByteArray_GET_SIZE(self);
    if (count <= 0 || count > INT32_MAX || size > INT32_MAX - 49) {
        PyErr_SetString(PyExc_ValueError, "seal(): no records, or more than a batch can hold");
        return NULL;
    }
    PyObject *wire = PyBytes_FromStringAndSize(NULL, 61 + size);
    if (wire == NULL) {
        return NULL;
    }
    char *p = PyBytes_AS_STRING(wire);
    put_be(p, 0, 8);                                /* baseOffset: the broker's to assign */
    put_be(p + 8, (uint64_t)(49 + size), 4);        /* batchLength: from partitionLeaderEpoch on */
    put_be(p + 12, (uint64_t)(int64_t)-1, 4);       /* partitionLeaderEpoch: the broker's to set */
    p[16] = 2;                                      /* magic */
    put_be(p + 21, (uint64_t)attributes, 2);
    put_be(p + 23, (uint64_t)(count - 1), 4);       /* lastOffsetDelta */
    put_be(p + 27, (uint64_t)self->base_timestamp, 8);
    put_be(p + 35, (uint64_t)self->max_timestamp, 8);
    put_be(p + 43, (uint64_t)producer_id, 8);
    put_be(p + 51, (uint64_t)producer_epoch, 2);
    put_be(p + 53, (uint64_t)base_sequence, 4);
    put_be(p + 57, (uint64_t)count, 4);
    if (size > 0) {
        memcpy(p + 61, PyByteArray_AS_STRING(self), size);
    }
    /* the CRC covers attributes to the end; the bytes object is ours alone until returned */
    PyObject *view = PyMemoryView_FromMemory(p + 21, 40 + size, PyBUF_READ);
    if (view == NULL) {
        Py_DECREF(wire);
        return NULL;
    }
    PyObject *crc = PyObject_CallOneArg(args[4], view);
    Py_DECREF(view);
    if (crc == NULL) {
        Py_DECREF(wire);
        return NULL;
    }
    unsigned long long value = PyLong_AsUnsignedLongLong(crc);
    Py_DECREF(crc);
    if (value == (unsigned long long)-1 && PyErr_Occurred()) {
        Py_DECREF(wire);
        return NULL;
    }
    if (value > 0xffffffffULL) {
        Py_DECREF(wire);
        PyErr_SetString(PyExc_ValueError, "seal(): crc32c gave more than 32 bits");
        return NULL;
    }
    put_be(p + 17, (uint64_t)value, 4);
    return wire;
}

static PyMethodDef builder_methods[] = {
    {"add", (PyCFunction)(void (*)(void))builder_add, METH_FASTCALL, builder_add_doc},
    {"add_record", (PyCFunction)(void (*)(void))builder_add_record, METH_FASTCALL, builder_add_record_doc},
    {"add_values", (PyCFunction)(void (*)(void))builder_add_values, METH_FASTCALL, builder_add_values_doc},
    {"add_encoded", (PyCFunction)(void (*)(void))builder_add_encoded, METH_FASTCALL, builder_add_encoded_doc},
    {"seal", (PyCFunction)(void (*)(void))builder_seal, METH_FASTCALL, builder_seal_doc},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef builder_members[] = {
    {"records_count", T_PYSSIZET, offsetof(RecordsBuilder, count), READONLY, "records appended"},
    {"base_timestamp", T_LONGLONG, offsetof(RecordsBuilder, base_timestamp), READONLY,
     "the batch's base timestamp (ms): records store their delta from it"},
    {"max_timestamp", T_LONGLONG, offsetof(RecordsBuilder, max_timestamp), READONLY,
     "the latest timestamp among the records (the base timestamp while there are none)"},
    {"reserved", T_PYSSIZET, offsetof(RecordsBuilder, reserved), READONLY, "the sum of add()'s reserved"},
    {"result", T_OBJECT, offsetof(RecordsBuilder, result), READONLY, "add()'s first argument to make_future"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject RecordsBuilderType;

/* RecordsBuilder(base_timestamp, result=None, make_future=None) without the argument parser
 * and the argument tuple of a type's generic call (PyArg_ParseTupleAndKeywords alone was ~700
 * instructions, and the C send path makes a builder per batch: per record at batch_size=1).
 * An int base timestamp and positional arguments only; any other call (keywords, another
 * type, a subclass, an int out of range) goes the generic way, with its own errors. */
static PyObject *
builder_vectorcall(PyObject *type, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (type == (PyObject *)&RecordsBuilderType && kwnames == NULL && nargs >= 1 && nargs <= 3
            && PyLong_CheckExact(args[0])) {
        int overflow;
        long long base_timestamp = PyLong_AsLongLongAndOverflow(args[0], &overflow);
        if (!overflow && !(base_timestamp == -1 && PyErr_Occurred())) {
            RecordsBuilder *self = (RecordsBuilder *)RecordsBuilderType.tp_alloc(&RecordsBuilderType, 0);
            if (self == NULL) {
                return NULL;
            }
            self->result = Py_NewRef(nargs > 1 ? args[1] : Py_None);
            self->make_future = Py_NewRef(nargs > 2 ? args[2] : Py_None);
            self->base_timestamp = base_timestamp;
            self->max_timestamp = base_timestamp;
            return (PyObject *)self;
        }
        PyErr_Clear();
    }
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    PyObject *tuple = PyTuple_New(nargs), *kwargs = NULL, *made = NULL;
    if (tuple == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) {
        PyTuple_SET_ITEM(tuple, i, Py_NewRef(args[i]));
    }
    if (nkw) {
        if ((kwargs = PyDict_New()) == NULL) {
            goto done;
        }
        for (Py_ssize_t i = 0; i < nkw; i++) {
            if (PyDict_SetItem(kwargs, PyTuple_GET_ITEM(kwnames, i), args[nargs + i]) < 0) {
                goto done;
            }
        }
    }
    made = PyType_Type.tp_call(type, tuple, kwargs);
done:
    Py_DECREF(tuple);
    Py_XDECREF(kwargs);
    return made;
}

static PyTypeObject RecordsBuilderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pulllog.records._crecords.RecordsBuilder",
    .tp_basicsize = sizeof(RecordsBuilder),
    .tp_dealloc = (destructor)builder_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "RecordsBuilder(base_timestamp): a batch's records section (a bytearray) and its counters.",
    .tp_methods = builder_methods,
    .tp_members = builder_members,
    .tp_init = (initproc)builder_init,
    .tp_vectorcall = builder_vectorcall,
};

/* ----------------------------------------------------------------------------- SlotsMaker
 *
 * SlotsMaker(template, names)(*values): a new instance of type(template), a class whose
 * fields are all __slots__, with every slot copied from ``template`` and then the slots
 * ``names`` set to ``values``: what ``type(template)(*values)`` makes when its __init__ sets
 * ``names`` from its arguments and every other slot to a constant, without running that
 * __init__ (a Python frame and a store per slot). The producer makes one RecordFuture per
 * send() this way (pulllog.client.accumulator); a test checks it makes what __init__ makes.
 * Slots are found through the type's member descriptors (object fields), as decode_records
 * finds a record's; a class with a __dict__, or a name that is not such a slot, is a
 * TypeError when the maker is made.
 */

#define MAX_SET 8

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *template;
    PyTypeObject *type;
    Py_ssize_t nslots;       /* every object slot of the type, in its layout */
    Py_ssize_t *offsets;
    Py_ssize_t nset;
    Py_ssize_t set_offsets[MAX_SET];
} SlotsMaker;

static void
maker_dealloc(SlotsMaker *self)
{
    Py_XDECREF(self->template);
    Py_XDECREF(self->type);
    PyMem_Free(self->offsets);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The offset of an object slot named ``name`` in ``type`` (a writable member descriptor). */
static Py_ssize_t
slot_offset(PyTypeObject *type, PyObject *name)
{
    PyObject *descr = PyObject_GetAttr((PyObject *)type, name);
    if (descr == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError)) {
            return -1;
        }
        PyErr_Clear();
    }
    Py_ssize_t offset = -1;
    if (descr != NULL && Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
        PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
        if (member->type == T_OBJECT_EX && !(member->flags & READONLY) && member->offset > 0 &&
            (size_t)member->offset + sizeof(PyObject *) <= (size_t)type->tp_basicsize) {
            offset = member->offset;
        }
    }
    Py_XDECREF(descr);
    if (offset < 0) {
        PyErr_Format(PyExc_TypeError, "%.200s.%U is not a slot", type->tp_name, name);
    }
    return offset;
}

static PyObject *maker_call(SlotsMaker *self, PyObject *const *args, size_t nargsf, PyObject *kwnames);

static PyObject *
maker_new(PyTypeObject *subtype, PyObject *args, PyObject *kwargs)
{
    PyObject *template, *names;
    static char *kwlist[] = {"template", "names", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO!:SlotsMaker", kwlist, &template, &PyTuple_Type, &names)) {
        return NULL;
    }
    PyTypeObject *type = Py_TYPE(template);
    if (type->tp_dictoffset != 0 || !(type->tp_flags & Py_TPFLAGS_HEAPTYPE) || type->tp_itemsize != 0) {
        PyErr_Format(PyExc_TypeError, "SlotsMaker needs an instance of a class with __slots__ only, not %.200s",
                     type->tp_name);
        return NULL;
    }
    if (PyTuple_GET_SIZE(names) > MAX_SET) {
        PyErr_Format(PyExc_TypeError, "SlotsMaker sets at most %d slots", MAX_SET);
        return NULL;
    }
    SlotsMaker *self = (SlotsMaker *)subtype->tp_alloc(subtype, 0);
    if (self == NULL) {
        return NULL;
    }
    self->nset = PyTuple_GET_SIZE(names);
    for (Py_ssize_t i = 0; i < self->nset; i++) {
        if ((self->set_offsets[i] = slot_offset(type, PyTuple_GET_ITEM(names, i))) < 0) {
            Py_DECREF(self);
            return NULL;
        }
    }
    /* every object slot: the type and its bases' member descriptors of object fields */
    Py_ssize_t capacity = 16;
    self->offsets = PyMem_Malloc(capacity * sizeof(Py_ssize_t));
    if (self->offsets == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    for (PyTypeObject *t = type; t != NULL && t != &PyBaseObject_Type; t = t->tp_base) {
        if (!(t->tp_flags & Py_TPFLAGS_HEAPTYPE)) {
            Py_DECREF(self);
            PyErr_Format(PyExc_TypeError, "SlotsMaker cannot copy the fields of %.200s", t->tp_name);
            return NULL;
        }
        PyMemberDef *members = t->tp_members;  /* a class's __slots__ (PyType_Ready points it there) */
        for (Py_ssize_t i = 0; members != NULL && members[i].name != NULL; i++) {
            if (members[i].type != T_OBJECT_EX) {
                continue;
            }
            int seen = 0;
            for (Py_ssize_t j = 0; j < self->nslots; j++) {
                seen |= self->offsets[j] == members[i].offset;
            }
            if (seen) {
                continue;
            }
            if (self->nslots == capacity) {
                capacity *= 2;
                Py_ssize_t *more = PyMem_Realloc(self->offsets, capacity * sizeof(Py_ssize_t));
                if (more == NULL) {
                    Py_DECREF(self);
                    return PyErr_NoMemory();
                }
                self->offsets = more;
            }
            self->offsets[self->nslots++] = members[i].offset;
        }
    }
    Py_INCREF(template);
    self->template = template;
    Py_INCREF(type);
    self->type = type;
    self->vectorcall = (vectorcallfunc)maker_call;
    return (PyObject *)self;
}

static PyObject *
maker_call(SlotsMaker *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != self->nset || (kwnames != NULL && PyTuple_GET_SIZE(kwnames))) {
        PyErr_Format(PyExc_TypeError, "this SlotsMaker takes %zd positional arguments (%zd given)", self->nset, nargs);
        return NULL;
    }
    PyObject *obj = self->type->tp_alloc(self->type, 0);
    if (obj == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < self->nslots; i++) {
        PyObject *value = *(PyObject **)((char *)self->template + self->offsets[i]);
        Py_XINCREF(value);
        *(PyObject **)((char *)obj + self->offsets[i]) = value;
    }
    for (Py_ssize_t i = 0; i < self->nset; i++) {
        PyObject **slot = (PyObject **)((char *)obj + self->set_offsets[i]);
        PyObject *old = *slot;
        Py_INCREF(args[i]);
        *slot = args[i];
        Py_XDECREF(old);
    }
    return obj;
}

static PyObject *
maker_tp_call(SlotsMaker *self, PyObject *args, PyObject *kwargs)
{
    if (kwargs != NULL && PyDict_GET_SIZE(kwargs)) {
        PyErr_SetString(PyExc_TypeError, "a SlotsMaker takes positional arguments only");
        return NULL;
    }
    return maker_call(self, &PyTuple_GET_ITEM(args, 0), PyTuple_GET_SIZE(args), NULL);
}

static PyTypeObject SlotsMakerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pulllog.records._crecords.SlotsMaker",
    .tp_basicsize = sizeof(SlotsMaker),
    .tp_dealloc = (destructor)maker_dealloc,
    .tp_call = (ternaryfunc)maker_tp_call,
    .tp_vectorcall_offset = offsetof(SlotsMaker, vectorcall),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "SlotsMaker(template, names)(*values): a copy of template with the slots names set to values.",
    .tp_new = maker_new,
};

/* ----------------------------------------------------------------------------- Ready
 *
 * Ready(value): an awaitable whose await gives ``value`` at once, what ``async def f():
 * return value`` gives, without the coroutine, its frame and the StopIteration that
 * ``await`` on a coroutine costs. The producer's send() returns one on its common path (the
 * record is already appended when send() returns). ``await`` reaches am_send (PyIter_Send),
 * which returns the value directly; a tracing interpreter (coverage, debuggers) goes through
 * tp_iternext, which raises StopIteration(value) as a coroutine's return would. It may be
 * awaited again (the same value), as a done future may. Not tracked by the cycle collector:
 * hold only values that do not refer back to it.
 */

typedef struct {
    PyObject_HEAD
    PyObject *value;
} Ready;

static void
ready_dealloc(Ready *self)
{
    Py_XDECREF(self->value);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
ready_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *value;
    if (kwargs != NULL && PyDict_GET_SIZE(kwargs)) {
        PyErr_SetString(PyExc_TypeError, "Ready takes one positional argument");
        return NULL;
    }
    if (!PyArg_UnpackTuple(args, "Ready", 1, 1, &value)) {
        return NULL;
    }
    Ready *self = (Ready *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    Py_INCREF(value);
    self->value = value;
    return (PyObject *)self;
}

static PyObject *
ready_vectorcall(PyObject *type, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    if (PyVectorcall_NARGS(nargsf) != 1 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError, "Ready takes one positional argument");
        return NULL;
    }
    Ready *self = (Ready *)((PyTypeObject *)type)->tp_alloc((PyTypeObject *)type, 0);
    if (self == NULL) {
        return NULL;
    }
    Py_INCREF(args[0]);
    self->value = args[0];
    return (PyObject *)self;
}

static PyObject *
ready_await(Ready *self)
{
    Py_INCREF(self);
    return (PyObject *)self;
}

static PySendResult
ready_send(Ready *self, PyObject *arg, PyObject **result)
{
    Py_INCREF(self->value);
    *result = self->value;
    return PYGEN_RETURN;
}

static PyObject *
ready_iternext(Ready *self)
{
    /* StopIteration(value) as an instance: a tuple value must not become its arguments */
    PyObject *stop = PyObject_CallOneArg(PyExc_StopIteration, self->value);
    if (stop != NULL) {
        PyErr_SetObject(PyExc_StopIteration, stop);
        Py_DECREF(stop);
    }
    return NULL;
}

/* send / throw / close: what a coroutine has, so asyncio.create_task() and
 * asyncio.iscoroutine() take a Ready as they take the coroutine ``async def send()`` was
 * (collections.abc.Coroutine recognises the four methods). */
static PyObject *
ready_send_method(Ready *self, PyObject *arg)
{
    return ready_iternext(self);
}

static PyObject *
ready_throw(Ready *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1 || nargs > 3) {
        PyErr_SetString(PyExc_TypeError, "throw expected 1 to 3 arguments");
        return NULL;
    }
    PyObject *typ = args[0];
    PyObject *val = nargs > 1 ? args[1] : Py_None;
    if (PyExceptionInstance_Check(typ)) {
        PyErr_SetObject((PyObject *)Py_TYPE(typ), typ);
    } else if (PyExceptionClass_Check(typ)) {
        PyErr_SetObject(typ, val);
    } else {
        PyErr_SetString(PyExc_TypeError, "exceptions must derive from BaseException");
    }
    return NULL;
}

static PyObject *
ready_close(Ready *self, PyObject *Py_UNUSED(ignored))
{
    Py_RETURN_NONE;
}

static PyMethodDef ready_methods[] = {
    {"send", (PyCFunction)ready_send_method, METH_O, "send(value): raises StopIteration(the value), as a finished coroutine's return"},
    {"throw", (PyCFunction)(void (*)(void))ready_throw, METH_FASTCALL, "throw(exc): raises exc, as a coroutine that has not started"},
    {"close", (PyCFunction)ready_close, METH_NOARGS, "close(): nothing to release"},
    {NULL, NULL, 0, NULL},
};

static PyAsyncMethods ready_async = {
    .am_await = (unaryfunc)ready_await,
    .am_send = (sendfunc)ready_send,
};

static PyTypeObject ReadyType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pulllog.records._crecords.Ready",
    .tp_basicsize = sizeof(Ready),
    .tp_dealloc = (destructor)ready_dealloc,
    .tp_as_async = &ready_async,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)ready_iternext,
    .tp_methods = ready_methods,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Ready(value): an awaitable that gives value at once (await Ready(v) is v).",
    .tp_new = ready_new,
    .tp_vectorcall = ready_vectorcall,
};

/* ----------------------------------------------------------------------------- SendPath
 *
 * SendPath(fallback, pool, close, queue_type, batch_type, batch_size, room, max_record_size,
 * plain_size): the producer's per-record send() in C for its common case, installed as the
 * producer's ``send`` attribute (pulllog.client.producer). Called as send(topic, value,
 * key=None, headers=None, partition=None, timestamp=None), it either appends the record
 * itself and returns a Ready of the record's future, or calls ``fallback`` (the Python
 * send(), which handles every case) with the very same arguments, having changed nothing.
 *
 * It appends only to the one partition it is armed for (``arm(queue, topic, partition,
 * sticky)``: the Python send() arms it after it appended a record there; ``disarm()``: the
 * producer disarms it whenever that could have become wrong, e.g. at every batch close), and
 * only when all of these hold; otherwise it falls back:
 *
 * - topic is the armed topic; partition is the armed one, or None with ``sticky`` (the
 *   sticky partitioner chose the armed partition, and it only moves when a batch closes);
 * - no headers; the key is None, or bytes with an explicit partition; the value None or
 *   bytes; the timestamp None (now, CLOCK_REALTIME in ms) or an int within int64;
 * - the queue's open batch (slot ``open`` of queue_type) has a C RecordsBuilder (slot
 *   ``records`` of batch_type) holding records, and the record fits its ``room`` as
 *   RecordsBuilder.add() decides;
 * - the record's buffer_memory size (value + key + plain_size) is at most max_record_size
 *   and at most the pool's ``available`` slot (an int), with its ``waiters`` slot empty.
 *
 * Then it does what the Python send() does there: the record encoded (RecordsBuilder.add:
 * counted, its size held, its future made), ``pool.available`` lowered by the size, and
 * ``close(queue)`` once the records reach ``batch_size``.
 *
 * Opening a batch (``opening(...)`` given, the path armed for an explicit partition, not
 * sticky, and the queue without an open batch: a batch_size=1 producer's every record) is
 * C as well: what the accumulator's append() and the producer's yield rule do for a record
 * that opens a batch. The batch and its result are made by the accumulator's makers
 * (``make_result(topic, partition)``, ``make_batch(topic, partition, builder, result, ts, ts,
 * monotonic now)``, the builder by ``make_builder(ts, result, make_future)``), the record put
 * in, and only then, nothing having failed and the pool checked again, is anything changed:
 * the pool charged, the batch added to ``incomplete`` and either closed at once (a record
 * that reaches batch_size: ``order`` = the queue's ``closed``, which counts up, the batch
 * appended to its ``ready``, and ``batch_closed(topic, partition)`` called unless
 * ``sticky_map`` says the built-in sticky partitioner does not stick to this partition) or
 * left as the queue's ``open`` batch. Then, as the Python path: the partition is busy when
 * ``in_flight[queue.key]`` holds ``limit`` batches; if not, ``wake()``; the record is
 * returned as ``Ready(future)`` unless the yield rule says to yield (not busy, or every
 * ``yield_every``-th busy batch, counted in the ``count`` slot of ``yields``, which the
 * Python path shares), and then as ``yield_later(future)``.
 */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *fallback;
    PyObject *pool;
    PyObject *close;
    PyObject *queue;            /* armed: the partition's queue; NULL when disarmed */
    PyObject *topic;
    PyObject *queue_type;       /* the slot offsets below are these types' (checked before use) */
    PyObject *batch_type;
    long long partition;
    int sticky;
    Py_ssize_t batch_size, room, max_record_size, plain_size;
    Py_ssize_t off_open, off_records, off_available, off_waiters;
    /* opening(): NULL make_batch when not given */
    PyObject *make_result, *make_batch, *make_builder, *make_future, *incomplete, *in_flight, *wake;
    PyObject *batch_closed, *sticky_map, *yields, *yield_later;
    Py_ssize_t limit, yield_every;
    Py_ssize_t off_qtopic, off_qpartition, off_qkey, off_qclosed, off_qready, off_order, off_count;
} SendPath;

static PyObject *sendpath_names[6];  /* "topic", "value", "key", "headers", "partition", "timestamp" */

static int
sendpath_traverse(SendPath *self, visitproc visit, void *arg)
{
    Py_VISIT(self->fallback);
    Py_VISIT(self->pool);
    Py_VISIT(self->close);
    Py_VISIT(self->queue);
    Py_VISIT(self->topic);
    Py_VISIT(self->queue_type);
    Py_VISIT(self->batch_type);
    Py_VISIT(self->make_result);
    Py_VISIT(self->make_batch);
    Py_VISIT(self->make_builder);
    Py_VISIT(self->make_future);
    Py_VISIT(self->incomplete);
    Py_VISIT(self->in_flight);
    Py_VISIT(self->wake);
    Py_VISIT(self->batch_closed);
    Py_VISIT(self->sticky_map);
    Py_VISIT(self->yields);
    Py_VISIT(self->yield_later);
    return 0;
}

static int
sendpath_clear(SendPath *self)
{
    Py_CLEAR(self->fallback);
    Py_CLEAR(self->pool);
    Py_CLEAR(self->close);
    Py_CLEAR(self->queue);
    Py_CLEAR(self->topic);
    Py_CLEAR(self->queue_type);
    Py_CLEAR(self->batch_type);
    Py_CLEAR(self->make_result);
    Py_CLEAR(self->make_batch);
    Py_CLEAR(self->make_builder);
    Py_CLEAR(self->make_future);
    Py_CLEAR(self->incomplete);
    Py_CLEAR(self->in_flight);
    Py_CLEAR(self->wake);
    Py_CLEAR(self->batch_closed);
    Py_CLEAR(self->sticky_map);
    Py_CLEAR(self->yields);
    Py_CLEAR(self->yield_later);
    return 0;
}

static void
sendpath_dealloc(SendPath *self)
{
    PyObject_GC_UnTrack(self);
    sendpath_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *sendpath_call(SendPath *self, PyObject *const *args, size_t nargsf, PyObject *kwnames);

static PyObject *
sendpath_new(PyTypeObject *subtype, PyObject *args, PyObject *kwargs)
{
    PyObject *fallback, *pool, *close;
    PyTypeObject *queue_type, *batch_type;
    Py_ssize_t batch_size, room, max_record_size, plain_size;
    static char *kwlist[] = {"fallback", "pool", "close", "queue_type", "batch_type", "batch_size", "room",
                             "max_record_size", "plain_size", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOO!O!nnnn:SendPath", kwlist, &fallback, &pool, &close,
                                     &PyType_Type, &queue_type, &PyType_Type, &batch_type, &batch_size, &room,
                                     &max_record_size, &plain_size)) {
        return NULL;
    }
    if (!PyCallable_Check(fallback) || !PyCallable_Check(close)) {
        PyErr_SetString(PyExc_TypeError, "SendPath: fallback and close must be callable");
        return NULL;
    }
    PyObject *name;
    Py_ssize_t off_open, off_records, off_available, off_waiters;
    if ((name = PyUnicode_InternFromString("open")) == NULL) {
        return NULL;
    }
    off_open = slot_offset(queue_type, name);
    Py_DECREF(name);
    if (off_open < 0 || (name = PyUnicode_InternFromString("records")) == NULL) {
        return NULL;
    }
    off_records = slot_offset(batch_type, name);
    Py_DECREF(name);
    if (off_records < 0 || (name = PyUnicode_InternFromString("available")) == NULL) {
        return NULL;
    }
    off_available = slot_offset(Py_TYPE(pool), name);
    Py_DECREF(name);
    if (off_available < 0 || (name = PyUnicode_InternFromString("waiters")) == NULL) {
        return NULL;
    }
    off_waiters = slot_offset(Py_TYPE(pool), name);
    Py_DECREF(name);
    if (off_waiters < 0) {
        return NULL;
    }
    SendPath *self = (SendPath *)subtype->tp_alloc(subtype, 0);
    if (self == NULL) {
        return NULL;
    }
    Py_INCREF(fallback);
    self->fallback = fallback;
    Py_INCREF(pool);
    self->pool = pool;
    Py_INCREF(close);
    self->close = close;
    self->queue_type = Py_NewRef((PyObject *)queue_type);
    self->batch_type = Py_NewRef((PyObject *)batch_type);
    self->batch_size = batch_size;
    self->room = room;
    self->max_record_size = max_record_size;
    self->plain_size = plain_size;
    self->off_open = off_open;
    self->off_records = off_records;
    self->off_available = off_available;
    self->off_waiters = off_waiters;
    self->vectorcall = (vectorcallfunc)sendpath_call;
    return (PyObject *)self;
}

static inline PyObject *
slot_at(PyObject *obj, Py_ssize_t offset)
{
    return *(PyObject **)((char *)obj + offset);
}

/* args[] (positional, then the keyword values named by kwnames) into send()'s six
 * parameters; 0 when they do not map one to one (the Python send() then raises what is wrong). */
static int
sendpath_parse(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, PyObject **a)
{
    if (nargs > 6) {
        return 0;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) {
        a[i] = args[i];
    }
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t j = 0; j < nkw; j++) {
        PyObject *kw = PyTuple_GET_ITEM(kwnames, j);
        int found = -1;
        for (int i = 0; i < 6 && found < 0; i++) {
            if (kw == sendpath_names[i]) {
                found = i;
            }
        }
        for (int i = 0; i < 6 && found < 0; i++) {
            if (PyUnicode_Compare(kw, sendpath_names[i]) == 0) {
                found = i;
            }
        }
        if (found < nargs || a[found] != NULL) {  /* unknown, or given twice */
            return 0;
        }
        a[found] = args[nargs + j];
    }
    return a[0] != NULL && a[1] != NULL;
}

/* The pool's free bytes, or -1 when the record may not take them (a waiter, or not an int) */
static Py_ssize_t
sendpath_free_bytes(SendPath *self)
{
    PyObject *available = slot_at(self->pool, self->off_available);
    PyObject *waiters = slot_at(self->pool, self->off_waiters);
    if (available == NULL || !PyLong_CheckExact(available) || waiters == NULL) {
        return -1;
    }
    Py_ssize_t free_bytes = PyLong_AsSsize_t(available);
    Py_ssize_t waiting = PyObject_Length(waiters);
    if (free_bytes == -1 || waiting == -1) {
        PyErr_Clear();
        return -1;
    }
    return waiting > 0 ? -1 : free_bytes;
}

/* Store ``value`` (a new reference, taken) in the object slot at ``offset`` of ``obj``. */
static inline void
slot_set(PyObject *obj, Py_ssize_t offset, PyObject *value)
{
    PyObject **slot = (PyObject **)((char *)obj + offset);
    Py_XSETREF(*slot, value);
}

/* A record that opens a batch of the armed queue (the SendPath comment): the Ready or
 * coroutine send() returns, Py_None (a new reference) when the record is not taken and
 * nothing changed (the caller falls back), NULL on an error after something changed. */
/* The message set a SetPath opens a batch with (sendpath_open's ``set``; NULL for a record). */
typedef struct {
    PyObject *items;        /* a list or tuple of simple items (put_values) */
    Py_ssize_t size;        /* its buffer_memory: values_size + the per-record allowance */
    PyObject *new_future;   /* makes the set's asyncio future */
    Py_ssize_t off_sets;    /* the batch's set_futures slot */
} OpeningSet;

static PyObject *
sendpath_open(SendPath *self, PyObject *key, Py_ssize_t lk, PyObject *value, Py_ssize_t lv, int64_t ts,
              PyObject *timestamp, OpeningSet *set)
{
    Py_ssize_t size = set != NULL ? set->size : (lv > 0 ? lv : 0) + (lk > 0 ? lk : 0) + self->plain_size;
    Py_ssize_t free_bytes = sendpath_free_bytes(self);
    if (size > self->max_record_size || free_bytes < 0 || size > free_bytes) {
        Py_RETURN_NONE;
    }
    PyObject *queue = Py_NewRef(self->queue);  /* held: the calls below may run Python code */
    PyObject *topic = slot_at(queue, self->off_qtopic), *partition = slot_at(queue, self->off_qpartition);
    PyObject *key_obj = slot_at(queue, self->off_qkey);
    PyObject *ts_obj = NULL, *result = NULL, *builder = NULL, *batch = NULL, *created = NULL, *future = NULL;
    PyObject *out = NULL, *zero = NULL;
    struct timespec mono;
    if (topic == NULL || partition == NULL || key_obj == NULL || clock_gettime(CLOCK_MONOTONIC, &mono) != 0) {
        Py_DECREF(queue);
        Py_RETURN_NONE;
    }
    Py_INCREF(topic);
    Py_INCREF(partition);
    Py_INCREF(key_obj);
    ts_obj = timestamp != NULL ? Py_NewRef(timestamp) : PyLong_FromLongLong(ts);
    created = PyFloat_FromDouble((double)mono.tv_sec + mono.tv_nsec * 1e-9);  /* time.monotonic() */
    zero = PyLong_FromLong(0);
    if (ts_obj == NULL || created == NULL || zero == NULL) {
        goto failed;
    }
    PyObject *result_args[2] = {topic, partition};
    if ((result = PyObject_Vectorcall(self->make_result, result_args, 2, NULL)) == NULL) {
        goto failed;
    }
    PyObject *builder_args[3] = {ts_obj, result, self->make_future};
    if ((builder = PyObject_Vectorcall(self->make_builder, builder_args, 3, NULL)) == NULL) {
        goto failed;
    }
    if (!Py_IS_TYPE(builder, &RecordsBuilderType)) {
        PyErr_SetString(PyExc_TypeError, "SendPath: make_builder did not make a C RecordsBuilder");
        goto failed;
    }
    PyObject *batch_args[7] = {topic, partition, builder, result, ts_obj, ts_obj, created};
    if ((batch = PyObject_Vectorcall(self->make_batch, batch_args, 7, NULL)) == NULL) {
        goto failed;
    }
    RecordsBuilder *b = (RecordsBuilder *)builder;
    if (b->count != 0 || b->base_timestamp != ts) {
        PyErr_SetString(PyExc_ValueError, "SendPath: make_builder made a builder that is not empty at ts");
        goto failed;
    }
    if (set == NULL) {
        Py_ssize_t body = record_body_size(0, 0, lk, lv, 1);
        char *p;
        if (builder_grow(b, varint_size(body) + body, &p) < 0) {
            goto failed;
        }
        put_record(p, body, 0, 0, key == NULL ? NULL : PyBytes_AS_STRING(key), lk,
                   lv < 0 ? NULL : PyBytes_AS_STRING(value), lv, "\0", 1);
        b->count = 1;
        PyObject *future_args[3] = {result, zero, ts_obj};
        if ((future = PyObject_Vectorcall(self->make_future, future_args, 3, NULL)) == NULL) {
            goto failed;
        }
    } else {
        /* ProducerBatch.extend's C case and the set's (first, count, timestamp, future) */
        Py_ssize_t n = put_values(builder, set->items, 0, 0, builder_grow_records);
        if (n == -2) {
            goto failed;
        }
        if (n <= 0) {  /* an item that is not simple: the Python path encodes the set */
            out = Py_NewRef(Py_None);
            goto done;
        }
        b->count = n;
        PyObject *count = PyLong_FromSsize_t(n);
        if (count == NULL || (future = PyObject_CallNoArgs(set->new_future)) == NULL) {
            Py_XDECREF(count);
            goto failed;
        }
        PyObject *entry = PyTuple_Pack(4, zero, count, ts_obj, future);
        Py_DECREF(count);
        PyObject *sets = entry == NULL ? NULL : PyList_New(1);
        if (sets == NULL) {
            Py_XDECREF(entry);
            goto failed;
        }
        PyList_SET_ITEM(sets, 0, entry);
        slot_set(batch, set->off_sets, sets);
    }
    b->max_timestamp = ts;
    b->reserved = size;
    /* Nothing changed so far: Python code run meanwhile (the cycle collector's finalizers)
     * may have disarmed the path, opened a batch or taken the memory. Check again. */
    free_bytes = sendpath_free_bytes(self);
    if (self->queue != queue || slot_at(queue, self->off_open) != Py_None || free_bytes < 0 || size > free_bytes) {
        out = Py_NewRef(Py_None);
        goto done;
    }
    PyObject *remaining = PyLong_FromSsize_t(free_bytes - size);
    if (remaining == NULL) {
        goto failed;
    }
    if (PySet_Add(self->incomplete, batch) < 0) {
        Py_DECREF(remaining);
        goto failed;
    }
    slot_set(self->pool, self->off_available, remaining);  /* charged: from here on, the record is taken */
    int busy = 0;
    PyObject *flying = PyDict_GetItemWithError(self->in_flight, key_obj);  /* borrowed */
    if (flying != NULL) {
        Py_ssize_t n = PyObject_Length(flying);
        if (n < 0) {
            goto error;
        }
        busy = n >= self->limit;
    } else if (PyErr_Occurred()) {
        goto error;
    }
    if (PyByteArray_GET_SIZE(builder) >= self->batch_size) {
        /* RecordAccumulator._close: its order, into the queue's ready batches, the partitioner told */
        PyObject *closed = slot_at(queue, self->off_qclosed);
        PyObject *ready = slot_at(queue, self->off_qready);
        if (closed == NULL || ready == NULL) {
            PyErr_SetString(PyExc_AttributeError, "SendPath: the queue has no closed or ready");
            goto error;
        }
        Py_ssize_t order = PyLong_AsSsize_t(closed);
        if (order == -1 && PyErr_Occurred()) {
            goto error;
        }
        PyObject *next = PyLong_FromSsize_t(order + 1);
        if (next == NULL) {
            goto error;
        }
        slot_set(batch, self->off_order, Py_NewRef(closed));
        slot_set(queue, self->off_qclosed, next);
        PyObject *appended = PyObject_CallMethod(ready, "append", "O", batch);
        if (appended == NULL) {
            goto error;
        }
        Py_DECREF(appended);
        int tell = 1;
        if (self->sticky_map != Py_None) {
            PyObject *stuck = PyDict_GetItemWithError(self->sticky_map, topic);  /* borrowed */
            if (stuck == NULL && PyErr_Occurred()) {
                goto error;
            }
            tell = stuck == NULL ? 0 : PyObject_RichCompareBool(stuck, partition, Py_EQ);
            if (tell < 0) {
                goto error;
            }
        }
        if (tell) {
            PyObject *told_args[2] = {topic, partition};
            PyObject *told = PyObject_Vectorcall(self->batch_closed, told_args, 2, NULL);
            if (told == NULL) {
                goto error;
            }
            Py_DECREF(told);
        }
    } else {
        slot_set(queue, self->off_open, Py_NewRef(batch));
    }
    if (!busy) {
        PyObject *woken = PyObject_CallNoArgs(self->wake);
        if (woken == NULL) {
            goto error;
        }
        Py_DECREF(woken);
    }
    /* Producer._yield_after_new_batch */
    PyObject *count = slot_at(self->yields, self->off_count);
    Py_ssize_t n = 0;
    if (busy) {
        n = count == NULL ? -1 : PyLong_AsSsize_t(count);
        if (n < 0) {
            if (!PyErr_Occurred()) {
                PyErr_SetString(PyExc_TypeError, "SendPath: the yield count is not an int");
            }
            goto error;
        }
        n += 1;
        if (n >= self->yield_every) {
            n = 0;
        }
    }
    PyObject *n_obj = PyLong_FromSsize_t(n);
    if (n_obj == NULL) {
        goto error;
    }
    slot_set(self->yields, self->off_count, n_obj);
    if (n > 0) {
        Ready *ready = (Ready *)ReadyType.tp_alloc(&ReadyType, 0);
        if (ready != NULL) {
            ready->value = Py_NewRef(future);
        }
        out = (PyObject *)ready;
    } else {
        out = PyObject_CallOneArg(self->yield_later, future);
    }
    goto done;
failed:
    /* nothing changed: the record is not taken, but the error (memory) is the caller's */
    out = NULL;
    goto done;
error:
    out = NULL;
done:
    Py_XDECREF(future);
    Py_XDECREF(batch);
    Py_XDECREF(builder);
    Py_XDECREF(result);
    Py_XDECREF(created);
    Py_XDECREF(zero);
    Py_XDECREF(ts_obj);
    Py_DECREF(topic);
    Py_DECREF(partition);
    Py_DECREF(key_obj);
    Py_DECREF(queue);
    return out;
}

/* Is ``topic`` the topic a path is armed for (the same object, or an equal str)? Anything
 * else goes to the Python path. */
static inline int
armed_topic(PyObject *topic, PyObject *armed)
{
    return topic == armed || (PyUnicode_CheckExact(topic) && PyUnicode_Compare(topic, armed) == 0);
}

/* A record's timestamp in ms into *ts: the given int, or the wall clock's now when
 * *timestamp is NULL or None (then *timestamp is set to NULL: the batch stamps it as
 * CreateTime). 0, or -1 with no exception set: leave the record to the Python path. */
static int
record_timestamp(PyObject **timestamp, int64_t *ts)
{
    if (*timestamp == NULL || *timestamp == Py_None) {
        struct timespec now;
        if (clock_gettime(CLOCK_REALTIME, &now) != 0) {
            return -1;
        }
        *ts = (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
        *timestamp = NULL;
        return 0;
    }
    if (!PyLong_CheckExact(*timestamp) || get_int64(*timestamp, ts) < 0) {
        PyErr_Clear();
        return -1;
    }
    return 0;
}

static PyObject *
sendpath_call(SendPath *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *a[6] = {NULL, NULL, NULL, NULL, NULL, NULL};
    if (self->queue == NULL || !sendpath_parse(args, nargs, kwnames, a)) {
        goto fallback;
    }
    PyObject *topic = a[0], *value = a[1], *key = a[2], *partition = a[4], *timestamp = a[5];
    if ((a[3] != NULL && a[3] != Py_None) || (value != Py_None && !PyBytes_CheckExact(value))) {
        goto fallback;
    }
    if (!armed_topic(topic, self->topic)) {
        goto fallback;
    }
    if (key == Py_None) {
        key = NULL;
    } else if (key != NULL && (!PyBytes_CheckExact(key) || partition == NULL || partition == Py_None)) {
        goto fallback;  /* a key that is not bytes, or one the partitioner hashes */
    }
    if (partition == NULL || partition == Py_None) {
        if (!self->sticky) {
            goto fallback;
        }
    } else {
        int overflow;
        if (!PyLong_CheckExact(partition) ||
            PyLong_AsLongLongAndOverflow(partition, &overflow) != self->partition || overflow) {
            goto fallback;
        }
    }
    int64_t ts;
    if (record_timestamp(&timestamp, &ts) < 0) {
        goto fallback;
    }
    PyObject *batch = slot_at(self->queue, self->off_open);
    if (batch == Py_None && self->make_batch != NULL && !self->sticky) {
        /* no open batch: this record opens one (sendpath_open checks the pool) */
        Py_ssize_t lv = value == Py_None ? -1 : PyBytes_GET_SIZE(value);
        Py_ssize_t lk = key == NULL ? -1 : PyBytes_GET_SIZE(key);
        PyObject *opened = sendpath_open(self, key, lk, value, lv, ts, timestamp, NULL);
        if (opened == Py_None) {  /* not taken, nothing changed */
            Py_DECREF(opened);
            goto fallback;
        }
        return opened;
    }
    if (batch == NULL || !PyObject_TypeCheck(batch, (PyTypeObject *)self->batch_type)) {
        goto fallback;  /* None (no open batch), or not what the slot offset was taken from */
    }
    RecordsBuilder *builder = (RecordsBuilder *)slot_at(batch, self->off_records);
    if (builder == NULL || !Py_IS_TYPE(builder, &RecordsBuilderType) || builder->count <= 0 ||
        builder->make_future == Py_None) {
        goto fallback;
    }
    Py_ssize_t lv = value == Py_None ? -1 : PyBytes_GET_SIZE(value);
    Py_ssize_t lk = key == NULL ? -1 : PyBytes_GET_SIZE(key);
    Py_ssize_t size = (lv > 0 ? lv : 0) + (lk > 0 ? lk : 0) + self->plain_size;
    PyObject *available = slot_at(self->pool, self->off_available);
    PyObject *waiters = slot_at(self->pool, self->off_waiters);
    if (size > self->max_record_size || available == NULL || !PyLong_CheckExact(available) || waiters == NULL) {
        goto fallback;
    }
    Py_ssize_t free_bytes = PyLong_AsSsize_t(available);
    Py_ssize_t waiting = PyObject_Length(waiters);
    if (free_bytes == -1 || waiting == -1) {
        PyErr_Clear();
        goto fallback;
    }
    Py_ssize_t used = PyByteArray_GET_SIZE(builder);
    long long td;
    if (size > free_bytes || waiting > 0 || used + size > self->room ||
        __builtin_sub_overflow((long long)ts, builder->base_timestamp, &td)) {
        goto fallback;
    }
    /* from here on the record is taken: what RecordsBuilder.add() and the Python send() do.
     * The queue and the builder are held: making the future may run the cycle collector, and
     * with it Python code (finalizers) that could disarm this path or drop the batch. */
    /* made first: once the record is in the builder nothing may fail before the pool is charged */
    PyObject *remaining = PyLong_FromSsize_t(free_bytes - size);
    if (remaining == NULL) {
        return NULL;
    }
    PyObject *queue = Py_NewRef(self->queue);
    Py_INCREF(builder);
    PyObject *future = NULL;
    Py_ssize_t od = builder->count;
    Py_ssize_t body = record_body_size(td, od, lk, lv, 1);
    char *p;
    if (builder_grow(builder, varint_size(body) + body, &p) < 0) {
        Py_DECREF(remaining);
        goto done;
    }
    put_record(p, body, td, od, key == NULL ? NULL : PyBytes_AS_STRING(key), lk,
               lv < 0 ? NULL : PyBytes_AS_STRING(value), lv, "\0", 1);
    builder->count = od + 1;
    if (ts > builder->max_timestamp) {
        builder->max_timestamp = ts;
    }
    builder->reserved += size;
    PyObject **slot = (PyObject **)((char *)self->pool + self->off_available);
    Py_SETREF(*slot, remaining);
    PyObject *delta = PyLong_FromSsize_t(od);
    PyObject *ts_obj = timestamp != NULL ? Py_NewRef(timestamp) : PyLong_FromLongLong(ts);
    if (delta == NULL || ts_obj == NULL) {
        Py_XDECREF(delta);
        Py_XDECREF(ts_obj);
        goto done;
    }
    PyObject *call[3] = {builder->result, delta, ts_obj};
    future = PyObject_Vectorcall(builder->make_future, call, 3, NULL);
    Py_DECREF(delta);
    Py_DECREF(ts_obj);
    if (future == NULL) {
        goto done;
    }
    if (PyByteArray_GET_SIZE(builder) >= self->batch_size) {
        PyObject *closed = PyObject_CallOneArg(self->close, queue);
        if (closed == NULL) {
            Py_CLEAR(future);
            goto done;
        }
        Py_DECREF(closed);
    }
    Ready *ready = (Ready *)ReadyType.tp_alloc(&ReadyType, 0);
    if (ready != NULL) {
        ready->value = future;  /* the Ready takes the reference */
    } else {
        Py_DECREF(future);
    }
    future = (PyObject *)ready;
done:
    Py_DECREF(builder);
    Py_DECREF(queue);
    return future;
fallback:
    return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
}

static PyObject *
sendpath_tp_call(SendPath *self, PyObject *args, PyObject *kwargs)
{
    return PyVectorcall_Call((PyObject *)self, args, kwargs);
}

PyDoc_STRVAR(sendpath_arm_doc,
"arm(queue, topic, partition, sticky)\n"
"\n"
"Append records for ``topic``-``partition`` to ``queue``'s open batch from now on; with\n"
"``sticky``, records with partition=None and no key too.");

static PyObject *
sendpath_arm(SendPath *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError, "arm() takes 4 arguments (%zd given)", nargs);
        return NULL;
    }
    if (!PyUnicode_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "arm(): the topic must be a str");
        return NULL;
    }
    int overflow;
    long long partition = PyLong_AsLongLongAndOverflow(args[2], &overflow);
    if ((partition == -1 && PyErr_Occurred()) || overflow) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_OverflowError, "arm(): partition out of range");
        }
        return NULL;
    }
    if (!PyObject_TypeCheck(args[0], (PyTypeObject *)self->queue_type)) {
        PyErr_Format(PyExc_TypeError, "arm(): the queue must be a %s", ((PyTypeObject *)self->queue_type)->tp_name);
        return NULL;
    }
    int sticky = PyObject_IsTrue(args[3]);
    if (sticky < 0) {
        return NULL;
    }
    Py_XSETREF(self->queue, Py_NewRef(args[0]));
    Py_XSETREF(self->topic, Py_NewRef(args[1]));
    self->partition = partition;
    self->sticky = sticky;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(sendpath_opening_doc,
"opening(make_result, make_batch, make_builder, make_future, incomplete, in_flight, limit, wake,\n"
"        batch_closed, sticky_map, yields, yield_every, yield_later)\n"
"\n"
"Let the path open batches too (the SendPath comment in _crecords.c says what each is for).");

static PyObject *
sendpath_opening(SendPath *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 13) {
        PyErr_Format(PyExc_TypeError, "opening() takes 13 arguments (%zd given)", nargs);
        return NULL;
    }
    if (!PyCallable_Check(args[0]) || !PyCallable_Check(args[1]) || !PyCallable_Check(args[2]) ||
        !PyCallable_Check(args[3]) || !PyCallable_Check(args[7]) || !PyCallable_Check(args[8]) ||
        !PyCallable_Check(args[12])) {
        PyErr_SetString(PyExc_TypeError, "opening(): the makers, wake, batch_closed and yield_later must be callable");
        return NULL;
    }
    if (!PySet_CheckExact(args[4]) || !PyDict_CheckExact(args[5]) || (args[9] != Py_None && !PyDict_CheckExact(args[9]))) {
        PyErr_SetString(PyExc_TypeError, "opening(): incomplete must be a set, in_flight a dict, sticky_map a dict or None");
        return NULL;
    }
    Py_ssize_t limit = PyLong_AsSsize_t(args[6]), yield_every = PyLong_AsSsize_t(args[11]);
    if ((limit == -1 || yield_every == -1) && PyErr_Occurred()) {
        return NULL;
    }
    if (limit < 1 || yield_every < 1) {
        PyErr_SetString(PyExc_ValueError, "opening(): limit and yield_every must be at least 1");
        return NULL;
    }
    static const char *const queue_names[5] = {"topic", "partition", "key", "closed", "ready"};
    Py_ssize_t offsets[7];
    for (int i = 0; i < 7; i++) {
        PyTypeObject *type = i < 5 ? (PyTypeObject *)self->queue_type : i == 5 ? (PyTypeObject *)self->batch_type
                             : Py_TYPE(args[10]);
        PyObject *name = PyUnicode_InternFromString(i < 5 ? queue_names[i] : i == 5 ? "order" : "count");
        if (name == NULL) {
            return NULL;
        }
        offsets[i] = slot_offset(type, name);
        Py_DECREF(name);
        if (offsets[i] < 0) {
            return NULL;
        }
    }
    self->off_qtopic = offsets[0];
    self->off_qpartition = offsets[1];
    self->off_qkey = offsets[2];
    self->off_qclosed = offsets[3];
    self->off_qready = offsets[4];
    self->off_order = offsets[5];
    self->off_count = offsets[6];
    self->limit = limit;
    self->yield_every = yield_every;
    Py_XSETREF(self->make_result, Py_NewRef(args[0]));
    Py_XSETREF(self->make_batch, Py_NewRef(args[1]));
    Py_XSETREF(self->make_builder, Py_NewRef(args[2]));
    Py_XSETREF(self->make_future, Py_NewRef(args[3]));
    Py_XSETREF(self->incomplete, Py_NewRef(args[4]));
    Py_XSETREF(self->in_flight, Py_NewRef(args[5]));
    Py_XSETREF(self->wake, Py_NewRef(args[7]));
    Py_XSETREF(self->batch_closed, Py_NewRef(args[8]));
    Py_XSETREF(self->sticky_map, Py_NewRef(args[9]));
    Py_XSETREF(self->yields, Py_NewRef(args[10]));
    Py_XSETREF(self->yield_later, Py_NewRef(args[12]));
    Py_RETURN_NONE;
}

static PyObject *
sendpath_disarm(SendPath *self, PyObject *Py_UNUSED(ignored))
{
    Py_CLEAR(self->queue);
    Py_CLEAR(self->topic);
    self->sticky = 0;
    Py_RETURN_NONE;
}

static PyObject *
sendpath_get_armed(SendPath *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(self->queue != NULL);
}

static PyMethodDef sendpath_methods[] = {
    {"arm", (PyCFunction)(void (*)(void))sendpath_arm, METH_FASTCALL, sendpath_arm_doc},
    {"disarm", (PyCFunction)sendpath_disarm, METH_NOARGS, "disarm(): every call falls back until armed again"},
    {"opening", (PyCFunction)(void (*)(void))sendpath_opening, METH_FASTCALL, sendpath_opening_doc},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef sendpath_getset[] = {
    {"armed", (getter)sendpath_get_armed, NULL, "whether a partition is armed", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject SendPathType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pulllog.records._crecords.SendPath",
    .tp_basicsize = sizeof(SendPath),
    .tp_dealloc = (destructor)sendpath_dealloc,
    .tp_call = (ternaryfunc)sendpath_tp_call,
    .tp_vectorcall_offset = offsetof(SendPath, vectorcall),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "SendPath(...): a producer's send() for its common case in C, falling back to the Python send().",
    .tp_traverse = (traverseproc)sendpath_traverse,
    .tp_clear = (inquiry)sendpath_clear,
    .tp_methods = sendpath_methods,
    .tp_getset = sendpath_getset,
    .tp_new = sendpath_new,
};

/* ------------------------------------------------------------------------------ SetPath
 *
 * SetPath(path, fallback, new_future, record_overhead): a producer's send_batch() for its
 * common case in C, installed as the producer's ``send_batch`` (pulllog.client.producer),
 * called as send_batch(topic, records, *, partition=None, timestamp=None). It takes a set
 * only where its SendPath ``path`` would open a batch for a record (armed for ``topic`` and
 * the explicit ``partition``, not sticky, ``opening()`` given, no open batch: a batch_size=1
 * producer's every set), the records a list or tuple of simple items (values_size's), not
 * empty, its buffer_memory (values_size + ``record_overhead`` per record) within
 * max_record_size and free in the pool; then it does what sendpath_open does for a record,
 * with the set encoded (put_values), its future made by ``new_future()`` and listed as the
 * batch's set_futures [(0, count, timestamp, future)], and returns Ready(future) or
 * yield_later(future) by the same yield rule. Anything else calls ``fallback`` (the Python
 * send_batch()) with the same arguments, having changed nothing.
 */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    SendPath *path;
    PyObject *fallback;
    PyObject *new_future;
    Py_ssize_t overhead;
    Py_ssize_t off_sets;
} SetPath;

static PyObject *setpath_names[2];  /* "partition", "timestamp" */

static int
setpath_traverse(SetPath *self, visitproc visit, void *arg)
{
    Py_VISIT(self->path);
    Py_VISIT(self->fallback);
    Py_VISIT(self->new_future);
    return 0;
}

static int
setpath_clear(SetPath *self)
{
    Py_CLEAR(self->path);
    Py_CLEAR(self->fallback);
    Py_CLEAR(self->new_future);
    return 0;
}

static void
setpath_dealloc(SetPath *self)
{
    PyObject_GC_UnTrack(self);
    setpath_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
setpath_call(SetPath *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    SendPath *path = self->path;
    PyObject *partition = NULL, *timestamp = NULL;
    if (path->queue == NULL || path->make_batch == NULL || path->sticky || nargs != 2) {
        goto fallback;
    }
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t j = 0; j < nkw; j++) {
        PyObject *kw = PyTuple_GET_ITEM(kwnames, j);
        if (kw == setpath_names[0] || PyUnicode_Compare(kw, setpath_names[0]) == 0) {
            partition = args[nargs + j];
        } else if (kw == setpath_names[1] || PyUnicode_Compare(kw, setpath_names[1]) == 0) {
            timestamp = args[nargs + j];
        } else {
            PyErr_Clear();
            goto fallback;
        }
    }
    PyObject *topic = args[0], *items = args[1];
    if (!armed_topic(topic, path->topic)) {
        goto fallback;
    }
    if (!(PyList_CheckExact(items) || PyTuple_CheckExact(items)) || PySequence_Fast_GET_SIZE(items) == 0) {
        goto fallback;
    }
    int overflow;
    if (partition == NULL || !PyLong_CheckExact(partition) ||
        PyLong_AsLongLongAndOverflow(partition, &overflow) != path->partition || overflow) {
        goto fallback;
    }
    int64_t ts;
    if (record_timestamp(&timestamp, &ts) < 0) {
        goto fallback;
    }
    if (slot_at(path->queue, path->off_open) != Py_None) {
        goto fallback;  /* an open batch: the Python path decides whether the set fits it */
    }
    /* values_size, then the allowance per record (estimate_set_size) */
    Py_ssize_t count = PySequence_Fast_GET_SIZE(items), total = 0;
    PyObject **item = PySequence_Fast_ITEMS(items);
    PyObject *key, *value;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (!simple_item(item[i], &key, &value)) {
            goto fallback;
        }
        total += (key ? PyBytes_GET_SIZE(key) : 0) + (value ? PyBytes_GET_SIZE(value) : 0)
                 + (PyTuple_CheckExact(item[i]) && PyTuple_GET_SIZE(item[i]) > 2);
    }
    OpeningSet set = {items, total + self->overhead * count, self->new_future, self->off_sets};
    Py_INCREF(path);
    PyObject *opened = sendpath_open(path, NULL, -1, Py_None, -1, ts, timestamp, &set);
    Py_DECREF(path);
    if (opened != Py_None) {
        return opened;
    }
    Py_DECREF(opened);
fallback:
    return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
}

static PyObject *
setpath_tp_call(SetPath *self, PyObject *args, PyObject *kwargs)
{
    return PyVectorcall_Call((PyObject *)self, args, kwargs);
}

static PyObject *
setpath_new(PyTypeObject *subtype, PyObject *args, PyObject *kwargs)
{
    PyObject *path, *fallback, *new_future;
    Py_ssize_t overhead;
    static char *kwlist[] = {"path", "fallback", "new_future", "record_overhead", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!OOn:SetPath", kwlist, &SendPathType, &path, &fallback,
                                     &new_future, &overhead)) {
        return NULL;
    }
    if (!PyCallable_Check(fallback) || !PyCallable_Check(new_future)) {
        PyErr_SetString(PyExc_TypeError, "SetPath: fallback and new_future must be callable");
        return NULL;
    }
    PyObject *name = PyUnicode_InternFromString("set_futures");
    if (name == NULL) {
        return NULL;
    }
    Py_ssize_t off_sets = slot_offset((PyTypeObject *)((SendPath *)path)->batch_type, name);
    Py_DECREF(name);
    if (off_sets < 0) {
        return NULL;
    }
    SetPath *self = (SetPath *)subtype->tp_alloc(subtype, 0);
    if (self == NULL) {
        return NULL;
    }
    self->path = (SendPath *)Py_NewRef(path);
    self->fallback = Py_NewRef(fallback);
    self->new_future = Py_NewRef(new_future);
    self->overhead = overhead;
    self->off_sets = off_sets;
    self->vectorcall = (vectorcallfunc)setpath_call;
    return (PyObject *)self;
}

static PyTypeObject SetPathType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pulllog.records._crecords.SetPath",
    .tp_basicsize = sizeof(SetPath),
    .tp_dealloc = (destructor)setpath_dealloc,
    .tp_call = (ternaryfunc)setpath_tp_call,
    .tp_vectorcall_offset = offsetof(SetPath, vectorcall),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "SetPath(path, fallback, new_future, record_overhead): send_batch()'s common case in C.",
    .tp_traverse = (traverseproc)setpath_traverse,
    .tp_clear = (inquiry)setpath_clear,
    .tp_new = setpath_new,
};

PyDoc_STRVAR(now_ms_doc,
"now_ms() -> int\n"
"\n"
"The wall-clock time in ms since the epoch: time.time_ns() // 1_000_000 (the same clock,\n"
"CLOCK_REALTIME) without the big-int division, once per send().");

static PyObject *
now_ms(PyObject *self, PyObject *unused)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) {
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyLong_FromLongLong((long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
}

static PyMethodDef methods[] = {
    {"decode_records", decode_records, METH_VARARGS, decode_records_doc},
    {"append_record", (PyCFunction)(void (*)(void))append_record, METH_FASTCALL, append_record_doc},
    {"append_values", (PyCFunction)(void (*)(void))append_values, METH_FASTCALL, append_values_doc},
    {"values_size", values_size, METH_O, values_size_doc},
    {"now_ms", now_ms, METH_NOARGS, now_ms_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "pulllog.records._crecords",
    "RecordBatch v2 records decoded and encoded in C (optional; see pulllog.records.decoding and .encoding).", -1, methods,
};

/* Ready ``type`` (again is harmless) and add it to the module as ``name``; -1 on error. */
static int
add_type(PyObject *m, PyTypeObject *type, const char *name)
{
    if (PyType_Ready(type) < 0) {
        return -1;
    }
    Py_INCREF(type);
    if (PyModule_AddObject(m, name, (PyObject *)type) < 0) {
        Py_DECREF(type);
        return -1;
    }
    return 0;
}

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
    RecordsBuilderType.tp_base = &PyByteArray_Type;
    if (PyType_Ready(&RecordsBuilderType) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    if (add_type(m, &RecordsBuilderType, "RecordsBuilder") < 0 || add_type(m, &SlotsMakerType, "SlotsMaker") < 0 ||
        add_type(m, &ReadyType, "Ready") < 0) {
        Py_DECREF(m);
        return NULL;
    }
    static const char *const names[6] = {"topic", "value", "key", "headers", "partition", "timestamp"};
    for (int i = 0; i < 6; i++) {
        if ((sendpath_names[i] = PyUnicode_InternFromString(names[i])) == NULL) {
            Py_DECREF(m);
            return NULL;
        }
    }
    if (add_type(m, &SendPathType, "SendPath") < 0) {
        Py_DECREF(m);
        return NULL;
    }
    if ((setpath_names[0] = PyUnicode_InternFromString("partition")) == NULL ||
        (setpath_names[1] = PyUnicode_InternFromString("timestamp")) == NULL ||
        add_type(m, &SetPathType, "SetPath") < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
