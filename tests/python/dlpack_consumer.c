/* A DLPack consumer written in C, as an extension library would write one: it finds a producer
 * type's __dlpack_c_exchange_api__ table and calls through it, never through Python methods.
 * The tests build it with the system compiler (see test_exchange_api.py). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

/* DLPack 1.3's structures, as in dlpack.h. */
typedef struct { uint32_t major, minor; } DLPackVersion;
typedef struct { int32_t device_type, device_id; } DLDevice;
typedef struct { uint8_t code, bits; uint16_t lanes; } DLDataType;
typedef struct {
    void *data; DLDevice device; int32_t ndim; DLDataType dtype;
    int64_t *shape, *strides; uint64_t byte_offset;
} DLTensor;
typedef struct DLManagedTensorVersioned {
    DLPackVersion version; void *manager_ctx;
    void (*deleter)(struct DLManagedTensorVersioned *); uint64_t flags; DLTensor dl_tensor;
} DLManagedTensorVersioned;
typedef struct DLPackExchangeAPIHeader {
    DLPackVersion version; struct DLPackExchangeAPIHeader *prev_api;
} DLPackExchangeAPIHeader;
typedef struct {
    DLPackExchangeAPIHeader header;
    int (*managed_tensor_allocator)(DLTensor *, DLManagedTensorVersioned **, void *,
                                    void (*)(void *, const char *, const char *));
    int (*managed_tensor_from_py_object_no_sync)(void *, DLManagedTensorVersioned **);
    int (*managed_tensor_to_py_object_no_sync)(DLManagedTensorVersioned *, void **);
    int (*dltensor_from_py_object_no_sync)(void *, DLTensor *);
    int (*current_work_stream)(int32_t, int32_t, void **);
} DLPackExchangeAPI;

static const DLPackExchangeAPI *table_of(PyObject *obj) {
    PyObject *capsule = PyObject_GetAttrString((PyObject *)Py_TYPE(obj), "__dlpack_c_exchange_api__");
    if (capsule == NULL) return NULL;
    const DLPackExchangeAPI *api = PyCapsule_GetPointer(capsule, "dlpack_exchange_api");
    Py_DECREF(capsule);
    if (api != NULL && api->header.version.major != 1) {
        PyErr_SetString(PyExc_RuntimeError, "unsupported DLPack major version");
        return NULL;
    }
    return api;
}

static PyObject *tensor_tuple(const DLTensor *t) {
    PyObject *shape = PyTuple_New(t->ndim), *strides = PyTuple_New(t->ndim);
    for (int i = 0; i < t->ndim; i++) {
        PyTuple_SET_ITEM(shape, i, PyLong_FromLongLong(t->shape[i]));
        PyTuple_SET_ITEM(strides, i, PyLong_FromLongLong(t->strides[i]));
    }
    return Py_BuildValue("{s:K,s:(ii),s:i,s:(iii),s:N,s:N,s:K}", "data",
                         (unsigned long long)(uintptr_t)t->data, "device", t->device.device_type,
                         t->device.device_id, "ndim", t->ndim, "dtype", t->dtype.code,
                         t->dtype.bits, t->dtype.lanes, "shape", shape, "strides", strides,
                         "byte_offset", (unsigned long long)t->byte_offset);
}

/* describe(obj): the non-owning DLTensor the producer fills in. */
static PyObject *describe(PyObject *self, PyObject *obj) {
    const DLPackExchangeAPI *api = table_of(obj);
    if (api == NULL) return NULL;
    DLTensor t;
    if (api->dltensor_from_py_object_no_sync(obj, &t) != 0) return NULL;
    return tensor_tuple(&t);
}

/* round_trip(obj): an owning export, then the producer's own import of it. */
static PyObject *round_trip(PyObject *self, PyObject *obj) {
    const DLPackExchangeAPI *api = table_of(obj);
    if (api == NULL) return NULL;
    DLManagedTensorVersioned *managed = NULL;
    if (api->managed_tensor_from_py_object_no_sync(obj, &managed) != 0) return NULL;
    PyObject *described = tensor_tuple(&managed->dl_tensor);
    unsigned long long flags = managed->flags;
    void *out = NULL;
    if (api->managed_tensor_to_py_object_no_sync(managed, &out) != 0) {
        Py_DECREF(described);
        return NULL;
    }
    return Py_BuildValue("(NNK)", (PyObject *)out, described, flags);
}

/* export_and_delete(obj): an owning export released straight away by its deleter. */
static PyObject *export_and_delete(PyObject *self, PyObject *obj) {
    const DLPackExchangeAPI *api = table_of(obj);
    if (api == NULL) return NULL;
    DLManagedTensorVersioned *managed = NULL;
    if (api->managed_tensor_from_py_object_no_sync(obj, &managed) != 0) return NULL;
    managed->deleter(managed);
    Py_RETURN_NONE;
}

/* Takes the tensor out of a versioned capsule, as a consumer does (renaming the capsule). */
static DLManagedTensorVersioned *take(PyObject *capsule) {
    DLManagedTensorVersioned *tensor = PyCapsule_GetPointer(capsule, "dltensor_versioned");
    if (tensor != NULL && PyCapsule_SetName(capsule, "used_dltensor_versioned") != 0) return NULL;
    return tensor;
}

static void *call_deleter(void *tensor) {
    ((DLManagedTensorVersioned *)tensor)->deleter(tensor);
    return NULL;
}

/* delete_without_gil(capsule): the deleter runs on another thread while nobody holds the GIL. */
static PyObject *delete_without_gil(PyObject *self, PyObject *capsule) {
    DLManagedTensorVersioned *tensor = take(capsule);
    if (tensor == NULL) return NULL;
    pthread_t thread;
    int failed;
    Py_BEGIN_ALLOW_THREADS
    failed = pthread_create(&thread, NULL, call_deleter, tensor);
    if (!failed) pthread_join(thread, NULL);
    Py_END_ALLOW_THREADS
    if (failed) return PyErr_Format(PyExc_OSError, "pthread_create failed");
    Py_RETURN_NONE;
}

/* delete_at_exit(capsule): the deleter runs from a C atexit handler, after the interpreter has
 * been finalized. */
static DLManagedTensorVersioned *at_exit[8];
static int at_exit_count;

static void delete_remaining(void) {
    for (int i = 0; i < at_exit_count; i++) at_exit[i]->deleter(at_exit[i]);
    fputs("deleters ran after finalization\n", stderr);
}

static PyObject *delete_at_exit(PyObject *self, PyObject *capsule) {
    if (at_exit_count == 8) return PyErr_Format(PyExc_RuntimeError, "too many");
    DLManagedTensorVersioned *tensor = take(capsule);
    if (tensor == NULL) return NULL;
    if (at_exit_count == 0) atexit(delete_remaining);
    at_exit[at_exit_count++] = tensor;
    Py_RETURN_NONE;
}

static void set_error(void *ctx, const char *kind, const char *message) {
    PyObject *type = strcmp(kind, "MemoryError") == 0 ? PyExc_MemoryError
                   : strcmp(kind, "ValueError") == 0 ? PyExc_ValueError : PyExc_RuntimeError;
    PyErr_Format(type, "%s", message);
    *(int *)ctx = 1;
}

/* allocate(type_obj, shape, (code, bits), (device_type, device_id)): a new producer tensor. */
static PyObject *allocate(PyObject *self, PyObject *args) {
    PyObject *like, *shape_obj;
    int code, bits, device_type, device_id;
    if (!PyArg_ParseTuple(args, "OO(ii)(ii)", &like, &shape_obj, &code, &bits, &device_type, &device_id))
        return NULL;
    const DLPackExchangeAPI *api = table_of(like);
    if (api == NULL) return NULL;
    Py_ssize_t ndim = PyTuple_Size(shape_obj);
    int64_t shape[16];
    for (Py_ssize_t i = 0; i < ndim && i < 16; i++) shape[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape_obj, i));
    DLTensor prototype = {NULL, {device_type, device_id}, (int32_t)ndim, {code, bits, 1}, shape, NULL, 0};
    DLManagedTensorVersioned *managed = NULL;
    int failed = 0;
    if (api->managed_tensor_allocator(&prototype, &managed, &failed, set_error) != 0) return NULL;
    void *out = NULL;
    if (api->managed_tensor_to_py_object_no_sync(managed, &out) != 0) return NULL;
    return (PyObject *)out;
}

/* current_stream(obj, device_type, device_id) */
static PyObject *current_stream(PyObject *self, PyObject *args) {
    PyObject *obj;
    int device_type, device_id;
    if (!PyArg_ParseTuple(args, "Oii", &obj, &device_type, &device_id)) return NULL;
    const DLPackExchangeAPI *api = table_of(obj);
    if (api == NULL) return NULL;
    void *stream = (void *)1;
    if (api->current_work_stream(device_type, device_id, &stream) != 0) return NULL;
    return PyLong_FromVoidPtr(stream);
}

/* time_describe(obj, n): nanoseconds per dltensor_from_py_object_no_sync call. */
static PyObject *time_describe(PyObject *self, PyObject *args) {
    PyObject *obj;
    long n;
    if (!PyArg_ParseTuple(args, "Ol", &obj, &n)) return NULL;
    const DLPackExchangeAPI *api = table_of(obj);
    if (api == NULL) return NULL;
    DLTensor t;
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (long i = 0; i < n; i++)
        if (api->dltensor_from_py_object_no_sync(obj, &t) != 0) return NULL;
    clock_gettime(CLOCK_MONOTONIC, &end);
    double ns = (end.tv_sec - start.tv_sec) * 1e9 + (end.tv_nsec - start.tv_nsec);
    return PyFloat_FromDouble(ns / n);
}

static PyMethodDef methods[] = {
    {"describe", describe, METH_O, NULL},
    {"round_trip", round_trip, METH_O, NULL},
    {"export_and_delete", export_and_delete, METH_O, NULL},
    {"allocate", allocate, METH_VARARGS, NULL},
    {"current_stream", current_stream, METH_VARARGS, NULL},
    {"time_describe", time_describe, METH_VARARGS, NULL},
    {"delete_without_gil", delete_without_gil, METH_O, NULL},
    {"delete_at_exit", delete_at_exit, METH_O, NULL},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "dlpack_consumer", NULL, -1, methods};

PyMODINIT_FUNC PyInit_dlpack_consumer(void) { return PyModule_Create(&module); }
