//! Every call devbuf makes into the SYCL scheduler (a command, a barrier, a wait) runs through the
//! blocking hook, which Python's layer uses to release the GIL: a submission waits for the
//! scheduler's lock, which another thread may hold while it waits for a dpnp host task that needs
//! the GIL (a deadlock the ordering machine found; docs/architecture.md, "Blocking calls and the
//! GIL"). Its own test binary: the hook is the process's.

use std::cell::Cell;
use std::sync::Arc;

use devbuf_core::{Buffer, MemKind, Queue};
use devbuf_sycl::SyclBackend;

thread_local! {
    static CALLS: Cell<usize> = const { Cell::new(0) };
}

fn counting(run: &mut dyn FnMut()) {
    CALLS.set(CALLS.get() + 1);
    run();
}

/// How many times `call` entered the hook.
fn hook_calls(call: impl FnOnce()) -> usize {
    let before = CALLS.get();
    call();
    CALLS.get() - before
}

#[test]
fn commands_barriers_and_waits_enter_the_scheduler_through_the_blocking_hook() {
    let backend = SyclBackend::new();
    let Ok(queue) = backend.default_queue() else {
        let required = std::env::var("DEVBUF_REQUIRE").unwrap_or_default();
        assert!(
            !required
                .split(',')
                .any(|b| matches!(b.trim(), "sycl" | "all")),
            "sycl is required by DEVBUF_REQUIRE"
        );
        eprintln!("skip: no SYCL runtime");
        return;
    };
    assert!(devbuf_core::set_blocking_hook(counting));
    let queue: Arc<dyn Queue> = queue;
    let buffer = Buffer::alloc(&queue, MemKind::Device, 64).unwrap();
    assert_eq!(hook_calls(|| drop(buffer.enqueue_fill(1).unwrap())), 1);
    // The last command's event: nothing is submitted.
    let mut recorded = None;
    assert_eq!(
        hook_calls(|| recorded = Some(queue.record_event().unwrap())),
        0
    );
    // Barriers: on the queue handed out, after other libraries' work there, and one joining it.
    let mut barrier = None;
    assert!(hook_calls(|| barrier = queue.interop().foreign_work_event().unwrap()) > 0);
    assert_eq!(hook_calls(|| barrier.unwrap().wait().unwrap()), 1);
    // A wait nested in another runs as it is: the hook's preparation is made once.
    let recorded = recorded.unwrap();
    assert_eq!(
        hook_calls(|| devbuf_core::blocking(|| recorded.wait().unwrap())),
        1
    );
    buffer.synchronize().unwrap();
}
