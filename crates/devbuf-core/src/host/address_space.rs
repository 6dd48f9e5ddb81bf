//! The end of this process's user address space: no host memory lies past it, so a span that
//! reaches past it is garbage whatever its producer says (the host backend cannot tell other
//! host memory from garbage, but it can tell a span no process can map).

use std::sync::OnceLock;

/// The address widths a user address space may have, widest first: x86-64 with 5-level paging
/// (LA57) or 4-level paging.
#[cfg(target_arch = "x86_64")]
const WIDTHS: &[u32] = &[56, 47];
/// aarch64 with 52-bit (LVA), 48-, 47-, 42-, 39- and 36-bit virtual addresses, as Linux builds it.
#[cfg(target_arch = "aarch64")]
const WIDTHS: &[u32] = &[52, 48, 47, 42, 39, 36];
/// Elsewhere, the widest an address may be.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const WIDTHS: &[u32] = &[usize::BITS];

/// The bits of an address that may carry a tag rather than the address: aarch64's top byte,
/// which the hardware ignores (Linux's tagged address ABI, MTE and HWASan use it).
#[cfg(target_arch = "aarch64")]
const TAG_MASK: usize = 0xff << 56;
#[cfg(not(target_arch = "aarch64"))]
const TAG_MASK: usize = 0;

/// One past the highest address this process's user memory can have (rounded up to a power of
/// two: 2^47 on x86-64 with 4-level paging, 2^56 with 5-level; 2^48 on most aarch64 kernels).
/// Asked of the kernel once: where 5-level paging (or aarch64's 52-bit addresses) is not enabled,
/// a mapping at the wider width is refused.
pub fn user_address_limit() -> usize {
    static LIMIT: OnceLock<usize> = OnceLock::new();
    *LIMIT.get_or_init(ask_the_kernel)
}

/// Whether the `len` bytes at `address` (a host address, tag bits ignored) end past the user
/// address space, or wrap.
pub fn past_user_space(address: usize, len: usize) -> bool {
    (address & !TAG_MASK)
        .checked_add(len)
        .is_none_or(|end| end > user_address_limit())
}

/// The widest of [`WIDTHS`] at whose top the kernel lets this process map a page (or finds one
/// mapped already); the widest if it answers none, so that nothing real is ever refused.
#[cfg(target_os = "linux")]
fn ask_the_kernel() -> usize {
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    for &width in WIDTHS {
        let Some(top) = 1usize.checked_shl(width) else {
            return usize::MAX;
        };
        let Some(probe) = top.checked_sub(page.saturating_mul(2)) else {
            continue;
        };
        // SAFETY: a new private, inaccessible mapping that replaces nothing (the kernel refuses
        // MAP_FIXED_NOREPLACE over an existing one); unmapped below before anyone sees it.
        let mapped = unsafe {
            libc::mmap(
                probe as *mut libc::c_void,
                page,
                libc::PROT_NONE,
                libc::MAP_PRIVATE
                    | libc::MAP_ANONYMOUS
                    | libc::MAP_NORESERVE
                    | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
        if mapped == libc::MAP_FAILED {
            // EEXIST: something is mapped there already, so the address is the process's.
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EEXIST) {
                return top;
            }
            continue;
        }
        // SAFETY: the page mapped just above, which nothing else knows of.
        unsafe { libc::munmap(mapped, page) };
        // A kernel older than MAP_FIXED_NOREPLACE (4.17) takes the address as a hint only.
        if mapped as usize == probe {
            return top;
        }
    }
    widest()
}

#[cfg(not(target_os = "linux"))]
fn ask_the_kernel() -> usize {
    widest()
}

fn widest() -> usize {
    WIDTHS
        .first()
        .and_then(|&width| 1usize.checked_shl(width))
        .unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_holds_this_process_memory_and_refuses_what_no_process_can_map() {
        let limit = user_address_limit();
        assert!(limit.is_power_of_two() || limit == usize::MAX, "{limit:#x}");
        // The stack and the heap lie below it.
        let on_stack = 0u8;
        let on_heap = Box::new(0u8);
        for address in [&on_stack as *const u8, &*on_heap as *const u8] {
            assert!(!past_user_space(address as usize, 1), "{address:p}");
        }
        // The issue-45 case: a 4-element byte array with a stride of 2^61 spans ~6.9 EB.
        assert!(past_user_space(&*on_heap as *const u8 as usize, 3 << 61));
        assert!(past_user_space(limit, 1));
        assert!(past_user_space(usize::MAX, 2));
        assert!(!past_user_space(limit.saturating_sub(4096), 4096));
    }
}
