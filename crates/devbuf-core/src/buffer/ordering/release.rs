//! An allocation's release when its last view goes ([`release`]): after the work recorded on it,
//! to the queue or resource it came from ([`crate::ordering::release_to_queue`] for a queue), or
//! its owner let go for foreign memory. Memory whose wait fails is leaked: freeing it would be
//! worse.

use std::ptr::NonNull;
use std::sync::{Arc, OnceLock, mpsc};

use crate::Queue;
use crate::blocking::blocking;
use crate::buffer::allocation::{Allocation, PendingWork, Release, exported, let_go};
use crate::mr::FreeAfter;
use crate::ordering::release_to_queue;

impl Drop for Allocation {
    #[inline]
    fn drop(&mut self) {
        release(self);
    }
}

/// Releases `alloc`'s memory, its last view gone: after the work recorded on it and, once it was
/// handed out, other libraries' work on the queues it was handed out on (as every access sees it:
/// [`crate::Buffer::order_access`]); foreign memory's owner goes instead. The producer of
/// imported memory is not waited for: its work is its own business, and letting go of its memory
/// does not free it under that work.
fn release(alloc: &mut Allocation) {
    let list = alloc.pending.list.get_mut();
    let pending = std::mem::take(&mut list.work);
    let handed_out = list.take_handed_out();
    let exported = *alloc.exported.get_mut() != exported::NO;
    if runs_on_the_release_thread(&alloc.release, exported, &pending, &handed_out) {
        let queue = Arc::clone(alloc.release.queue());
        let release = std::mem::replace(
            &mut alloc.release,
            Release::Foreign {
                queue,
                owner: None,
                size: 0,
            },
        );
        let (kind, base) = (alloc.kind, alloc.base);
        RELEASE_THREAD.send(Box::new(move || {
            let mut release = release;
            settle(
                &mut release,
                kind,
                base,
                pending,
                handed_out,
                exported,
                true,
            );
        }));
        return;
    }
    // Nothing recorded and never handed out: straight back, without the runtime (hot).
    if pending.is_empty() && !exported {
        return settle(
            &mut alloc.release,
            alloc.kind,
            alloc.base,
            pending,
            handed_out,
            false,
            false,
        );
    }
    // Ordering the release submits to the runtime, which may block there: a SYCL runtime's
    // submission waits for its scheduler, which another thread may hold while it waits for a host
    // task that needs the embedding language's lock (dpnp's take the GIL). So it runs as a wait.
    blocking(|| {
        settle(
            &mut alloc.release,
            alloc.kind,
            alloc.base,
            pending,
            handed_out,
            exported,
            false,
        )
    });
}

/// A release that waits on the host, run off the thread that let go of the memory.
type Job = Box<dyn FnOnce() + Send>;

/// devbuf's release thread ([`runs_on_the_release_thread`]): started at its first release, it
/// runs them in turn.
struct ReleaseThread(OnceLock<Option<mpsc::Sender<Job>>>);

static RELEASE_THREAD: ReleaseThread = ReleaseThread(OnceLock::new());

impl ReleaseThread {
    fn send(&self, job: Job) {
        let sender = self.0.get_or_init(|| {
            let (sender, jobs) = mpsc::channel::<Job>();
            std::thread::Builder::new()
                .name("devbuf-release".into())
                .spawn(move || jobs.into_iter().for_each(|job| job()))
                .ok()?;
            Some(sender)
        });
        // Without the thread the job is dropped and the memory leaked: better than freeing it
        // under work that may still write it.
        if let Some(sender) = sender {
            let _ = sender.send(job);
        }
    }
}

/// Blocks until the releases sent to devbuf's release thread so far have run.
#[cfg(test)]
pub(crate) fn wait_for_release_thread() {
    let (done, ran) = mpsc::channel();
    RELEASE_THREAD.send(Box::new(move || {
        let _ = done.send(());
    }));
    ran.recv().expect("devbuf's release thread runs");
}

/// Whether the release runs on devbuf's release thread rather than on the thread that let go of
/// the memory: where the runtime's device wait does not cover every queue
/// ([`crate::Interop::wait_device_covers_every_queue`] is false: SYCL), the release may run inside
/// another library's host task (dpnp's keep-alive tasks let go of the arrays, and so of the
/// memory, there), where waiting for work the scheduler holds behind that very task never ends
/// (found by the ordering machine: a foreign release's wait, inside dpnp's task). So a release
/// that waits goes to the release thread:
/// - memory devbuf allocated and handed out, whose free is left to the runtime's own: that free
///   waits only for the commands the runtime has been given, not for work the scheduler still
///   holds behind a host task (on the queues the memory was handed out on, or devbuf's own,
///   which follow barriers on those queues), so the thread waits for all the work devbuf can see
///   first. (Work on the memory's own queue was once left to the free: a random machine run under
///   load then crashed in a copy on devbuf's command queue, run after the free.)
/// - foreign memory with work of devbuf's or other libraries' to wait for before its owner goes.
fn runs_on_the_release_thread(
    release: &Release,
    exported: bool,
    pending: &[PendingWork],
    handed_out: &[Arc<dyn Queue>],
) -> bool {
    let waits = !handed_out.is_empty() || pending.iter().any(|work| work.queue.is_some());
    waits
        && (exported || matches!(release, Release::Foreign { .. }))
        && !release.queue().interop().wait_device_covers_every_queue()
}

/// Frees memory of `release` after `pending` and other libraries' work on the queues it was
/// `handed_out` on, which the host waits for first where `wait_on_host` ([`release`]).
fn settle(
    release: &mut Release,
    kind: crate::MemKind,
    base: usize,
    mut pending: Vec<PendingWork>,
    handed_out: Vec<Arc<dyn Queue>>,
    exported: bool,
    wait_on_host: bool,
) {
    for queue in handed_out {
        match queue.interop().foreign_work_event() {
            Ok(Some(event)) => pending.push(PendingWork {
                queue: Some(queue),
                event,
                sources: Vec::new(),
            }),
            Ok(None) => {}
            // Unordered, the memory may still be written: leaked rather than freed.
            Err(_) => return std::mem::forget(release.take_owner()),
        }
    }
    // Unordered, the memory may still be written: leaked rather than freed.
    if wait_on_host
        && !pending
            .iter()
            .filter(|work| work.queue.is_some())
            .all(|work| work.event.wait().is_ok())
    {
        return;
    }
    let ptr = NonNull::new(base as *mut u8);
    // The common case, kept short: memory devbuf allocated, never handed out, with no work
    // recorded on it goes straight back.
    if pending.is_empty() && !exported {
        match (release, ptr) {
            // Foreign memory with no work of ours on it: its owner goes now.
            (Release::Foreign { owner, .. }, _) => {
                if let Some(owner) = owner.take() {
                    let_go(owner);
                }
            }
            (Release::Queue { queue, size, align }, Some(ptr)) => {
                // SAFETY: this allocation came from `queue.allocate(kind, size, align)`, is
                // released once, and no work of ours is running on it.
                unsafe { queue.deallocate(ptr, kind, *size, *align) };
            }
            (
                Release::Resource {
                    resource,
                    size,
                    align,
                },
                Some(ptr),
            ) => {
                // SAFETY: this allocation came from `resource.allocate(kind, size, align)`, is
                // released once, and nothing may still use it.
                unsafe { resource.deallocate(ptr, kind, *size, *align, FreeAfter::Now) };
            }
            _ => {}
        }
        return;
    }
    match (release, ptr) {
        (Release::Queue { queue, size, align }, Some(ptr)) => {
            let (size, align) = (*size, *align);
            let Some(after) = release_point(queue, &pending, exported) else {
                return;
            };
            // SAFETY: this allocation came from `queue.allocate(kind, size, align)`, is released
            // once, and the work on it is ordered before `after`.
            unsafe { release_to_queue(queue, ptr, kind, size, align, after) };
        }
        (
            Release::Resource {
                resource,
                size,
                align,
            },
            Some(ptr),
        ) => {
            let Some(after) = release_point(resource.queue(), &pending, exported) else {
                return;
            };
            // SAFETY: this allocation came from `resource.allocate(kind, size, align)`, is
            // released once, and other queues' work was ordered before `after`.
            unsafe { resource.deallocate(ptr, kind, *size, *align, after) };
        }
        (Release::Foreign { queue, owner, .. }, _) => {
            // Foreign memory has no ordered release: block until devbuf's work on it is done,
            // and, when devbuf handed it on to another library, until the device is idle where
            // that covers the queues other libraries use.
            let wait_device = exported && queue.interop().wait_device_covers_every_queue();
            let ours = || {
                pending
                    .iter()
                    .filter(|w| w.queue.is_some())
                    .all(|w| w.event.wait().is_ok())
                    && (!wait_device || queue.wait_device().is_ok())
            };
            // On the release thread the work was waited for already.
            let done = wait_on_host
                || (pending.iter().all(|w| w.queue.is_none()) && !wait_device)
                || blocking(ours);
            match owner.take() {
                Some(owner) if done => let_go(owner),
                owner => std::mem::forget(owner),
            }
        }
        // Empty memory devbuf made: nothing to free.
        _ => {}
    }
}

/// Orders the release of memory of `queue`: makes it wait for other queues' work, and returns
/// when the memory may be handed out again. Other libraries' work on exported memory is ordered
/// with nothing of ours: the whole device is waited for (blocking) where that covers every queue
/// they may use; elsewhere the memory is for the runtime's own free alone
/// ([`FreeAfter::ForeignWork`]). `None` when a wait failed: the memory may still be in use and
/// must be leaked.
fn release_point(
    queue: &Arc<dyn Queue>,
    pending: &[PendingWork],
    exported: bool,
) -> Option<FreeAfter> {
    let foreign = exported && !queue.interop().wait_device_covers_every_queue();
    if exported && !foreign && blocking(|| queue.wait_device()).is_err() {
        return None;
    }
    if pending.is_empty() {
        return Some(if foreign {
            FreeAfter::ForeignWork
        } else {
            FreeAfter::Now
        });
    }
    for work in pending.iter().filter(|w| !w.on(queue)) {
        if queue.wait_event(&work.event).is_err() && blocking(|| work.event.wait()).is_err() {
            return None;
        }
    }
    if foreign {
        // The runtime frees it after the queue's work, which now follows all of ours.
        return Some(FreeAfter::ForeignWork);
    }
    // Work on the queue alone: its latest event already marks the end of it.
    if let [only] = pending
        && only.on(queue)
    {
        return Some(FreeAfter::Event(only.event.clone()));
    }
    match queue.record_event() {
        Ok(after) => Some(FreeAfter::Event(after)),
        Err(_) => blocking(|| queue.wait()).is_ok().then_some(FreeAfter::Now),
    }
}
