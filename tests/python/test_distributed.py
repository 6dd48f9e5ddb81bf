"""Dask distributed and Ray, for real: a LocalCluster with two worker processes and a two-CPU Ray
runtime. devbuf buffers and typed arrays of each kind are sent to workers, read there with NumPy
by a task that returns a devbuf result, and fetched back; the bytes are compared."""

import subprocess
import sys

import numpy as np
import pytest

import devbuf
from conftest import usable_kinds


def kinds_here():
    return usable_kinds(devbuf.default_device())


def payloads():
    """One buffer and one strided typed array of each kind on the default device."""
    items = []
    for kind in kinds_here():
        buffer = devbuf.alloc(4096, kind)
        buffer.copy_from(np.arange(1024, dtype=np.float32))
        items.append(buffer)
        items.append(buffer.view("float32", shape=(16, 8), strides=(64, 4), offset=32))
    return items


def as_numpy(x):
    """What a worker reads: the memory itself where the host can, else a host copy."""
    try:
        return np.asarray(memoryview(x))
    except BufferError:
        flat = np.frombuffer(x.buffer.to_bytes(), dtype=np.uint8)
        return np.lib.stride_tricks.as_strided(
            flat[x.offset :].view(x.typestr), shape=x.shape, strides=x.strides
        )


def doubled(x):
    """The worker's task: reads `x` with NumPy, returns a devbuf result on the same kind."""
    import numpy as np

    import devbuf

    values = np.ascontiguousarray(as_numpy(x)) * 2
    result = devbuf.alloc(values.nbytes, x.kind, device=x.device)
    result.copy_from(values.view(np.uint8).reshape(-1))
    return result if values.dtype == np.uint8 else result.view(str(values.dtype), shape=values.shape)


def expected(x):
    return (np.ascontiguousarray(as_numpy(x)) * 2).tobytes()


def ship_this_module_by_value(cloudpickle):
    """Workers cannot import this test module: send its functions by value."""
    cloudpickle.register_pickle_by_value(sys.modules[__name__])


def test_import_devbuf_imports_neither_dask_nor_ray():
    code = "import sys, devbuf; print(sorted(m for m in ('dask', 'distributed', 'ray') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.fixture(scope="module")
def dask_client():
    distributed = pytest.importorskip("distributed", reason="distributed is not installed (pip install devbuf[dask])")
    cluster = distributed.LocalCluster(
        n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None, worker_dashboard_address=None
    )
    client = distributed.Client(cluster)
    import cloudpickle

    ship_this_module_by_value(cloudpickle)
    yield client
    client.close()
    cluster.close()


def test_dask_serializers_are_registered_and_send_the_buffers_as_frames():
    pytest.importorskip("distributed", reason="distributed is not installed (pip install devbuf[dask])")
    from dask.sizeof import sizeof
    from distributed.protocol import deserialize, serialize

    buffer = devbuf.alloc(1 << 16, "host", device="host")
    header, frames = serialize(buffer, serializers=("dask",))
    assert header["serializer"] == "dask"
    assert len(frames) == 1 and np.frombuffer(frames[0], np.uint8).ctypes.data == buffer.ptr
    back = deserialize(header, frames)
    assert back.to_bytes() == buffer.to_bytes()
    assert sizeof(buffer) == 1 << 16 and sizeof(buffer.view("float64")) == 1 << 16


def test_dask_scatter_compute_and_gather(dask_client):
    items = payloads()
    futures = dask_client.scatter(items, broadcast=False)
    results = dask_client.gather(dask_client.map(doubled, futures, pure=False))
    assert len(results) == len(items)
    for item, result in zip(items, results):
        assert isinstance(result, devbuf.Array)
        assert result.kind == item.kind and result.device == item.device
        assert result.to_bytes() == expected(item)
    # Round trip without a task: the data comes back unchanged.
    back = dask_client.gather(dask_client.scatter(items))
    for item, copy in zip(items, back):
        assert (copy.shape, copy.strides, copy.offset, copy.kind) == (item.shape, item.strides, item.offset, item.kind)
        assert copy.buffer.to_bytes() == item.buffer.to_bytes()


@pytest.fixture(scope="module")
def ray_runtime():
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install devbuf[ray])")
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        object_store_memory=200 * 1024 * 1024,
        configure_logging=False,
    )
    ship_this_module_by_value(ray.cloudpickle)
    yield ray
    ray.shutdown()


def test_ray_put_get_and_a_remote_task(ray_runtime):
    ray = ray_runtime
    assert devbuf.Buffer in ray.cloudpickle.CloudPickler.dispatch  # registered on import of ray
    remote_doubled = ray.remote(doubled)
    items = payloads()
    refs = [ray.put(item) for item in items]
    for item, ref in zip(items, refs):
        copy = ray.get(ref)
        assert type(copy) is type(item) and copy.kind == item.kind
        assert copy.buffer.to_bytes() == item.buffer.to_bytes()
    results = ray.get([remote_doubled.remote(ref) for ref in refs])
    for item, result in zip(items, results):
        assert result.kind == item.kind and result.to_bytes() == expected(item)
