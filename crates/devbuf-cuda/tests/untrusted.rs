//! Pointers and handles from other libraries and processes are untrusted: an import's whole extent
//! lies in the allocation holding it (`cuMemGetAddressRange`), and no fill the driver refuses
//! becomes a host write at a device address. Tests that crashed before run in a child process.

mod common;

use devbuf_core::Holder;
use devbuf_core::extent::check_extent;
use devbuf_core::interface::{InterfaceDict, import_cai};
use devbuf_core::{Buffer, Error, MemKind};

use common::{fresh, shared};

fn cai(shape: &[i64], data: usize) -> InterfaceDict<'_> {
    InterfaceDict {
        version: 3,
        data: (data, false),
        shape,
        typestr: "|u1",
        ..Default::default()
    }
}

// A CAI dict that claims 1 MiB at the start of a 4 KiB allocation imported, and a fill past 4 KiB
// then wrote from the host at a device address. Every kind: the claim is refused naming `shape`,
// the whole allocation is accepted.
child_test!(an_import_claiming_more_than_its_allocation_is_refused {
    let queue = shared(0);
    for kind in [MemKind::Device, MemKind::Host, MemKind::Shared] {
        let buffer = Buffer::alloc(&queue, kind, 4096).unwrap();
        let base = buffer.ptr() as usize;
        match queue.interop().holder_of(buffer.ptr()).unwrap() {
            Holder::Allocation { kind: found, range } => {
                assert_eq!(found, kind);
                assert!(range.start <= base && base + 4096 <= range.end, "{kind}: {range:?}");
            }
            other => panic!("{kind}: the driver's answer was {other:?}"),
        }
        let whole = import_cai(&cai(&[4096], base)).unwrap();
        assert_eq!(check_extent(&*queue, &whole, "data").unwrap(), kind);
        let claim = import_cai(&cai(&[1 << 20], base)).unwrap();
        let err = check_extent(&*queue, &claim, "data").unwrap_err().to_string();
        assert!(err.starts_with("shape: ") && err.contains("past the end"), "{kind}: {err}");
    }
});

// Device memory of another device is no memory of this queue's.
child_test!(another_devices_memory_is_no_allocation_of_this_queue needs common::Need::Devices(2); {
    let other = Buffer::alloc(&shared(1), MemKind::Device, 64).unwrap();
    assert_eq!(shared(0).interop().holder_of(other.ptr()).unwrap(), Holder::Unknown);
});

// The driver refuses to set bytes it does not know; the host must not set them either (a host
// write at a freed device address segfaulted here).
child_test!(a_fill_the_driver_refuses_is_its_error_not_a_host_write {
    let queue = fresh(0);
    let address = {
        let buffer = Buffer::alloc(&queue, MemKind::Device, 4096).unwrap();
        buffer.ptr()
    };
    queue.wait().unwrap();
    // SAFETY: deliberately not valid memory: the driver must refuse the fill, and the queue must
    // not touch the address from the host.
    match unsafe { queue.fill(address, 1, 4096) } {
        Err(Error::Runtime { operation, .. }) => assert_eq!(operation, "cuMemsetD8Async"),
        other => panic!("a fill of freed device memory gave {other:?}"),
    }
});
