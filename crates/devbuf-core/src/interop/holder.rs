//! [`Holder`]: what a runtime can tell about the allocation holding a pointer, the answer to
//! [`crate::Interop::holder_of`] that imports check a descriptor's whole extent against
//! ([`crate::extent`]).

use std::ops::Range;

use crate::MemKind;

/// What a runtime can tell about the allocation holding a pointer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holder {
    /// The runtime does not know the pointer: it is no memory of this queue's.
    Unknown,
    /// An allocation of `kind` memory spanning `range`.
    Allocation {
        /// The kind of the allocation's memory.
        kind: MemKind,
        /// The addresses of its first byte and one past its last.
        range: Range<usize>,
    },
    /// `kind` memory the runtime knows, though not how far its allocation reaches (dpctl's C API
    /// tells a USM pointer's type and device, not its allocation's bounds). `place` names what it
    /// does tell (the device holding the memory), so that the answers for the first and the last
    /// byte of a span can be compared.
    Unbounded {
        /// The kind of the memory.
        kind: MemKind,
        /// What the runtime tells of where the memory is (the device holding it).
        place: u64,
    },
    /// Memory the runtime cannot vouch for either way: the host backend, for which any address
    /// of the process may be host memory. Its producer (a Python object in this process) is
    /// trusted.
    Unchecked,
}
