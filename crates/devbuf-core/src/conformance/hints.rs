//! The hints about shared memory: prefetch and advice are accepted or refused as unsupported,
//! never change a byte, and take shared memory only.

use std::sync::Arc;

use super::kit::{Outcome, alloc, ctx, expect_bytes, outcome, pattern};
use crate::{Advice, Error, Location, MemKind, Queue};

/// A hint taken, or refused as unsupported (a backend without hints answers so every time); any
/// other error is a failure.
fn taken_or_unsupported(result: crate::Result<()>, what: &str) -> Result<(), String> {
    match result {
        Ok(()) | Err(Error::Unsupported { .. }) => Ok(()),
        Err(err) => Err(format!("{what}: {err}")),
    }
}

/// Shared memory prefetched to the device and the host and advised every way holds what was
/// written to it; other kinds are refused.
pub(super) fn hints_keep_the_bytes(queue: &Arc<dyn Queue>) -> Outcome {
    if !queue.supports(MemKind::Shared) {
        return Outcome::Skip("the device has no shared memory".into());
    }
    const LEN: usize = 1 << 20;
    outcome((|| {
        let buffer = alloc(queue, MemKind::Shared, LEN)?;
        let bytes = pattern(LEN, 11);
        ctx(buffer.copy_from_host(&bytes), || {
            "writing shared memory".into()
        })?;
        for to in [Location::Device, Location::Host] {
            let prefetched = buffer.prefetch(to).map(drop);
            taken_or_unsupported(prefetched, &format!("prefetching to the {to}"))?;
        }
        let advice = [
            Advice::SetReadMostly,
            Advice::UnsetReadMostly,
            Advice::SetPreferredLocation(Location::Device),
            Advice::SetPreferredLocation(Location::Host),
            Advice::UnsetPreferredLocation,
            Advice::SetAccessedBy(Location::Device),
            Advice::UnsetAccessedBy(Location::Device),
            Advice::Native(0),
        ];
        for advice in advice {
            taken_or_unsupported(buffer.advise(advice), &format!("{advice:?}"))?;
        }
        expect_bytes(&buffer, &bytes, "shared memory after prefetches and advice")?;
        for kind in [MemKind::Device, MemKind::Host] {
            if !queue.supports(kind) {
                continue;
            }
            let other = alloc(queue, kind, 64)?;
            if other.prefetch(Location::Device).is_ok()
                || other.advise(Advice::SetReadMostly).is_ok()
            {
                return Err(format!(
                    "a hint about {kind} memory was taken: only shared memory takes hints"
                ));
            }
        }
        Ok(())
    })())
}
