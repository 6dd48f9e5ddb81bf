//! [`Adaptor`]: what every resource that wraps another shares, written once.

use std::any::Any;
use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

use super::graph::Descent;
use super::{FreeAfter, MemoryResource};
use crate::debug_log::{self, LogLevel, debug_log};
use crate::{MemKind, Queue, Result};

/// A resource that wraps another, its upstream (RMM's adaptors). Implementing it makes the type a
/// [`MemoryResource`] on upstream's queue whose allocations pass through to upstream, with the
/// adaptor's bookkeeping in the hooks around them; an adaptor that serves memory itself, as
/// [`super::PoolResource`] does from its blocks, overrides [`Adaptor::serve`] and
/// [`Adaptor::take_back`] instead.
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicUsize, Ordering};
///
/// use devbuf_core::mr::{Adaptor, MemoryResource, QueueResource};
/// use devbuf_core::{Backend, Buffer, HostBackend, MemKind};
///
/// /// Counts the allocations upstream made through it.
/// #[derive(Debug)]
/// struct Counting {
///     upstream: Arc<dyn MemoryResource>,
///     count: AtomicUsize,
/// }
///
/// impl Adaptor for Counting {
///     fn upstream(&self) -> &Arc<dyn MemoryResource> {
///         &self.upstream
///     }
///
///     fn allocated(&self, ptr: Option<std::ptr::NonNull<u8>>, _kind: MemKind, _size: usize, _align: usize) {
///         if ptr.is_some() {
///             self.count.fetch_add(1, Ordering::Relaxed);
///         }
///     }
/// }
///
/// let upstream = QueueResource::new(HostBackend.open("")?);
/// let counting = Arc::new(Counting { upstream, count: AtomicUsize::new(0) });
/// let resource: Arc<dyn MemoryResource> = counting.clone();
/// drop(Buffer::alloc_from(&resource, MemKind::Host, 64, 64)?);
/// assert_eq!(counting.count.load(Ordering::Relaxed), 1);
/// # Ok::<(), devbuf_core::Error>(())
/// ```
pub trait Adaptor: Send + Sync + fmt::Debug + 'static {
    /// The wrapped resource, whose queue the adaptor's memory belongs to.
    fn upstream(&self) -> &Arc<dyn MemoryResource>;

    /// [`MemoryResource::serves`]: upstream's answer, unless the adaptor decides the kind itself.
    fn serves(&self, asked: MemKind, size: usize, align: usize) -> MemKind {
        self.upstream().serves(asked, size, align)
    }

    /// Resources besides [`Adaptor::upstream`] that it allocates from (a binning resource's
    /// bins), for [`MemoryResource::upstreams`].
    fn also_allocates_from(&self) -> Vec<Arc<dyn MemoryResource>> {
        Vec::new()
    }

    /// Before upstream allocates `size` bytes of `kind` aligned to `align`: an error refuses the
    /// allocation, and upstream is not asked.
    fn admit(&self, _kind: MemKind, _size: usize, _align: usize) -> Result<()> {
        Ok(())
    }

    /// After upstream was asked for an allocation [`Adaptor::admit`] let through: the memory, or
    /// `None` when upstream failed.
    fn allocated(&self, _ptr: Option<NonNull<u8>>, _kind: MemKind, _size: usize, _align: usize) {}

    /// Before memory goes back upstream (upstream may hand the address out again at once), with
    /// what may still use it ([`FreeAfter`]: the event of the work on the resource's queue).
    fn freeing(
        &self,
        _ptr: NonNull<u8>,
        _kind: MemKind,
        _size: usize,
        _align: usize,
        _after: &FreeAfter,
    ) {
    }

    /// After memory went back upstream.
    fn freed(&self, _ptr: NonNull<u8>, _kind: MemKind, _size: usize, _align: usize) {}

    /// [`MemoryResource::allocate`]: upstream's memory, between the allocation hooks.
    fn serve(&self, kind: MemKind, size: usize, align: usize) -> Result<NonNull<u8>> {
        self.admit(kind, size, align)?;
        let allocated = self.upstream().allocate(kind, size, align);
        self.allocated(allocated.as_ref().ok().copied(), kind, size, align);
        allocated
    }

    /// [`MemoryResource::deallocate`]: the memory back upstream, between the freeing hooks.
    ///
    /// # Safety
    /// As [`MemoryResource::deallocate`]'s.
    unsafe fn take_back(
        &self,
        ptr: NonNull<u8>,
        kind: MemKind,
        size: usize,
        align: usize,
        after: FreeAfter,
    ) {
        self.freeing(ptr, kind, size, align, &after);
        // SAFETY: forwarded from our caller, who got `ptr` from our `allocate`, i.e. upstream's.
        unsafe { self.upstream().deallocate(ptr, kind, size, align, after) };
        self.freed(ptr, kind, size, align);
    }
}

impl<A: Adaptor> MemoryResource for A {
    fn queue(&self) -> &Arc<dyn Queue> {
        self.upstream().queue()
    }

    #[inline]
    fn allocate(&self, kind: MemKind, size: usize, align: usize) -> Result<NonNull<u8>> {
        // Counted on the thread: a stack that escaped the graph checks ends in an error, not in a
        // stack overflow.
        let _descent = Descent::enter()?;
        let allocated = self.serve(kind, size, align);
        if debug_log::should_log(LogLevel::Trace) {
            let (name, device) = (short_name::<A>(), &self.queue().device().selector);
            match &allocated {
                Ok(ptr) => debug_log::write(
                    LogLevel::Trace,
                    format_args!("[A][{name}][{device}][{kind}][{size}B][{ptr:?}]"),
                ),
                Err(err) => debug_log::write(
                    LogLevel::Trace,
                    format_args!("[A][{name}][{device}][{kind}][{size}B][FAILURE {err}]"),
                ),
            }
        }
        allocated
    }

    #[inline]
    unsafe fn deallocate(
        &self,
        ptr: NonNull<u8>,
        kind: MemKind,
        size: usize,
        align: usize,
        after: FreeAfter,
    ) {
        debug_log!(
            LogLevel::Trace,
            "[D][{}][{}][{kind}][{size}B][{ptr:?}]",
            short_name::<A>(),
            self.queue().device().selector
        );
        // SAFETY: the same contract.
        unsafe { self.take_back(ptr, kind, size, align, after) }
    }

    fn upstreams(&self) -> Vec<Arc<dyn MemoryResource>> {
        let mut upstreams = vec![Arc::clone(self.upstream())];
        upstreams.extend(self.also_allocates_from());
        upstreams
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn serves(&self, asked: MemKind, size: usize, align: usize) -> MemKind {
        Adaptor::serves(self, asked, size, align)
    }
}

/// An adaptor's type without its path or parameters, for the debug log ("PoolResource").
fn short_name<A>() -> &'static str {
    let name = std::any::type_name::<A>();
    let name = name.split('<').next().unwrap_or(name);
    name.rsplit("::").next().unwrap_or(name)
}
