//! What every check of the kit is made of: its outcome, the allocations it makes (through the
//! memory resource under test while the adaptors' check runs), and the helpers they share.

use std::sync::Arc;

use parking_lot::Mutex;

use crate::mr::MemoryResource;
use crate::{Buffer, DEFAULT_ALIGNMENT, MemKind, Queue};

/// The result of one check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The backend behaved as the model requires.
    Pass,
    /// It did not: what went wrong.
    Fail(String),
    /// The check does not apply to this device: why (a kind it lacks...).
    Skip(String),
}

/// One check of the kit.
#[derive(Clone, Copy)]
pub struct Check {
    /// The check's name, a column of the conformance matrix.
    pub name: &'static str,
    /// Runs the check on a queue.
    pub run: fn(&Arc<dyn Queue>) -> Outcome,
}

/// Runs one check; a panic inside it is a failure, not a crash of the whole kit.
pub fn run_one(check: &Check, queue: &Arc<dyn Queue>) -> Outcome {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (check.run)(queue))).unwrap_or_else(
        |panic| {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Outcome::Fail(format!("panicked: {message}"))
        },
    )
}

pub(super) type CheckResult = Result<(), String>;

pub(super) fn outcome(result: CheckResult) -> Outcome {
    match result {
        Ok(()) => Outcome::Pass,
        Err(why) => Outcome::Fail(why),
    }
}

pub(super) fn supported_kinds(queue: &Arc<dyn Queue>) -> Result<Vec<MemKind>, Outcome> {
    let kinds: Vec<_> = MemKind::ALLOCATABLE
        .into_iter()
        .filter(|&kind| queue.supports(kind))
        .collect();
    if kinds.is_empty() {
        let why = queue
            .device()
            .unusable_reason
            .clone()
            .unwrap_or_else(|| "the device supports no allocatable kind".into());
        return Err(Outcome::Skip(why));
    }
    Ok(kinds)
}

/// Runs `body` for each supported kind, skipping when there is none.
pub(super) fn for_each_kind(
    queue: &Arc<dyn Queue>,
    body: impl Fn(MemKind) -> CheckResult,
) -> Outcome {
    match supported_kinds(queue) {
        Ok(kinds) => outcome(kinds.into_iter().try_for_each(body)),
        Err(skip) => skip,
    }
}

/// A byte pattern that differs between offsets and seeds, so misplaced bytes are caught.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u32)
                .wrapping_mul(31)
                .wrapping_add(seed as u32 * 7 + (i >> 8) as u32) as u8
        })
        .collect()
}

pub(super) fn ctx<T>(result: crate::Result<T>, what: impl FnOnce() -> String) -> Result<T, String> {
    result.map_err(|err| format!("{}: {err}", what()))
}

pub(super) fn alloc(queue: &Arc<dyn Queue>, kind: MemKind, len: usize) -> Result<Buffer, String> {
    ctx(allocate(queue, kind, len, DEFAULT_ALIGNMENT), || {
        format!("allocating {len} bytes of {kind}")
    })
}

pub(super) fn expect_bytes(buffer: &Buffer, expected: &[u8], what: &str) -> CheckResult {
    let actual = ctx(buffer.to_vec(), || format!("reading back {what}"))?;
    if actual != expected {
        let at = actual
            .iter()
            .zip(expected)
            .position(|(a, b)| a != b)
            .unwrap_or(0);
        return Err(format!(
            "{what}: byte {at} is {:?}, expected {:?}",
            actual.get(at),
            expected.get(at)
        ));
    }
    Ok(())
}

/// The resources the kit allocates from while it runs through them (an adaptor around a pool or
/// the queue itself), one per queue.
pub(super) static KIT_RESOURCES: Mutex<Vec<Arc<dyn MemoryResource>>> = Mutex::new(Vec::new());

/// How the kit allocates: from the resource under test for `queue` while the adaptors' check
/// runs, else from the queue.
pub(super) fn allocate(
    queue: &Arc<dyn Queue>,
    kind: MemKind,
    len: usize,
    align: usize,
) -> crate::Result<Buffer> {
    let resource = KIT_RESOURCES
        .lock()
        .iter()
        .find(|resource| Arc::ptr_eq(resource.queue(), queue))
        .cloned();
    match resource {
        Some(resource) => Buffer::alloc_from(&resource, kind, len, align),
        None => Buffer::alloc_aligned(queue, kind, len, align),
    }
}

/// A skipped check of `backend`: prints the reason, and panics when the environment variable
/// `DEVBUF_REQUIRE` lists the backend (or "all"), so that CI never skips a runtime it installed.
pub(super) fn skip(backend: &str, name: &str, why: &str) {
    let required = std::env::var("DEVBUF_REQUIRE").unwrap_or_default();
    let required = required.split(',').map(str::trim);
    if required.clone().any(|b| b == "all")
        || (!backend.is_empty() && required.clone().any(|b| b == backend))
    {
        panic!("{name} skipped but {backend} is required by DEVBUF_REQUIRE: {why}");
    }
    eprintln!("skip {name}: {why}");
}
