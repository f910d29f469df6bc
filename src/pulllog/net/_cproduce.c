/* Produce requests decoded and Produce answers encoded in C: the broker's per-request path.
 *
 * An optional accelerator for pulllog.net.produce and pulllog.net.protocol, whose pure-Python
 * functions hold the formats (see pulllog/net/produce.py's module docstring) and stay the
 * reference: tests/net/test_net_cproduce.py checks that both give the same objects and bytes,
 * on real, truncated and mutated frames. A batch-1 producer makes the broker decode one
 * request and encode one answer per record; in Python those two took ~40% of the broker's
 * instructions per request (callgrind: 46,000 and 19,000 of 162,000 for a one-record request).
 *
 * Rules kept here:
 *
 * - Only the common shape is handled; the Python code does the rest, so every error (and
 *   its message) is the Python code's own. Decoding returns None (and the caller goes on
 *   with the Python decoder) for a frame that is not a Produce request of a served version,
 *   a length or count that does not fit, a non-empty tag buffer, a varint of more than 4
 *   bytes, a name that is no UTF-8, or bytes left over. Encoding hands the call to the
 *   Python encoder for an answer with record errors or an error message, a value out of its
 *   field's range, or objects not of the expected types.
 * - Never read outside the frame: every length is checked against the bytes that remain
 *   before anything is read or sliced. An array's count is checked against the elements the
 *   bytes that remain can hold at their smallest before its list is made.
 * - The objects made are the ones the Python code makes: Request, ProduceRequestData,
 *   TopicProduceData and PartitionProduceData named tuples (lists for the arrays, bytes for
 *   the records, str for the names), made as tuple.__new__ makes them. The types are given
 *   once by bind_decoder() and bind_encoder().
 * - A topic name or client id equal to the previous request's is the same str object again
 *   (str is immutable, so nobody can tell, and most requests name the same ones).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static PyTypeObject *request_type = NULL;          /* pulllog.net.protocol.Request */
static PyTypeObject *body_type = NULL;             /* ProduceRequestData */
static PyTypeObject *topic_data_type = NULL;       /* TopicProduceData */
static PyTypeObject *partition_data_type = NULL;   /* PartitionProduceData */
static PyTypeObject *topic_response_type = NULL;   /* TopicProduceResponse */
static PyTypeObject *partition_response_type = NULL; /* PartitionProduceResponse */
static PyObject *py_encoder = NULL;                /* py_encode_produce_response: every other shape */

/* The last client id and topic name decoded, as bytes and as the str made of them. */
typedef struct {
    char *bytes;
    Py_ssize_t size;
    PyObject *str;
} cached_string;

static cached_string last_client_id = {NULL, 0, NULL};
static cached_string last_topic = {NULL, 0, NULL};

static PyObject *
cached_decode(cached_string *cache, const char *data, Py_ssize_t size)
{
    if (cache->str != NULL && cache->size == size && memcmp(cache->bytes, data, (size_t)size) == 0) {
        Py_INCREF(cache->str);
        return cache->str;
    }
    PyObject *str = PyUnicode_DecodeUTF8(data, size, NULL);
    if (str == NULL) {
        return NULL;
    }
    char *copy = PyMem_Malloc(size > 0 ? (size_t)size : 1);
    if (copy == NULL) {  /* no cache then; the str is still right */
        return str;
    }
    memcpy(copy, data, (size_t)size);
    PyMem_Free(cache->bytes);
    Py_XDECREF(cache->str);
    cache->bytes = copy;
    cache->size = size;
    Py_INCREF(str);
    cache->str = str;
    return str;
}

/* A named tuple of `type` from its n items (references stolen), as tuple.__new__(type, items)
 * makes it: the type's allocation, then the items. NULL with an exception set on failure. */
static PyObject *
new_tuple(PyTypeObject *type, Py_ssize_t n, PyObject **items)
{
    PyObject *obj = type->tp_alloc(type, n);
    if (obj == NULL) {
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_XDECREF(items[i]);
        }
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyTuple_SET_ITEM(obj, i, items[i]);
    }
    return obj;
}

/* ------------------------------------------------------------------------------ decoding */

typedef struct {
    const unsigned char *data;
    Py_ssize_t pos;
    Py_ssize_t end;
} reader;

/* Kafka's unsigned varint of at most 4 bytes; 0 when it does not fit (the Python reader
 * then gives the error, or the value: 5-byte varints are left to it). */
static int
read_uvarint(reader *r, int64_t *value)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        if (r->pos >= r->end) {
            return 0;
        }
        unsigned char byte = r->data[r->pos++];
        v |= (uint32_t)(byte & 0x7F) << (7 * i);
        if (byte < 0x80) {
            *value = v;
            return 1;
        }
    }
    return 0;
}

static int
read_int16(reader *r, int64_t *value)
{
    if (r->end - r->pos < 2) {
        return 0;
    }
    const unsigned char *p = r->data + r->pos;
    *value = (int16_t)(((uint16_t)p[0] << 8) | p[1]);
    r->pos += 2;
    return 1;
}

static int
read_int32(reader *r, int64_t *value)
{
    if (r->end - r->pos < 4) {
        return 0;
    }
    const unsigned char *p = r->data + r->pos;
    *value = (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
    r->pos += 4;
    return 1;
}

/* A size: compact (uvarint N + 1, 0 is null: -1) in flexible versions, else int16/int32. */
static int
read_size(reader *r, int flexible, int width, int64_t *value)
{
    if (flexible) {
        int64_t v;
        if (!read_uvarint(r, &v)) {
            return 0;
        }
        *value = v - 1;
        return 1;
    }
    return width == 2 ? read_int16(r, value) : read_int32(r, value);
}

/* A string or bytes length: -1 (null) or a length whose bytes are there. */
static int
read_length(reader *r, int flexible, int width, int64_t *length)
{
    if (!read_size(r, flexible, width, length)) {
        return 0;
    }
    return *length >= -1 && *length <= r->end - r->pos;
}

/* The smallest encoding of a topic's data (name length, partition count, [v9] tags) and of
 * a partition's (index, records length, [v9] tags), by flexible (1) or not (0). */
static const Py_ssize_t smallest_topic[2] = {2 + 4, 1 + 1 + 1};
static const Py_ssize_t smallest_partition[2] = {4 + 4, 4 + 1 + 1};

/* A non-nullable array's count, which the bytes left must be able to hold at `smallest`
 * bytes an element: a larger count is a broken frame, left to Python before a list of that
 * many 8-byte slots is made (checked against the bytes alone, a count could make the lists
 * 8 times the frame's size; so at most 8/3 times, less than a valid frame's objects). */
static int
read_count(reader *r, int flexible, Py_ssize_t smallest, int64_t *count)
{
    if (!read_size(r, flexible, 4, count)) {
        return 0;
    }
    return *count >= 0 && *count <= (r->end - r->pos) / smallest;
}

/* An empty tag buffer (a non-empty one is left to Python). */
static int
skip_empty_tags(reader *r)
{
    if (r->pos < r->end && r->data[r->pos] == 0) {
        r->pos++;
        return 1;
    }
    return 0;
}

/* A string of `length` bytes at the reader's position, as str; NULL with no exception set
 * when it is no UTF-8 (Python gives the error), NULL with one set on memory errors. */
static PyObject *
take_string(reader *r, Py_ssize_t length, cached_string *cache)
{
    PyObject *str = cached_decode(cache, (const char *)r->data + r->pos, length);
    if (str == NULL && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
        PyErr_Clear();
    }
    r->pos += length;
    return str;
}

static PyObject *
decode_body(reader *r, int flexible)
{
    int64_t length, count, value, acks, timeout;
    PyObject *transactional_id;
    if (!read_length(r, flexible, 2, &length)) {
        return NULL;
    }
    if (length < 0) {
        transactional_id = Py_NewRef(Py_None);
    }
    else {
        transactional_id = PyUnicode_DecodeUTF8((const char *)r->data + r->pos, (Py_ssize_t)length, NULL);
        if (transactional_id == NULL) {
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                PyErr_Clear();
            }
            return NULL;
        }
        r->pos += (Py_ssize_t)length;
    }
    PyObject *topics = NULL;
    if (!read_int16(r, &acks) || !read_int32(r, &timeout)
            || !read_count(r, flexible, smallest_topic[flexible], &count)) {
        goto fail;
    }
    topics = PyList_New((Py_ssize_t)count);
    if (topics == NULL) {
        goto fail;
    }
    for (Py_ssize_t t = 0; t < (Py_ssize_t)count; t++) {
        int64_t partitions;
        if (!read_length(r, flexible, 2, &length) || length < 0) {
            goto fail;
        }
        PyObject *name = take_string(r, (Py_ssize_t)length, &last_topic);
        if (name == NULL) {
            goto fail;
        }
        if (!read_count(r, flexible, smallest_partition[flexible], &partitions)) {
            Py_DECREF(name);
            goto fail;
        }
        PyObject *partition_data = PyList_New((Py_ssize_t)partitions);
        if (partition_data == NULL) {
            Py_DECREF(name);
            goto fail;
        }
        PyObject *items[2] = {name, partition_data};
        PyObject *topic = new_tuple(topic_data_type, 2, items);
        if (topic == NULL) {
            goto fail;
        }
        PyList_SET_ITEM(topics, t, topic);
        for (Py_ssize_t p = 0; p < (Py_ssize_t)partitions; p++) {
            PyObject *records;
            if (!read_int32(r, &value) || !read_length(r, flexible, 4, &length)) {
                goto fail;
            }
            if (length < 0) {
                records = Py_NewRef(Py_None);
            }
            else {
                records = PyBytes_FromStringAndSize((const char *)r->data + r->pos, (Py_ssize_t)length);
                if (records == NULL) {
                    goto fail;
                }
                r->pos += (Py_ssize_t)length;
            }
            if (flexible && !skip_empty_tags(r)) {
                Py_DECREF(records);
                goto fail;
            }
            PyObject *index = PyLong_FromLongLong(value);
            if (index == NULL) {
                Py_DECREF(records);
                goto fail;
            }
            PyObject *pitems[2] = {index, records};
            PyObject *partition = new_tuple(partition_data_type, 2, pitems);
            if (partition == NULL) {
                goto fail;
            }
            PyList_SET_ITEM(partition_data, p, partition);
        }
        if (flexible && !skip_empty_tags(r)) {
            goto fail;
        }
    }
    if ((flexible && !skip_empty_tags(r)) || r->pos != r->end) {
        goto fail;
    }
    PyObject *acks_obj = PyLong_FromLongLong(acks);
    PyObject *timeout_obj = PyLong_FromLongLong(timeout);
    if (acks_obj == NULL || timeout_obj == NULL) {
        Py_XDECREF(acks_obj);
        Py_XDECREF(timeout_obj);
        goto fail;
    }
    PyObject *items[4] = {transactional_id, acks_obj, timeout_obj, topics};
    return new_tuple(body_type, 4, items);
fail:
    Py_DECREF(transactional_id);
    Py_XDECREF(topics);
    return NULL;
}

/* A Produce request from the frame's bytes (decode_request); None for any other shape. */
static PyObject *
decode_frame(reader *r, long min_version, long max_version)
{
    if (r->end < 10) {
        Py_RETURN_NONE;
    }
    int64_t api_key, version, correlation_id, length;
    if (!read_int16(r, &api_key) || !read_int16(r, &version) || !read_int32(r, &correlation_id)
            || !read_int16(r, &length)) {  /* (the frame has at least 10 bytes) */
        Py_RETURN_NONE;
    }
    if (api_key != 0 || version < min_version || version > max_version || version < 3 || version > 9) {
        Py_RETURN_NONE;
    }
    int flexible = version >= 9;
    PyObject *client_id;
    if (length == -1) {
        client_id = Py_NewRef(Py_None);
    }
    else if (length < 0 || length > r->end - r->pos) {
        Py_RETURN_NONE;
    }
    else {
        client_id = take_string(r, (Py_ssize_t)length, &last_client_id);
        if (client_id == NULL) {
            if (PyErr_Occurred()) {
                return NULL;
            }
            Py_RETURN_NONE;
        }
    }
    if (flexible && !skip_empty_tags(r)) {  /* request header v2's tag buffer */
        Py_DECREF(client_id);
        Py_RETURN_NONE;
    }
    PyObject *body = decode_body(r, flexible);
    if (body == NULL) {
        Py_DECREF(client_id);
        if (PyErr_Occurred()) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    PyObject *key_obj = PyLong_FromLong(0);
    PyObject *version_obj = PyLong_FromLongLong(version);
    PyObject *correlation_obj = PyLong_FromLongLong(correlation_id);
    if (key_obj == NULL || version_obj == NULL || correlation_obj == NULL) {
        Py_XDECREF(key_obj);
        Py_XDECREF(version_obj);
        Py_XDECREF(correlation_obj);
        Py_DECREF(client_id);
        Py_DECREF(body);
        return NULL;
    }
    PyObject *items[5] = {key_obj, version_obj, correlation_obj, client_id, body};
    return new_tuple(request_type, 5, items);
}

/* decode_request(frame, min_version, max_version) -> Request | None
 * frame: bytes, or a memoryview of a frame still in the broker connection's read buffer
 * (broker/server.py), read in place: nothing of it is kept (strings and records are copied
 * out); any other view is left to the Python decoder. */
static PyObject *
decode_request(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "decode_request(frame, min_version, max_version)");
        return NULL;
    }
    if (request_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "bind_decoder() was not called");
        return NULL;
    }
    PyObject *frame = args[0];
    long min_version = PyLong_AsLong(args[1]);
    long max_version = PyLong_AsLong(args[2]);
    if ((min_version == -1 || max_version == -1) && PyErr_Occurred()) {
        return NULL;
    }
    if (PyBytes_CheckExact(frame)) {
        reader r = {(const unsigned char *)PyBytes_AS_STRING(frame), 0, PyBytes_GET_SIZE(frame)};
        return decode_frame(&r, min_version, max_version);
    }
    if (!PyMemoryView_Check(frame)) {
        Py_RETURN_NONE;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(frame, &view, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();  /* released, or not contiguous: the Python decoder's bytes() says which */
        Py_RETURN_NONE;
    }
    reader r = {(const unsigned char *)view.buf, 0, view.len};
    PyObject *result = decode_frame(&r, min_version, max_version);
    PyBuffer_Release(&view);
    return result;
}

/* ------------------------------------------------------------------------------ encoding */

typedef struct {
    char *data;
    Py_ssize_t size;
    Py_ssize_t capacity;
    char small[256];
} writer;

static int
reserve(writer *w, Py_ssize_t more)
{
    if (w->size + more <= w->capacity) {
        return 1;
    }
    Py_ssize_t capacity = w->capacity * 2;
    while (capacity < w->size + more) {
        capacity *= 2;
    }
    char *data = w->data == w->small ? PyMem_Malloc((size_t)capacity) : PyMem_Realloc(w->data, (size_t)capacity);
    if (data == NULL) {
        PyErr_NoMemory();
        return 0;
    }
    if (w->data == w->small) {
        memcpy(data, w->small, (size_t)w->size);
    }
    w->data = data;
    w->capacity = capacity;
    return 1;
}

static void
put_int(writer *w, uint64_t value, int bytes)  /* big-endian; reserve() first */
{
    for (int i = bytes - 1; i >= 0; i--) {
        w->data[w->size++] = (char)((value >> (8 * i)) & 0xFF);
    }
}

static void
put_uvarint(writer *w, uint64_t value)  /* reserve() 10 bytes first */
{
    while (value >= 0x80) {
        w->data[w->size++] = (char)((value & 0x7F) | 0x80);
        value >>= 7;
    }
    w->data[w->size++] = (char)value;
}

/* The value of an int object within [low, high]; 0 when it is no int or out of range
 * (the Python encoder then raises struct.error, or encodes what it accepts). */
static int
int_in(PyObject *obj, int64_t low, int64_t high, int64_t *value)
{
    if (!PyLong_Check(obj)) {
        return 0;
    }
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (overflow || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    if (v < low || v > high) {
        return 0;
    }
    *value = v;
    return 1;
}

/* A list's or tuple's items; NULL (no exception) for anything else. */
static PyObject **
items_of(PyObject *seq, Py_ssize_t *n)
{
    if (PyList_CheckExact(seq)) {
        *n = PyList_GET_SIZE(seq);
        return ((PyListObject *)seq)->ob_item;
    }
    if (PyTuple_CheckExact(seq)) {
        *n = PyTuple_GET_SIZE(seq);
        return ((PyTupleObject *)seq)->ob_item;
    }
    return NULL;
}

/* 1: encoded; 0: not this encoder's shape (no exception); -1: an exception is set. */
static int
encode_topics(writer *w, int version, PyObject *topics, int64_t throttle)
{
    int flexible = version >= 9;
    Py_ssize_t n_topics;
    PyObject **topic_items = items_of(topics, &n_topics);
    if (topic_items == NULL) {
        return 0;
    }
    if (!reserve(w, 16)) {
        return -1;
    }
    if (flexible) {
        w->data[w->size++] = 0;  /* response header v1's tag buffer */
        put_uvarint(w, (uint64_t)n_topics + 1);
    }
    else {
        put_int(w, (uint64_t)n_topics, 4);
    }
    for (Py_ssize_t t = 0; t < n_topics; t++) {
        PyObject *topic = topic_items[t];
        if (Py_TYPE(topic) != topic_response_type || PyTuple_GET_SIZE(topic) != 2) {
            return 0;
        }
        PyObject *name = PyTuple_GET_ITEM(topic, 0);
        Py_ssize_t name_size = 0;
        const char *name_bytes = NULL;
        if (name != Py_None) {
            if (!PyUnicode_CheckExact(name)) {
                return 0;
            }
            name_bytes = PyUnicode_AsUTF8AndSize(name, &name_size);
            if (name_bytes == NULL) {  /* (surrogates: the Python encoder raises) */
                PyErr_Clear();
                return 0;
            }
            if (!flexible && name_size > 0x7FFF) {
                return 0;
            }
        }
        Py_ssize_t n_partitions;
        PyObject **partition_items = items_of(PyTuple_GET_ITEM(topic, 1), &n_partitions);
        if (partition_items == NULL) {
            return 0;
        }
        if (!reserve(w, name_size + 32)) {
            return -1;
        }
        if (name == Py_None) {
            if (flexible) {
                w->data[w->size++] = 0;
            }
            else {
                put_int(w, 0xFFFF, 2);
            }
        }
        else {
            if (flexible) {
                put_uvarint(w, (uint64_t)name_size + 1);
            }
            else {
                put_int(w, (uint64_t)name_size, 2);
            }
            memcpy(w->data + w->size, name_bytes, (size_t)name_size);
            w->size += name_size;
        }
        if (flexible) {
            put_uvarint(w, (uint64_t)n_partitions + 1);
        }
        else {
            put_int(w, (uint64_t)n_partitions, 4);
        }
        for (Py_ssize_t p = 0; p < n_partitions; p++) {
            PyObject *partition = partition_items[p];
            if (Py_TYPE(partition) != partition_response_type || PyTuple_GET_SIZE(partition) != 7) {
                return 0;
            }
            int64_t index, error_code, base_offset, append_time, log_start_offset;
            if (!int_in(PyTuple_GET_ITEM(partition, 0), INT32_MIN, INT32_MAX, &index)
                || !int_in(PyTuple_GET_ITEM(partition, 1), INT16_MIN, INT16_MAX, &error_code)
                || !int_in(PyTuple_GET_ITEM(partition, 2), INT64_MIN, INT64_MAX, &base_offset)
                || !int_in(PyTuple_GET_ITEM(partition, 3), INT64_MIN, INT64_MAX, &append_time)) {
                return 0;
            }
            if (version >= 5 && !int_in(PyTuple_GET_ITEM(partition, 4), INT64_MIN, INT64_MAX, &log_start_offset)) {
                return 0;
            }
            if (version >= 8) {  /* only answers without record errors or an error message here */
                Py_ssize_t n_errors;
                PyObject *record_errors = PyTuple_GET_ITEM(partition, 5);
                if (items_of(record_errors, &n_errors) == NULL || n_errors != 0
                        || PyTuple_GET_ITEM(partition, 6) != Py_None) {
                    return 0;
                }
            }
            if (!reserve(w, 40)) {
                return -1;
            }
            put_int(w, (uint64_t)index, 4);
            put_int(w, (uint64_t)error_code, 2);
            put_int(w, (uint64_t)base_offset, 8);
            put_int(w, (uint64_t)append_time, 8);
            if (version >= 5) {
                put_int(w, (uint64_t)log_start_offset, 8);
            }
            if (version >= 8) {
                if (flexible) {  /* no record errors, a null message, no tags */
                    memcpy(w->data + w->size, "\x01\x00\x00", 3);
                    w->size += 3;
                }
                else {
                    memcpy(w->data + w->size, "\x00\x00\x00\x00\xff\xff", 6);
                    w->size += 6;
                }
            }
        }
        if (flexible) {
            if (!reserve(w, 1)) {
                return -1;
            }
            w->data[w->size++] = 0;  /* the topic's tags */
        }
    }
    if (!reserve(w, 8)) {
        return -1;
    }
    put_int(w, (uint64_t)throttle, 4);
    if (flexible) {
        w->data[w->size++] = 0;
    }
    return 1;
}

/* encode_produce_response(correlation_id, version, topics, throttle_time_ms=0) -> bytes: the
 * whole frame, size prefix included; what this file does not encode, the Python encoder does
 * (it also raises the errors). */
static PyObject *
encode_response(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (py_encoder == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "bind_encoder() was not called");
        return NULL;
    }
    if (nargs != 3 && nargs != 4) {
        return PyObject_Vectorcall(py_encoder, args, (size_t)nargs, NULL);
    }
    int64_t correlation_id, version, throttle = 0;
    if (!int_in(args[0], INT32_MIN, INT32_MAX, &correlation_id) || !int_in(args[1], 3, 9, &version)
            || (nargs == 4 && !int_in(args[3], INT32_MIN, INT32_MAX, &throttle))) {
        return PyObject_Vectorcall(py_encoder, args, (size_t)nargs, NULL);
    }
    writer w;
    w.data = w.small;
    w.capacity = sizeof(w.small);
    w.size = 8;  /* the size and the correlation id, written last */
    int done = encode_topics(&w, (int)version, args[2], throttle);
    PyObject *result = NULL;
    if (done == 1 && w.size - 4 <= INT32_MAX) {
        Py_ssize_t end = w.size;
        w.size = 0;
        put_int(&w, (uint64_t)(end - 4), 4);
        put_int(&w, (uint64_t)correlation_id, 4);
        result = PyBytes_FromStringAndSize(w.data, end);
    }
    if (w.data != w.small) {
        PyMem_Free(w.data);
    }
    if (done == -1 || result != NULL) {
        return result;
    }
    return PyObject_Vectorcall(py_encoder, args, (size_t)nargs, NULL);
}

/* ------------------------------------------------------------- the producer's one-partition path */

/* OnePartition(version, prefixes, acks, answer_tail, py_frame, py_ack): a ProduceRequestEncoder's
 * one_partition_frame and one_partition_ack in C, for a batch-1 producer's every request and
 * answer (the Python methods took ~155 bytecodes, three struct calls and a join per record).
 * ``prefixes`` and ``acks`` are the encoder's own caches (topic -> the frame's bytes up to the
 * partition; topic -> (answer size, answer head, where its tail starts)), which the Python
 * methods fill: for a topic not in them yet, and for any argument not of the usual types or
 * out of its field's range, the call goes to the Python method (``py_frame``/``py_ack``), so
 * the bytes, the answers and the errors are the Python code's own. */
typedef struct {
    PyObject_HEAD
    int version;
    int flexible;
    PyObject *prefixes;     /* dict */
    PyObject *acks;         /* dict */
    PyObject *answer_tail;  /* bytes */
    PyObject *py_frame;
    PyObject *py_ack;
} OnePartition;

static int
one_traverse(OnePartition *self, visitproc visit, void *arg)
{
    Py_VISIT(self->prefixes);
    Py_VISIT(self->acks);
    Py_VISIT(self->answer_tail);
    Py_VISIT(self->py_frame);
    Py_VISIT(self->py_ack);
    return 0;
}

static int
one_clear(OnePartition *self)
{
    Py_CLEAR(self->prefixes);
    Py_CLEAR(self->acks);
    Py_CLEAR(self->answer_tail);
    Py_CLEAR(self->py_frame);
    Py_CLEAR(self->py_ack);
    return 0;
}

static void
one_dealloc(OnePartition *self)
{
    PyObject_GC_UnTrack(self);
    one_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
one_init(OnePartition *self, PyObject *args, PyObject *kwargs)
{
    int version;
    PyObject *prefixes, *acks, *answer_tail, *py_frame, *py_ack;
    if (!PyArg_ParseTuple(args, "iO!O!O!OO:OnePartition", &version, &PyDict_Type, &prefixes, &PyDict_Type, &acks,
                          &PyBytes_Type, &answer_tail, &py_frame, &py_ack)) {
        return -1;
    }
    if (version < 3 || version > 9) {
        PyErr_SetString(PyExc_ValueError, "Produce v3-v9");
        return -1;
    }
    self->version = version;
    self->flexible = version >= 9;
    Py_INCREF(prefixes);
    Py_XSETREF(self->prefixes, prefixes);
    Py_INCREF(acks);
    Py_XSETREF(self->acks, acks);
    Py_INCREF(answer_tail);
    Py_XSETREF(self->answer_tail, answer_tail);
    Py_INCREF(py_frame);
    Py_XSETREF(self->py_frame, py_frame);
    Py_INCREF(py_ack);
    Py_XSETREF(self->py_ack, py_ack);
    return 0;
}

static void
put_be(unsigned char *p, uint64_t value, int bytes)
{
    for (int i = bytes - 1; i >= 0; i--) {
        p[i] = (unsigned char)(value & 0xFF);
        value >>= 8;
    }
}

static int64_t
get_be(const unsigned char *p, int bytes)
{
    uint64_t value = 0;
    for (int i = 0; i < bytes; i++) {
        value = (value << 8) | p[i];
    }
    return bytes == 8 ? (int64_t)value : bytes == 4 ? (int64_t)(int32_t)(uint32_t)value : (int64_t)(int16_t)(uint16_t)value;
}

/* frame(correlation_id, topic, partition, records) -> bytes: one_partition_frame's bytes. */
static PyObject *
one_frame(OnePartition *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (self->py_frame == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "OnePartition was not initialised");
        return NULL;
    }
    if (nargs != 4 || !PyUnicode_CheckExact(args[1]) || !PyBytes_CheckExact(args[3])) {
        return PyObject_Vectorcall(self->py_frame, args, (size_t)nargs, NULL);
    }
    int64_t correlation_id, partition;
    if (!int_in(args[0], INT32_MIN, INT32_MAX, &correlation_id) || !int_in(args[2], INT32_MIN, INT32_MAX, &partition)) {
        return PyObject_Vectorcall(self->py_frame, args, (size_t)nargs, NULL);
    }
    PyObject *prefix = PyDict_GetItemWithError(self->prefixes, args[1]);
    if (prefix == NULL || !PyBytes_CheckExact(prefix)) {
        if (PyErr_Occurred()) {
            return NULL;
        }
        return PyObject_Vectorcall(self->py_frame, args, (size_t)nargs, NULL);
    }
    Py_ssize_t prefix_size = PyBytes_GET_SIZE(prefix), size = PyBytes_GET_SIZE(args[3]);
    unsigned char middle[4 + 10];
    Py_ssize_t middle_size = 4, tail_size = self->flexible ? 3 : 0;
    put_be(middle, (uint64_t)partition, 4);
    if (self->flexible) {
        uint64_t n = (uint64_t)size + 1;
        while (n >= 0x80) {
            middle[middle_size++] = (unsigned char)((n & 0x7F) | 0x80);
            n >>= 7;
        }
        middle[middle_size++] = (unsigned char)n;
    } else {
        put_be(middle + 4, (uint64_t)size, 4);
        middle_size = 8;
    }
    Py_ssize_t body = 8 + prefix_size + middle_size + size + tail_size;
    if (body > INT32_MAX) {
        return PyObject_Vectorcall(self->py_frame, args, (size_t)nargs, NULL);
    }
    PyObject *frame = PyBytes_FromStringAndSize(NULL, 4 + body);
    if (frame == NULL) {
        return NULL;
    }
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(frame);
    put_be(p, (uint64_t)body, 4);
    put_be(p + 4, 0, 2);  /* api key: Produce */
    put_be(p + 6, (uint64_t)self->version, 2);
    put_be(p + 8, (uint64_t)correlation_id, 4);
    p += 12;
    memcpy(p, PyBytes_AS_STRING(prefix), (size_t)prefix_size);
    p += prefix_size;
    memcpy(p, middle, (size_t)middle_size);
    p += middle_size;
    memcpy(p, PyBytes_AS_STRING(args[3]), (size_t)size);
    p += size;
    memset(p, 0, (size_t)tail_size);  /* [v9] the tag buffers of the partition, the topic and the request */
    return frame;
}

/* ack(frame, topic, partition) -> (base offset, log append time) | None: one_partition_ack's. */
static PyObject *
one_ack(OnePartition *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (self->py_ack == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "OnePartition was not initialised");
        return NULL;
    }
    int64_t partition;
    if (nargs != 3 || !PyBytes_CheckExact(args[0]) || !PyUnicode_CheckExact(args[1])
            || !int_in(args[2], INT32_MIN, INT32_MAX, &partition)) {
        return PyObject_Vectorcall(self->py_ack, args, (size_t)nargs, NULL);
    }
    PyObject *shape = PyDict_GetItemWithError(self->acks, args[1]);
    if (shape == NULL || !PyTuple_CheckExact(shape) || PyTuple_GET_SIZE(shape) != 3
            || !PyBytes_CheckExact(PyTuple_GET_ITEM(shape, 1))) {
        if (PyErr_Occurred()) {
            return NULL;
        }
        return PyObject_Vectorcall(self->py_ack, args, (size_t)nargs, NULL);
    }
    Py_ssize_t size = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, 0));
    Py_ssize_t tail_at = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, 2));
    if ((size == -1 || tail_at == -1) && PyErr_Occurred()) {
        return NULL;
    }
    PyObject *head = PyTuple_GET_ITEM(shape, 1);
    const unsigned char *f = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    Py_ssize_t frame_size = PyBytes_GET_SIZE(args[0]), head_size = PyBytes_GET_SIZE(head);
    Py_ssize_t tail_size = PyBytes_GET_SIZE(self->answer_tail);
    /* the size first: then the head, the partition's fields and the tail are inside the frame
     * (the shape was computed from them), checked again here all the same */
    if (frame_size != size || 4 + head_size + 22 > frame_size || tail_at < 0 || tail_at + tail_size > frame_size
            || memcmp(f + 4, PyBytes_AS_STRING(head), (size_t)head_size) != 0
            || memcmp(f + tail_at, PyBytes_AS_STRING(self->answer_tail), (size_t)tail_size) != 0
            || (self->flexible && f[frame_size - 1] != 0)) {
        Py_RETURN_NONE;
    }
    const unsigned char *at = f + 4 + head_size;
    if (get_be(at, 4) != partition || get_be(at + 4, 2) != 0) {
        Py_RETURN_NONE;
    }
    PyObject *base_offset = PyLong_FromLongLong(get_be(at + 6, 8));
    if (base_offset == NULL) {
        return NULL;
    }
    PyObject *log_append_time = PyLong_FromLongLong(get_be(at + 14, 8));
    if (log_append_time == NULL) {
        Py_DECREF(base_offset);
        return NULL;
    }
    PyObject *result = PyTuple_New(2);
    if (result == NULL) {
        Py_DECREF(base_offset);
        Py_DECREF(log_append_time);
        return NULL;
    }
    PyTuple_SET_ITEM(result, 0, base_offset);
    PyTuple_SET_ITEM(result, 1, log_append_time);
    return result;
}

static PyMethodDef one_methods[] = {
    {"frame", (PyCFunction)(void (*)(void))one_frame, METH_FASTCALL,
     "frame(correlation_id, topic, partition, records) -> bytes: ProduceRequestEncoder.one_partition_frame"},
    {"ack", (PyCFunction)(void (*)(void))one_ack, METH_FASTCALL,
     "ack(frame, topic, partition) -> (base offset, log append time) | None: ProduceRequestEncoder.one_partition_ack"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject OnePartitionType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pulllog.net._cproduce.OnePartition",
    .tp_basicsize = sizeof(OnePartition),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "OnePartition(version, prefixes, acks, answer_tail, py_frame, py_ack): a ProduceRequestEncoder's "
              "one-partition frame and answer in C",
    .tp_traverse = (traverseproc)one_traverse,
    .tp_clear = (inquiry)one_clear,
    .tp_dealloc = (destructor)one_dealloc,
    .tp_methods = one_methods,
    .tp_init = (initproc)one_init,
    .tp_new = PyType_GenericNew,
};

/* ------------------------------------------------------------------------------ the module */

static int
set_type(PyTypeObject **slot, PyObject *obj)
{
    if (!PyType_Check(obj) || !PyType_IsSubtype((PyTypeObject *)obj, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "a tuple subclass (a named tuple) is expected");
        return 0;
    }
    Py_INCREF(obj);
    Py_XSETREF(*slot, (PyTypeObject *)obj);
    return 1;
}

/* bind_decoder(Request, ProduceRequestData, TopicProduceData, PartitionProduceData) */
static PyObject *
bind_decoder(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "bind_decoder(request, body, topic_data, partition_data)");
        return NULL;
    }
    if (!set_type(&request_type, args[0]) || !set_type(&body_type, args[1])
            || !set_type(&topic_data_type, args[2]) || !set_type(&partition_data_type, args[3])) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* bind_encoder(TopicProduceResponse, PartitionProduceResponse, py_encode_produce_response) */
static PyObject *
bind_encoder(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyCallable_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "bind_encoder(topic_response, partition_response, python_encoder)");
        return NULL;
    }
    if (!set_type(&topic_response_type, args[0]) || !set_type(&partition_response_type, args[1])) {
        return NULL;
    }
    Py_INCREF(args[2]);
    Py_XSETREF(py_encoder, args[2]);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"decode_request", (PyCFunction)(void (*)(void))decode_request, METH_FASTCALL,
     "decode_request(frame, min_version, max_version) -> Request | None: a Produce request frame "
     "(size prefix off) of a version in the range, in the common shape; None for the Python decoder."},
    {"encode_response", (PyCFunction)(void (*)(void))encode_response, METH_FASTCALL,
     "encode_response(correlation_id, version, topics, throttle_time_ms=0) -> bytes: a Produce answer's "
     "frame, size prefix included; answers with record errors or error messages by the Python encoder."},
    {"bind_decoder", (PyCFunction)(void (*)(void))bind_decoder, METH_FASTCALL,
     "bind_decoder(Request, ProduceRequestData, TopicProduceData, PartitionProduceData)"},
    {"bind_encoder", (PyCFunction)(void (*)(void))bind_encoder, METH_FASTCALL,
     "bind_encoder(TopicProduceResponse, PartitionProduceResponse, py_encode_produce_response)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_cproduce",
    "Produce requests decoded and answers encoded in C (see pulllog.net.produce).", -1, methods,
};

PyMODINIT_FUNC
PyInit__cproduce(void)
{
    if (PyType_Ready(&OnePartitionType) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL) {
        return NULL;
    }
    Py_INCREF(&OnePartitionType);
    if (PyModule_AddObject(m, "OnePartition", (PyObject *)&OnePartitionType) < 0) {
        Py_DECREF(&OnePartitionType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
