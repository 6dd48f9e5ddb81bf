"""devbuf in Dask: serializers for ``distributed`` and ``sizeof`` for ``dask``.

Registered by devbuf itself when ``dask.sizeof`` / ``distributed.protocol`` is imported (see
``devbuf._integrations``); neither is imported by ``import devbuf``. The serializer is devbuf's
pickle protocol 5: the small pickled state travels in the header, and the frames are the buffers
themselves (host-accessible memory is not copied on the sending side; device memory is copied
to the host once). The receiving side views the frames where they land in host memory.
"""

import pickle

from ._devbuf import Array


def _serialize(x):
    frames = []
    state = pickle.dumps(x, protocol=5, buffer_callback=frames.append)
    frames = [frame.raw() for frame in frames]
    return {"devbuf-pickle": state, "writeable": [not x.readonly] * len(frames)}, frames


def _deserialize(header, frames):
    # A frame that arrives read-only (some decompressors return bytes) is copied when the sender's
    # memory was writable, as distributed does for NumPy arrays.
    frames = [
        bytearray(frame) if writeable and memoryview(frame).readonly else frame
        for frame, writeable in zip(frames, header["writeable"])
    ]
    return pickle.loads(header["devbuf-pickle"], buffers=frames)


def register_serializers():
    """Registers devbuf's ``dask_serialize``/``dask_deserialize`` pair (idempotent)."""
    from distributed.protocol import dask_deserialize, dask_serialize

    # Dispatch follows the class hierarchy: Array covers Buffer.
    dask_serialize.register(Array)(_serialize)
    dask_deserialize.register(Array)(_deserialize)


def _sizeof(x):
    # What pickling sends: the whole buffer an array views.
    return x.buffer.nbytes


def register_sizeof(sizeof=None):
    """Registers ``dask.sizeof`` for devbuf arrays and buffers (idempotent)."""
    if sizeof is None:
        from dask.sizeof import sizeof
    sizeof.register(Array)(_sizeof)
