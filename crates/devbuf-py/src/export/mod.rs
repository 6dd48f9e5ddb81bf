//! The export side of every protocol, for `Array` (and so `Buffer`): the interface dicts
//! (`__sycl_usm_array_interface__`, `__cuda_array_interface__`), DLPack (`__dlpack__`,
//! `__dlpack_device__` and the C exchange API on the type), the buffer protocol, the attributes of
//! dpctl's arrays, and how each export is ordered for its consumer.

pub(crate) mod buffer_protocol;
pub(crate) mod dlpack;
pub(crate) mod dpctl_attrs;
pub(crate) mod interface_dicts;
pub(crate) mod ordering;
