"""devbuf in Ray: a serializer registered through ``ray.util.register_serializer``.

Registered by devbuf itself when ``ray`` is imported (see ``devbuf._integrations``); ``import
devbuf`` does not import Ray. The serialized form is devbuf's pickle protocol 5 state with the
buffer as a ``PickleBuffer``, which Ray stores out-of-band in its object store (no copy of
host-accessible memory on the sending side). Objects from ``ray.get`` view the object store's
memory, read-only, like NumPy arrays do; copy them to write (``devbuf.asarray(x, copy=True)``).
"""

from ._devbuf import Array, Buffer


def _serialize(x):
    rebuild, arguments = x.__reduce_ex__(5)
    return arguments


def _deserialize(arguments):
    from ._devbuf import _rebuild

    return _rebuild(*arguments)


def register_serializers():
    """Registers devbuf's Ray serializer for Array and Buffer (idempotent)."""
    import ray.util

    # Ray dispatches on the exact type.
    for cls in (Array, Buffer):
        ray.util.register_serializer(cls, serializer=_serialize, deserializer=_deserialize)
