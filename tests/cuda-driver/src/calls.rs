//! `DEVBUF_CUDA_TEST_COUNT_CALLS=1`: the double counts the entry points a process calls, by name,
//! so a test can hold a hot path to a budget of driver calls. A 2-core VM cannot time a GPU, but it
//! can count what a path asks of the driver (a call into NVIDIA's driver costs hundreds of
//! nanoseconds: the first GPU run's bare `cuMemAllocAsync` + `cuMemFreeAsync` pair took 834 ns).
//!
//! Counting is a test aid of the double, not a CUDA feature: NVIDIA's driver has no such entry
//! point. Each call is counted once, under the name its `boundary` reports (the base name:
//! `cuMemAllocAsync` for `cuMemAllocAsync` and its `_ptsz` variant, `cuCtxPushCurrent` for
//! `cuCtxPushCurrent_v2`; an entry point that forwards to another, as `cuMemAllocHost_v2` to
//! `cuMemHostAlloc`, counts as the one it forwards to), over every thread of the process, failed
//! calls included. `devbufTestDriverCallCounts` reads the counts.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::ffi::c_char;
use std::fmt::Write;
use std::sync::OnceLock;

use parking_lot::Mutex;

static COUNTS: Mutex<BTreeMap<&'static str, u64>> = Mutex::new(BTreeMap::new());

thread_local! {
    /// How many entry points this thread is inside: only the outermost is the program's call.
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// Whether `DEVBUF_CUDA_TEST_COUNT_CALLS` is 1, read once per process (here rather than with the
/// other variables in `config`: every entry point's boundary asks, and `config` itself depends on
/// the boundary's module). Any other value leaves counting off.
fn counting() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        std::env::var("DEVBUF_CUDA_TEST_COUNT_CALLS").is_ok_and(|value| value.trim() == "1")
    })
}

/// Marks this thread inside an entry point until dropped.
pub(crate) struct Inside;

impl Drop for Inside {
    fn drop(&mut self) {
        DEPTH.set(DEPTH.get() - 1);
    }
}

/// Counts a call of entry point `name` (when the knob is on and the call is the program's, not one
/// entry point calling another), and marks the thread inside it.
pub(crate) fn enter(name: &'static str) -> Inside {
    let depth = DEPTH.get();
    if depth == 0 && counting() {
        *COUNTS.lock().entry(name).or_default() += 1;
    }
    DEPTH.set(depth + 1);
    Inside
}

/// The counts as text: one line per entry point called so far, `name count`, by name.
fn report() -> String {
    let mut text = String::new();
    for (name, count) in COUNTS.lock().iter() {
        let _ = writeln!(text, "{name} {count}");
    }
    text
}

/// The double's own export (no CUDA entry point): writes the counts of
/// `DEVBUF_CUDA_TEST_COUNT_CALLS=1` into `buffer` as text, one `name count` line per entry point
/// called so far in this process, NUL-terminated when it fits in `capacity` bytes. Returns the
/// length of the text without its NUL (call again with a larger buffer when it is `capacity` or
/// more), or -1 when counting is off.
///
/// # Safety
/// `buffer` is null (with `capacity` 0) or valid for writing `capacity` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn devbufTestDriverCallCounts(buffer: *mut c_char, capacity: usize) -> i64 {
    if !counting() {
        return -1;
    }
    let text = report();
    if !buffer.is_null() && capacity > text.len() {
        // SAFETY: `buffer` holds `capacity` bytes, more than the text and its NUL.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr(), buffer.cast(), text.len());
            buffer.add(text.len()).write(0);
        }
    }
    text.len() as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_outermost_entry_point_is_counted() {
        // The unit tests' config has counting off: the depth is still kept.
        let outer = enter("cuTestOuter");
        let inner = enter("cuTestInner");
        assert_eq!(DEPTH.get(), 2);
        drop(inner);
        drop(outer);
        assert_eq!(DEPTH.get(), 0);
        assert!(!report().contains("cuTestOuter"));
    }
}
