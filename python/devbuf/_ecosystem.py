"""Where the libraries devbuf hands memory to keep their own default queue for a device.

dpnp puts every array it makes by default on dpctl's cached queue for the device
(``dpctl.get_device_cached_queue``) and mixes only arrays on one queue (compute follows data). So
devbuf hands out the memory of a SYCL device's default queue on that very queue: the extension asks
here, once per device, when it makes the device's default queue (docs/architecture.md, "Where
memory is handed out").
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
