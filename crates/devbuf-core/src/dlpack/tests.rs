use super::*;
use crate::{DType, Layout, MemKind, Owner, Queue, host::HostQueue};
use dlpark::ffi::DLDeviceType;
use std::alloc::{alloc, dealloc};
use std::sync::Arc;
use std::sync::atomic::Ordering;

const CPU: DLDevice = DLDevice {
    device_type: DLDeviceType::CPU,
    device_id: 0,
};

#[test]
fn export_then_import_round_trips_and_deleter_frees_once() {
    let queue: Arc<dyn Queue> = Arc::new(HostQueue::new());
    let buffer = Buffer::alloc(&queue, MemKind::Host, 6 * 4).unwrap();
    buffer
        .copy_from_host(&(0u8..24).collect::<Vec<_>>())
        .unwrap();
    // A reversed 2x3 int32 view: element 0 is the last row.
    let layout = Layout::new(DType::INT32, &[2, 3], Some(&[-12, 4]), 12, true).unwrap();
    let array = Array::new(buffer.clone(), layout).unwrap();
    let template = DlpackTemplate::new(&array, CPU).unwrap();
    let tensor = export::<DLManagedTensorVersioned>(&array, template, DlpackFlags::empty(), false);
    let managed = ManagedTensor::Versioned(tensor);
    // SAFETY: we own the tensor until delete below.
    let (dl, readonly) = unsafe { managed.tensor() }.unwrap();
    assert!(readonly);
    // SAFETY: the exported tensor's shape/strides point to 2 values each.
    let imported = unsafe { crate::interface::import_dltensor(dl, readonly) }.unwrap();
    assert_eq!(imported.base, buffer.ptr() as usize);
    assert_eq!(imported.len, 24);
    assert_eq!(imported.layout, *array.layout());
    drop(array);
    drop(buffer);
    // The export still owns the memory: reading it must see the bytes written above.
    // SAFETY: the export's buffer is alive until the deleter runs.
    let first = unsafe { *(dl.data as *const u8) };
    assert_eq!(first, 12);
    // SAFETY: we own the tensor and never use it again.
    unsafe { managed.delete() };
}

#[test]
fn unsupported_major_version_is_refused() {
    let queue: Arc<dyn Queue> = Arc::new(HostQueue::new());
    let array = Array::bytes(Buffer::alloc(&queue, MemKind::Host, 8).unwrap());
    let template = DlpackTemplate::new(&array, CPU).unwrap();
    let tensor = export::<DLManagedTensorVersioned>(&array, template, DlpackFlags::empty(), false);
    // SAFETY: we own the tensor.
    unsafe { (*tensor.as_ptr()).version.major = 2 };
    let managed = ManagedTensor::Versioned(tensor);
    // SAFETY: the tensor is alive.
    let err = unsafe { managed.tensor() }.unwrap_err();
    assert!(err.to_string().starts_with("version: DLPack 2."), "{err}");
    // SAFETY: we own it; the deleter is still ours.
    unsafe { managed.delete() };
}

/// A foreign byte array whose deleter counts its runs, exported in a capsule.
fn counted_export() -> (
    NonNull<DLManagedTensorVersioned>,
    Arc<std::sync::atomic::AtomicUsize>,
) {
    use std::sync::atomic::AtomicUsize;
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&runs);
    let mut memory = vec![1u8; 32].into_boxed_slice();
    let ptr = memory.as_mut_ptr();
    // SAFETY: the memory moves into the deleter, which frees it.
    let buffer = unsafe {
        Buffer::from_foreign(
            HostQueue::shared(),
            ptr,
            32,
            MemKind::Unknown,
            Owner::deleter(move || {
                drop(memory);
                counter.fetch_add(1, Ordering::SeqCst);
            }),
        )
    };
    let array = Array::bytes(buffer);
    let template = DlpackTemplate::new(&array, CPU).unwrap();
    let tensor = export(&array, template, DlpackFlags::empty(), true);
    (tensor, runs)
}

#[test]
fn capsule_and_consumer_release_the_memory_once_in_any_order() {
    let live_before = LIVE_EXPORTS.with(|live| live.get());
    // Unconsumed: the capsule releases it.
    let (tensor, runs) = counted_export();
    // SAFETY: the capsule's reference, given back once.
    unsafe { release_capsule(tensor, false) };
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // Consumed: the capsule dies first, the consumer's deleter releases.
    let (tensor, runs) = counted_export();
    // SAFETY: as above; then the consumer's reference through its deleter.
    unsafe {
        release_capsule(tensor, true);
        assert_eq!(runs.load(Ordering::SeqCst), 0);
        ManagedTensor::Versioned(tensor).delete();
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // A consumer that calls the deleter without renaming the capsule: still exactly once.
    let (tensor, runs) = counted_export();
    // SAFETY: the consumer's reference, then the capsule's (which believes it is unconsumed).
    unsafe {
        ManagedTensor::Versioned(tensor).delete();
        release_capsule(tensor, false);
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    // And every export block was freed in all three orders.
    assert_eq!(LIVE_EXPORTS.with(|live| live.get()), live_before);
}

#[test]
fn a_deleter_on_another_thread_and_the_consumed_capsule_free_the_export_once() {
    // The deleter may run on any thread (DLPack), at the same time as the capsule dies: whichever
    // leaves last frees the block, and the memory is released once, by the deleter.
    for _ in 0..2000 {
        let (tensor, runs) = counted_export();
        let tensor_address = tensor.as_ptr() as usize;
        let start = Arc::new(std::sync::Barrier::new(2));
        let consumer = {
            let start = Arc::clone(&start);
            std::thread::spawn(move || {
                start.wait();
                let tensor = tensor_address as *mut DLManagedTensorVersioned;
                // SAFETY: the consumer's tensor, given back once through its deleter.
                unsafe { ManagedTensor::Versioned(NonNull::new(tensor).unwrap()).delete() };
            })
        };
        start.wait();
        // SAFETY: the capsule's side, once; a consumer renamed it.
        unsafe { release_capsule(tensor, true) };
        consumer.join().unwrap();
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }
}

#[test]
fn the_block_of_an_export_freed_on_a_thread_serves_its_next_export() {
    let (first, _) = counted_export();
    // SAFETY: the capsule's reference, given back once.
    unsafe { release_capsule(first, false) };
    // A block of the same layout taken from the allocator in between: the allocator's own cache
    // would hand it the freed block, the thread's spare keeps that for the next export.
    // SAFETY: the layout is not zero-sized; the memory is freed below with it.
    let between = unsafe { alloc(EXPORT_LAYOUT) };
    let (second, _) = counted_export();
    assert_eq!(second, first);
    // SAFETY: as above; `between` came from `alloc` with this layout.
    unsafe {
        release_capsule(second, false);
        dealloc(between, EXPORT_LAYOUT);
    }
}
