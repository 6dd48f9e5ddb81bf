//! The resource graph: which resources each allocates from ([`MemoryResource::upstreams`]),
//! kept acyclic and shallow, so that no allocation, free or drop recurses without end.
//!
//! A resource that reaches itself would allocate from itself until the stack overflows, and a
//! chain of thousands of adaptors overflows it too (allocating, freeing or dropping it recurses
//! once per level). So what adds an edge after construction ([`super::BinningResource::add_bin`],
//! [`super::set_current`], the Python layer's constructors) asks [`check_upstream`] first, and
//! every adaptor's allocation counts its depth on the thread ([`Descent`]) as a second line:
//! both answer [`Error::Recursion`] (Python's `RecursionError`, as the guide promises for a
//! resource that allocates from itself).

use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::MemoryResource;
use crate::{Error, Result};

/// The most resources one allocation may pass through, top to bottom: far more than any stack
/// of adaptors users build (RMM's deepest examples are four), and few enough that allocating,
/// freeing and dropping the stack fit in a thread's stack (2 MiB for threads Rust starts).
pub const MAX_DEPTH: usize = 256;

/// A resource's identity: the address of its data (a `dyn` pointer's vtable part may differ
/// between two pointers to one object).
fn identity(resource: &dyn MemoryResource) -> *const () {
    resource as *const dyn MemoryResource as *const ()
}

/// Refuses `upstream` as a resource `owner` allocates from (`key` names the argument that gave
/// it) when `upstream` reaches `owner` (a cycle: an allocation would never end) or when the
/// stack it makes would be deeper than [`MAX_DEPTH`].
pub fn check_upstream(
    owner: &dyn MemoryResource,
    upstream: &Arc<dyn MemoryResource>,
    key: &'static str,
) -> Result<()> {
    if reaches(upstream, identity(owner)) {
        return Err(Error::Recursion {
            key,
            message: "it allocates from the resource it is given to, which would then allocate \
                      from itself; give it a resource that does not reach that one"
                .into(),
        });
    }
    check_depth(upstream, key, 1)
}

/// Refuses `resource` when a stack over it, `above` resources high, would be deeper than
/// [`MAX_DEPTH`], or when it reaches itself.
pub fn check_depth(
    resource: &Arc<dyn MemoryResource>,
    key: &'static str,
    above: usize,
) -> Result<()> {
    let mut known = HashMap::new();
    let mut path = HashSet::new();
    match depth(resource, &mut known, &mut path) {
        Some(depth) if depth.saturating_add(above) <= MAX_DEPTH => Ok(()),
        Some(depth) => Err(Error::Recursion {
            key,
            message: format!(
                "it stacks {depth} resources, and devbuf allows at most {MAX_DEPTH} under one \
                 allocation"
            ),
        }),
        None => Err(Error::Recursion {
            key,
            message: "it reaches itself through the resources it allocates from: an allocation \
                      would never end"
                .into(),
        }),
    }
}

/// Whether `resource` or anything it allocates from is the resource at `target`.
fn reaches(resource: &Arc<dyn MemoryResource>, target: *const ()) -> bool {
    let mut seen = HashSet::new();
    let mut todo = vec![Arc::clone(resource)];
    while let Some(next) = todo.pop() {
        if identity(&*next) == target {
            return true;
        }
        if seen.insert(identity(&*next)) {
            todo.extend(next.upstreams());
        }
    }
    false
}

/// The resources on the longest way down from `resource` (1 for a queue's), or `None` when it
/// reaches itself; stops counting past [`MAX_DEPTH`] so that the walk itself stays shallow.
fn depth(
    resource: &Arc<dyn MemoryResource>,
    known: &mut HashMap<*const (), usize>,
    path: &mut HashSet<*const ()>,
) -> Option<usize> {
    let id = identity(&**resource);
    if let Some(&depth) = known.get(&id) {
        return Some(depth);
    }
    if !path.insert(id) {
        return None;
    }
    let mut deepest = 0;
    if path.len() <= MAX_DEPTH {
        for upstream in resource.upstreams() {
            deepest = deepest.max(depth(&upstream, known, path)?);
        }
    }
    path.remove(&id);
    let depth = deepest.saturating_add(1);
    known.insert(id, depth);
    Some(depth)
}

thread_local! {
    /// How many adaptors' allocations run on this thread, outermost to innermost.
    static DEPTH: Cell<usize> = const { Cell::new(0) };
}

/// One adaptor's allocation on this thread: refused past [`MAX_DEPTH`] (a graph that escaped the
/// checks above, such as a stack built in Rust thousands deep), counted until dropped.
pub(crate) struct Descent(());

impl Descent {
    #[inline]
    pub(crate) fn enter() -> Result<Descent> {
        let depth = DEPTH.get();
        if depth >= MAX_DEPTH {
            return Err(too_deep());
        }
        DEPTH.set(depth.saturating_add(1));
        Ok(Descent(()))
    }
}

impl Drop for Descent {
    #[inline]
    fn drop(&mut self) {
        DEPTH.set(DEPTH.get().saturating_sub(1));
    }
}

#[cold]
#[inline(never)]
fn too_deep() -> Error {
    Error::Recursion {
        key: "mr",
        message: format!(
            "an allocation passed through {MAX_DEPTH} resources: a resource that allocates from \
             itself, or a stack deeper than devbuf allows"
        ),
    }
}
