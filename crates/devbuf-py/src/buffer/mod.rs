//! `Buffer`'s Python methods and `devbuf.alloc` (what a Buffer holds is `crate::objects::array`):
//! `methods`, RMM's `DeviceBuffer` calls (`rmm`), shared-memory hints (`hints`) and sharing with
//! other processes (`ipc`: `Buffer.ipc_handle`, `IpcHandle`, `devbuf.open_ipc`).

pub(crate) mod hints;
pub(crate) mod ipc;
pub(crate) mod methods;
pub(crate) mod rmm;
