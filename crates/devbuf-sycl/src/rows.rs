//! Rows of a strided copy as one launch of the row kernel ([`crate::row_kernel`]), where it is
//! built and reaches both sides.
//!
//! The kernel reaches USM of the queue's context only. A side that is other host memory (a fill's
//! pattern, NumPy's array for `get()`) is staged through USM host memory of the context when its
//! rows are packed (pitch = width, so the span holds nothing else): written on the host before
//! the kernel, once the queue has reached the copy (which is ordered after the queue's earlier
//! work), or read on the host after it. A staged copy waits for its kernel, to free the staging
//! memory; one with rows apart in other host memory goes row by row.

use std::ffi::c_void;

use devbuf_core::{MemKind, Queue, Result, Rows};
use devbuf_sycl_sys as sys;

use crate::queue::SyclQueue;

/// The most bytes a side is staged through USM host memory for.
const STAGING_BYTES: usize = 16 << 20;

/// One side of the copy as the kernel sees it: USM of the context, or host memory staged.
enum Side {
    Usm(*mut u8),
    Staged {
        host: *mut u8,
        usm: *mut u8,
        len: usize,
    },
}

impl Side {
    fn usm(&self) -> *mut u8 {
        match *self {
            Side::Usm(ptr) | Side::Staged { usm: ptr, .. } => ptr,
        }
    }
}

impl SyclQueue {
    /// Enqueues `rows` as one launch of the row kernel, when the kernel is worth it and reaches
    /// both sides (directly or staged); `Ok(false)` when the caller should copy row by row instead.
    ///
    /// # Safety
    /// As for [`Queue::copy_rows`].
    pub(crate) unsafe fn copy_rows_at_once(
        &self,
        dst: *mut u8,
        src: *const u8,
        rows: Rows,
    ) -> Result<bool> {
        // Device USM of one device is not another's: a context of several devices goes row by row.
        if rows.count < 2 || !self.knows_usm || self.multi_device_context {
            return Ok(false);
        }
        let Some(kernel) = self
            .row_copies
            .kernel(&self.context, &self.commands, rows.count)
        else {
            return Ok(false);
        };
        // Every row a kernel's work-item, reaching each side's USM.
        let span = |pitch: usize| {
            rows.count
                .checked_sub(1)?
                .checked_mul(pitch)
                .and_then(|rows_before| rows_before.checked_add(rows.width))
        };
        let side = |ptr: *mut u8, pitch: usize| -> Option<Side> {
            if self.kind_of(ptr) != MemKind::Unknown {
                return Some(Side::Usm(ptr));
            }
            let len = span(pitch).filter(|&len| pitch == rows.width && len <= STAGING_BYTES)?;
            Some(Side::Staged {
                host: ptr,
                usm: std::ptr::null_mut(),
                len,
            })
        };
        let (Some(mut to), Some(mut from)) = (
            side(dst, rows.dst_pitch),
            side(src.cast_mut(), rows.src_pitch),
        ) else {
            return Ok(false);
        };
        let api = self.runtime().api();
        let commands = self.commands.as_ptr();
        // Staging memory of the context, host-accessible: the host writes and reads it directly.
        let mut staging: Vec<*mut c_void> = Vec::new();
        let mut stage = |side: &mut Side| -> bool {
            if let Side::Staged { usm, len, .. } = side {
                // SAFETY: a live queue; the call catches the runtime's exceptions (null on failure).
                let memory = unsafe { api.DPCTLmalloc_host(*len, commands) };
                if memory.is_null() {
                    return false;
                }
                staging.push(memory.cast());
                *usm = memory.cast();
            }
            true
        };
        let staged = stage(&mut to) && stage(&mut from);
        let result = (|| {
            if !staged {
                return Ok(false);
            }
            if let Side::Staged { host, usm, len } = from {
                // The host reads the source now, not when the queue reaches the copy, which
                // `Queue::copy_rows` orders after the queue's earlier work: that work must be done
                // first. (The SYCL CPU runtime's own copies into such memory return done, so no
                // test on it can catch a missing wait here; another runtime's need not.)
                self.wait()?;
                // SAFETY: the caller's `len` packed bytes at `host` (the source's rows), with no
                // work left on them (waited for above); `usm` is our fresh allocation of `len`.
                unsafe { std::ptr::copy_nonoverlapping(host, usm, len) };
            }
            let (mut dst_pitch, mut src_pitch, mut width) = (
                rows.dst_pitch as u64,
                rows.src_pitch as u64,
                rows.width as u64,
            );
            let mut args: [*mut c_void; 5] = [
                to.usm().cast(),
                (&raw mut dst_pitch).cast(),
                from.usm().cast(),
                (&raw mut src_pitch).cast(),
                (&raw mut width).cast(),
            ];
            let types = [
                sys::DPCTLKernelArgType_DPCTL_VOID_PTR,
                sys::DPCTLKernelArgType_DPCTL_UINT64_T,
                sys::DPCTLKernelArgType_DPCTL_VOID_PTR,
                sys::DPCTLKernelArgType_DPCTL_UINT64_T,
                sys::DPCTLKernelArgType_DPCTL_UINT64_T,
            ];
            let range = [rows.count];
            self.submit("DPCTLQueue_SubmitRange", |commands| {
                // SAFETY: the kernel takes these five arguments; the pointers are USM of the
                // queue's context, valid for every row (the caller's, or our staging); the values
                // are read before the call returns. The call catches the runtime's exceptions.
                unsafe {
                    api.DPCTLQueue_SubmitRange(
                        kernel.kernel().as_ptr(),
                        commands,
                        args.as_mut_ptr(),
                        types.as_ptr(),
                        args.len(),
                        range.as_ptr(),
                        range.len(),
                        std::ptr::null(),
                        0,
                    )
                }
            })?;
            if !staging.is_empty() {
                // The staging memory is freed below: the kernel must be done with it.
                self.wait()?;
            }
            if let Side::Staged { host, usm, len } = to {
                // SAFETY: the kernel has written `len` packed bytes at `usm` (waited for above);
                // `host` is the caller's destination of the same packed rows.
                unsafe { std::ptr::copy(usm, host, len) };
            }
            Ok(true)
        })();
        if result.is_ok() || !staging.is_empty() && self.wait().is_ok() {
            for memory in staging {
                // SAFETY: our allocations, no longer in use (waited for above).
                unsafe { api.DPCTLfree_with_queue(memory.cast(), commands) };
            }
        }
        // A failed wait leaves the staging memory to the runtime: the kernel may still use it.
        result
    }
}
