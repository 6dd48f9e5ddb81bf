//! [`CudaBackend`]: discovery, availability, selectors, one shared queue per device, and users'
//! streams: a queue on a new stream made as `StreamOptions` ask (cuda.core's `Device.create_stream`,
//! CuPy's `Stream(non_blocking, priority)`), or on another library's stream (anything with
//! `__cuda_stream__`), found on the device the stream belongs to.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use cudarc::driver::sys::CUresult;
use devbuf_core::dlpark::ffi::{DLDevice, DLDeviceType};
use devbuf_core::{
    Availability, Backend, BackendDescriptor, Claim, DeviceInfo, DlpackDeviceType, Error,
    HandleSource, MemKind, Protocol, Queue, Result, StreamOptions, StreamOwner,
};
use parking_lot::Mutex;

use crate::device;
use crate::foreign::register_own;
use crate::loader::{self, BACKEND};
use crate::memory;
use crate::protocol::{self, ProtocolStream};
use crate::queue::{CudaQueue, open_device, stream_context};
use crate::stream::Stream;

/// The CUDA backend's facts: device memory, pinned host memory and managed memory, each its own
/// DLPack device type; described by CAI (and its stream protocol). First in the default order:
/// where an NVIDIA driver is installed its GPU is the device users mean.
pub const DESCRIPTOR: BackendDescriptor = BackendDescriptor {
    name: BACKEND,
    kinds: &MemKind::ALLOCATABLE,
    dlpack_device_types: &[
        DlpackDeviceType::allocating(DLDeviceType::CUDA, MemKind::Device),
        DlpackDeviceType::allocating(DLDeviceType::CUDAHOST, MemKind::Host),
        DlpackDeviceType::allocating(DLDeviceType::CUDAMANAGED, MemKind::Shared),
    ],
    protocols: &[Protocol::Cai],
    selector_words: &[],
    makes_streams: true,
    may_be_default: true,
    default_rank: 0,
};

/// The CUDA backend: selectors `"cuda"` (device 0), `"cuda:N"` and `"cuda:GPU-<uuid>"`.
#[derive(Debug, Default, Clone, Copy)]
pub struct CudaBackend;

impl CudaBackend {
    /// The process-wide queue of device `ordinal` (created on first use, with its own stream):
    /// what [`Backend::open`] returns, and the queue foreign CUDA memory is imported with.
    pub fn shared_queue(ordinal: u32) -> Result<Arc<CudaQueue>> {
        static SHARED: OnceLock<Mutex<HashMap<u32, Arc<CudaQueue>>>> = OnceLock::new();
        let mut queues = SHARED.get_or_init(Default::default).lock();
        if let Some(queue) = queues.get(&ordinal) {
            return Ok(Arc::clone(queue));
        }
        let queue = register_own(Arc::new(CudaQueue::new(ordinal)?));
        queues.insert(ordinal, Arc::clone(&queue));
        Ok(queue)
    }
}

impl Backend for CudaBackend {
    fn descriptor(&self) -> &'static BackendDescriptor {
        &DESCRIPTOR
    }

    fn availability(&self) -> Availability {
        match loader::driver() {
            Ok(_) => Availability::Available,
            Err(reason) => Availability::Unavailable(reason.into()),
        }
    }

    fn devices(&self) -> Result<Vec<DeviceInfo>> {
        let driver = loader::loaded()?;
        (0..driver.device_count)
            .map(|ordinal| Ok(device::query(driver, ordinal)?.info))
            .collect()
    }

    fn open(&self, spec: &str) -> Result<Arc<dyn Queue>> {
        Ok(Self::shared_queue(ordinal_of(spec)?)?)
    }

    fn open_stream(&self, spec: &str, options: StreamOptions) -> Result<Arc<dyn Queue>> {
        open_stream(ordinal_of(spec)?, options)
    }

    unsafe fn adopt_stream(
        &self,
        spec: Option<&str>,
        handle: usize,
        source: HandleSource,
        owner: StreamOwner,
    ) -> Option<Result<Arc<dyn Queue>>> {
        let ordinal = match spec.map(ordinal_of).transpose() {
            Ok(ordinal) => ordinal,
            Err(err) => return Some(Err(err)),
        };
        let handle = match source {
            HandleSource::StreamProtocol => protocol::stream_protocol_handle(handle),
            HandleSource::Bare => handle,
        };
        // SAFETY: the caller's promise (the stream protocol's 0 and the legacy default stream's
        // handle name one stream).
        Some(unsafe { adopt_stream(ordinal, handle, owner) })
    }

    fn queue_for_dlpack_device(&self, device: DLDevice) -> Option<Result<Arc<dyn Queue>>> {
        let ordinal = match device.device_type {
            DLDeviceType::CUDA => device.device_id,
            // Pinned and managed memory is reachable from every device; DLPack names none.
            DLDeviceType::CUDAHOST | DLDeviceType::CUDAMANAGED => 0,
            _ => return None,
        };
        Some(match u32::try_from(ordinal) {
            Ok(ordinal) => Self::shared_queue(ordinal).map(|queue| queue as Arc<dyn Queue>),
            Err(_) => Err(Error::DeviceNotFound {
                selector: format!("DLPack device (kDLCUDA, {ordinal})"),
                reason: "a CUDA device id is never negative".into(),
            }),
        })
    }

    /// Memory the driver knows; a pointer of another context than the device's primary one is
    /// recognised and refused ([`queue_for_pointer`]). One driver call.
    fn claim_pointer(&self, _protocol: Protocol, ptr: usize) -> Claim<Arc<dyn Queue>> {
        match facts(ptr) {
            Ok(Some(facts)) => {
                Claim::Recognised(queue_for_facts(ptr, &facts).map(|queue| queue as Arc<dyn Queue>))
            }
            Ok(None) => Claim::Unrecognised(Error::invalid(
                "data",
                format!("{ptr:#x} is not CUDA memory (the driver does not know the pointer)"),
            )),
            Err(err) => Claim::Unrecognised(err),
        }
    }
}

/// What the driver says `ptr` is, for importing foreign memory (CAI, DLPack): the ordinal of its
/// device (for pinned and managed memory, the device current when it was allocated) and its kind;
/// `Ok(None)` for memory CUDA does not know, such as pageable host memory.
pub fn classify(ptr: usize) -> Result<Option<(u32, MemKind)>> {
    Ok(facts(ptr)?.map(|facts| (facts.ordinal, facts.kind)))
}

/// [`classify`], with the pointer's allocation and context: one driver call.
fn facts(ptr: usize) -> Result<Option<memory::PointerFacts>> {
    let driver = loader::loaded()?;
    // Pointer attributes are process-wide under unified addressing and the ones asked for need no
    // current context, so classifying memory opens no device: importing device 1's memory never
    // depends on device 0.
    match memory::pointer_facts(ptr) {
        // A driver that wants a context anyway: the first device that can be opened will do.
        Err(err) if err.is(CUresult::CUDA_ERROR_INVALID_CONTEXT) => (0..driver.device_count)
            .find_map(|ordinal| CudaBackend::shared_queue(ordinal).ok())
            .map_or(Err(err.into()), |queue| {
                let _current = queue.context().enter()?;
                Ok(memory::pointer_facts(ptr)?)
            }),
        found => Ok(found?),
    }
}

/// The queue to import foreign memory at `ptr` with, and the memory's kind: the shared queue of
/// the device the memory belongs to (its device ordinal, not its context, says which). `Ok(None)`
/// for memory CUDA does not know. Device memory of a context other than the device's primary one
/// (PyCUDA's, say) is refused: devbuf's queues work in primary contexts, and that memory is not
/// theirs to fill or to order work on. Stream-ordered memory (`cuMemAllocAsync`, memory pools:
/// devbuf's own, cuda.core's, CuPy's, RMM's, PyTorch's) belongs to no context: its
/// `CU_POINTER_ATTRIBUTE_CONTEXT` is NULL (CUDA Programming Guide, "Stream Ordered Memory
/// Allocator"), which is no foreign context.
pub fn queue_for_pointer(ptr: usize) -> Result<Option<(Arc<CudaQueue>, MemKind)>> {
    let Some(facts) = facts(ptr)? else {
        return Ok(None);
    };
    Ok(Some((queue_for_facts(ptr, &facts)?, facts.kind)))
}

/// [`queue_for_pointer`] for memory at `ptr` that the driver described as `facts`.
fn queue_for_facts(ptr: usize, facts: &memory::PointerFacts) -> Result<Arc<CudaQueue>> {
    let queue = CudaBackend::shared_queue(facts.ordinal)?;
    let foreign_context = !facts.context.is_null() && facts.context != queue.context().raw();
    if facts.kind == MemKind::Device && foreign_context {
        return Err(Error::Unsupported {
            device: queue.device().selector.clone(),
            what: format!("importing device memory at {ptr:#x}"),
            reason: "it belongs to a CUDA context other than the device's primary context, and \
                     devbuf's queues work in primary contexts (the ones CuPy, PyTorch and Numba use)"
                .into(),
        });
    }
    Ok(queue)
}

/// The default device's shared queue for tests and examples; the error says why CUDA cannot be
/// used here.
pub fn default_queue() -> Result<Arc<dyn Queue>, String> {
    CudaBackend.open("").map_err(|err| err.to_string())
}

/// A queue on device `ordinal` with a stream of its own, made as `options` ask, in the device's
/// primary context (so it reaches the memory of every other queue of the device).
pub(crate) fn open_stream(ordinal: u32, options: StreamOptions) -> Result<Arc<dyn Queue>> {
    let (caps, context) = open_device(ordinal)?;
    let stream = Stream::create_with(&context, options)?;
    Ok(register_own(Arc::new(CudaQueue::with(caps, stream))))
}

/// A queue on `handle`, another library's stream kept alive by `owner`, on device `ordinal`, or,
/// for `None`, on the device whose primary context the stream belongs to.
///
/// # Safety
/// `handle` names a live stream for as long as `owner` is alive.
pub(crate) unsafe fn adopt_stream(
    ordinal: Option<u32>,
    handle: usize,
    owner: StreamOwner,
) -> Result<Arc<dyn Queue>> {
    let ordinal = match ordinal {
        Some(ordinal) => ordinal,
        None => device_of_stream(handle)?,
    };
    // SAFETY: the caller's promise; the queue holds `owner` as long as it uses the stream.
    let queue = unsafe { CudaQueue::with_borrowed_stream(ordinal, handle, Some(owner))? };
    Ok(register_own(Arc::new(queue)))
}

/// The device whose primary context `handle` belongs to (device 0 for the legacy default stream,
/// which names no device of its own).
fn device_of_stream(handle: usize) -> Result<u32> {
    if matches!(ProtocolStream::from_handle(handle)?, ProtocolStream::Legacy) {
        return Ok(0);
    }
    let devices = loader::loaded()?.device_count;
    for ordinal in 0..devices {
        let queue = CudaBackend::shared_queue(ordinal)?;
        if stream_context(queue.context(), handle)? == queue.context().raw() {
            return Ok(ordinal);
        }
    }
    Err(Error::invalid(
        "stream",
        format!(
            "{handle:#x} belongs to no {BACKEND} device's primary context (devbuf's queues work \
             in primary contexts, as CuPy's, PyTorch's and cuda.core's do)"
        ),
    ))
}

/// The device ordinal a selector's spec names ("" is device 0, "GPU-…" the device with that
/// UUID, as `CUDA_VISIBLE_DEVICES` names devices), as [`CudaBackend`] opens it.
pub(crate) fn ordinal_of(spec: &str) -> Result<u32> {
    // Parsed by characters: a selector is any Unicode the caller typed ("cuda:GP€x").
    let uuid_prefix = spec
        .get(..4)
        .is_some_and(|prefix| prefix.eq_ignore_ascii_case("GPU-"));
    if uuid_prefix && spec.len() > 4 {
        let driver = loader::loaded()?;
        return device::ordinal_with_uuid(driver, spec)?.ok_or_else(|| Error::DeviceNotFound {
            selector: format!("{BACKEND}:{spec}"),
            reason: format!(
                "none of the {} CUDA device(s) this process sees has UUID {spec} (the device may \
                 be hidden by CUDA_VISIBLE_DEVICES={:?})",
                driver.device_count,
                std::env::var("CUDA_VISIBLE_DEVICES").unwrap_or_else(|_| "<unset>".into())
            ),
        });
    }
    match spec {
        "" => Ok(0),
        spec => spec.parse().map_err(|_| Error::DeviceNotFound {
            selector: format!("{BACKEND}:{spec}"),
            reason: "a CUDA selector is \"cuda\", \"cuda:N\" with N a device ordinal, or \
                     \"cuda:GPU-<uuid>\""
                .into(),
        }),
    }
}
