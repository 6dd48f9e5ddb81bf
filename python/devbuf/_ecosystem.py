"""What the libraries devbuf hands SYCL memory to keep for themselves, which devbuf follows.

dpnp puts every array it makes by default on dpctl's cached queue for the device
(``dpctl.get_device_cached_queue``) and mixes only arrays on one queue (compute follows data). So
devbuf hands out the memory of a SYCL device's default queue on that very queue: the extension asks
here, once per device, when it makes the device's default queue. dpctl's queues run out of order,
and dpnp orders its work on one by dpctl's record of the queue's events: devbuf's commands on memory
handed out there join that record. (docs/architecture.md, "Where memory is handed out".)
"""

import warnings

#: The protocol whose consumers keep a cached queue per device, by the name devbuf gives it.
_SUAI = "__sycl_usm_array_interface__"


def default_queue(protocol: str, native_selector: str):
    """The queue the consumers of ``protocol`` use by default for the device ``native_selector``
    names in their own terms (a dpctl filter string), or ``None`` where they keep none."""
    if protocol != _SUAI:
        return None
    try:
        import dpctl
    except ImportError:
        return None
    try:
        return dpctl.get_device_cached_queue(dpctl.SyclDevice(native_selector))
    except Exception as err:  # noqa: BLE001 -- any failure leaves devbuf on a queue of its own
        warnings.warn(
            f"devbuf: dpctl's default queue for {native_selector!r} could not be found ({err}); "
            "devbuf's memory on that device is handed out on a queue of its own, which dpnp's "
            "arrays are not on",
            RuntimeWarning,
            stacklevel=2,
        )
        return None


def order_next_work_after(protocol: str, queue, event) -> bool:
    """Makes the next work dpnp and dpnp.tensor submit on ``queue`` (a "SyclQueueRef" capsule)
    follow ``event`` (a "SyclEventRef" capsule), devbuf's command on memory handed out there: they
    submit by dpctl's record of each queue's events (``SequentialOrderManager``), which it joins.
    Whether it could."""
    if protocol != _SUAI:
        return False
    import dpctl
    from dpctl.utils import SequentialOrderManager

    done = dpctl.SyclEvent(event)
    SequentialOrderManager[dpctl.SyclQueue(queue)].add_event_pair(done, done)
    return True
