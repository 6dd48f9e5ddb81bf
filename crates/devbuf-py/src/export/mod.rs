//! The export side of every protocol, for `Array` (and so `Buffer`).

pub(crate) mod dlpack;
pub(crate) mod dlpack_exchange_api;
pub(crate) mod dlpack_vectorcall;
pub(crate) mod dpctl_attrs;
pub(crate) mod ordering;
