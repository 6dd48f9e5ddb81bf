//! CUDA IPC between two processes: this test binary re-runs itself as the child that opens the
//! parent's handle and writes through it. Skips (passes, saying so) where there is no driver; on
//! the project's machines it has not run against a real GPU yet.

use devbuf_core::{Availability, Backend, Error, IpcHandle, MemKind, ipc};
use devbuf_cuda::CudaBackend;

const HANDLE_VAR: &str = "DEVBUF_TEST_CUDA_IPC_HANDLE";
/// The block CUDA IPC shares (Programming Guide): a shareable allocation's size is a multiple.
const IPC_BLOCK: usize = 2 << 20;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2).expect("hex"), 16).expect("hex"))
        .collect()
}

#[test]
fn a_child_process_writes_device_memory_the_parent_exported() {
    if let Availability::Unavailable(reason) = CudaBackend.availability() {
        eprintln!("skip: {reason}");
        return;
    }
    let queue = CudaBackend.open("0").unwrap();
    assert!(matches!(
        ipc::alloc_shareable(&queue, MemKind::Host, 64),
        Err(Error::Unsupported { .. })
    ));
    let buffer = ipc::alloc_shareable(&queue, MemKind::Device, 1 << 20).unwrap();
    buffer.fill(7).unwrap();
    let part = buffer.slice(4096..8192).unwrap();
    let handle = ipc::export(&part).unwrap();
    assert_eq!(handle.payload.len(), 64);
    // The driver opens a handle only in another process.
    assert!(ipc::open(&queue, &handle).is_err());
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_opens_the_handle_and_fills_it",
            "--ignored",
        ])
        .env(HANDLE_VAR, hex(&handle.to_bytes()))
        .status()
        .unwrap();
    assert!(status.success());
    let bytes = buffer.to_vec().unwrap();
    assert!(bytes[..4096].iter().all(|&b| b == 7));
    assert!(bytes[4096..8192].iter().all(|&b| b == 9));
    assert!(bytes[8192..].iter().all(|&b| b == 7));
}

/// The child half of the test above (run by it, with the handle in the environment).
#[test]
#[ignore = "run by a_child_process_writes_device_memory_the_parent_exported"]
fn child_opens_the_handle_and_fills_it() {
    let handle = IpcHandle::from_bytes(&unhex(&std::env::var(HANDLE_VAR).unwrap())).unwrap();
    let queue = CudaBackend.open("0").unwrap();
    let view = ipc::open(&queue, &handle).unwrap();
    assert_eq!((view.len(), view.kind()), (4096, MemKind::Device));
    view.fill(9).unwrap();
    // A second open of the same handle in this process is refused, cleanly.
    assert!(ipc::open(&queue, &handle).is_err());
}

/// A genuine 4 KiB handle whose size field claims 1 GiB opened as a 1 GiB buffer, and a fill past
/// 4 KiB crashed the importer: the opened range is now checked against the claim (the whole
/// allocation, a 2 MiB block: see the next test).
#[test]
fn a_handle_claiming_more_than_its_allocation_is_refused() {
    if let Availability::Unavailable(reason) = CudaBackend.availability() {
        eprintln!("skip: {reason}");
        return;
    }
    let queue = CudaBackend.open("0").unwrap();
    let buffer = ipc::alloc_shareable(&queue, MemKind::Device, 4096).unwrap();
    buffer.fill(3).unwrap();
    let genuine = ipc::export(&buffer).unwrap();
    assert_eq!(genuine.size, IPC_BLOCK);
    for size in [1 << 30, IPC_BLOCK + 1] {
        let claim = IpcHandle {
            size,
            len: size,
            ..genuine.clone()
        };
        let output = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child_opens_a_claim", "--ignored", "--nocapture"])
            .env(HANDLE_VAR, hex(&claim.to_bytes()))
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "claiming {size} bytes: {}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stdout)
        );
    }
}

/// The child half of the test above.
#[test]
#[ignore = "run by a_handle_claiming_more_than_its_allocation_is_refused"]
fn child_opens_a_claim() {
    let handle = IpcHandle::from_bytes(&unhex(&std::env::var(HANDLE_VAR).unwrap())).unwrap();
    let queue = CudaBackend.open("0").unwrap();
    match ipc::open(&queue, &handle) {
        Err(Error::InvalidDescriptor { key, message }) => {
            assert_eq!(key, "ipc_handle");
            assert!(
                message.ends_with(&format!("the memory it opens holds {IPC_BLOCK}")),
                "{message}"
            );
        }
        Err(other) => panic!("refused, but as {other:?}"),
        Ok(view) => {
            // What the claim allowed: a fill past the 4 KiB that exist.
            view.slice(8192..8200).unwrap().fill(1).unwrap();
            panic!("opened {} bytes", view.len());
        }
    }
    // The refused open left nothing open: the genuine size opens.
    let genuine = IpcHandle {
        size: IPC_BLOCK,
        len: 4096,
        ..handle
    };
    assert_eq!(
        ipc::open(&queue, &genuine).unwrap().to_vec().unwrap(),
        [3; 4096]
    );
}

/// Runs the ignored test `name` of this binary as another process, with the handle and
/// `CUDA_VISIBLE_DEVICES` set as given; whether it passed.
fn run_importer(name: &str, handle: &IpcHandle, visible_devices: &str) -> bool {
    std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--ignored"])
        .env(HANDLE_VAR, hex(&handle.to_bytes()))
        .env("CUDA_VISIBLE_DEVICES", visible_devices)
        .status()
        .unwrap()
        .success()
}

/// Ordinals are per process: with `CUDA_VISIBLE_DEVICES=1,0` the exporter's device 1 is the
/// importer's device 0. The handle names the device by UUID, so the importer opens it on its
/// cuda:0, the same physical device; where no device it sees has that UUID, the open is refused
/// naming the UUID (the memory is not opened on some other device).
#[test]
fn a_handle_names_its_device_by_uuid_whatever_the_importer_s_ordinals() {
    if let Availability::Unavailable(reason) = CudaBackend.availability() {
        eprintln!("skip: {reason}");
        return;
    }
    if CudaBackend.devices().unwrap().len() < 2 {
        eprintln!("skip: needs two CUDA devices");
        return;
    }
    let queue = CudaBackend.open("1").unwrap();
    let buffer = ipc::alloc_shareable(&queue, MemKind::Device, 4096).unwrap();
    buffer.fill(5).unwrap();
    let handle = ipc::export(&buffer).unwrap();
    assert!(handle.device.starts_with("cuda:GPU-"), "{}", handle.device);
    assert_ne!(
        handle.device,
        ipc::export(
            &ipc::alloc_shareable(&CudaBackend.open("0").unwrap(), MemKind::Device, 64).unwrap()
        )
        .unwrap()
        .device
    );
    assert!(run_importer("child_opens_by_uuid", &handle, "1,0"));
    assert_eq!(buffer.to_vec().unwrap(), [6; 4096]);
    assert!(run_importer(
        "child_sees_no_device_with_the_uuid",
        &handle,
        "0"
    ));
}

/// The child half of the test above, seeing the exporter's device 1 as its cuda:0.
#[test]
#[ignore = "run by a_handle_names_its_device_by_uuid_whatever_the_importer_s_ordinals"]
fn child_opens_by_uuid() {
    let handle = IpcHandle::from_bytes(&unhex(&std::env::var(HANDLE_VAR).unwrap())).unwrap();
    let queue = CudaBackend
        .open(handle.device.strip_prefix("cuda:").unwrap())
        .unwrap();
    assert_eq!(queue.device().selector, "cuda:0");
    let view = ipc::open(&queue, &handle).unwrap();
    assert_eq!(view.to_vec().unwrap(), [5; 4096]);
    view.fill(6).unwrap();
    view.synchronize().unwrap();
    // The device this process calls cuda:1 is another one: the handle does not open there.
    let other = CudaBackend.open("1").unwrap();
    let refused = ipc::open(&other, &handle).unwrap_err().to_string();
    assert!(
        refused.contains("the handle is for device \"cuda:GPU-"),
        "{refused}"
    );
}

/// The child half of the test above, seeing only the exporter's device 0.
#[test]
#[ignore = "run by a_handle_names_its_device_by_uuid_whatever_the_importer_s_ordinals"]
fn child_sees_no_device_with_the_uuid() {
    let handle = IpcHandle::from_bytes(&unhex(&std::env::var(HANDLE_VAR).unwrap())).unwrap();
    let uuid = handle.device.strip_prefix("cuda:").unwrap();
    match CudaBackend.open(uuid) {
        Err(Error::DeviceNotFound { selector, reason }) => {
            assert_eq!(selector, handle.device);
            assert!(reason.contains(&format!("has UUID {uuid}")), "{reason}");
            assert!(reason.contains("CUDA_VISIBLE_DEVICES=\"0\""), "{reason}");
        }
        Err(other) => panic!("refused, but as {other:?}"),
        Ok(queue) => panic!("opened on {}", queue.device().selector),
    }
}

/// CUDA IPC shares the whole block an allocation lies in (Programming Guide: "only share
/// allocations with a 2MiB aligned size"): a shareable allocation is its own 2 MiB block(s), so the
/// range an importer maps holds the exporter's buffer and zeroed padding, never a neighbour.
#[test]
fn a_shareable_allocation_owns_whole_ipc_blocks() {
    if let Availability::Unavailable(reason) = CudaBackend.availability() {
        eprintln!("skip: {reason}");
        return;
    }
    let queue = CudaBackend.open("0").unwrap();
    let first = ipc::alloc_shareable(&queue, MemKind::Device, 4096).unwrap();
    let second = ipc::alloc_shareable(&queue, MemKind::Device, IPC_BLOCK + 1).unwrap();
    first.fill(1).unwrap();
    second.fill(2).unwrap();
    for (buffer, blocks) in [(&first, 1), (&second, 2)] {
        let handle = ipc::export(buffer).unwrap();
        assert_eq!(handle.size, blocks * IPC_BLOCK);
        let (start, len) = (buffer.ptr() as usize, handle.size);
        assert_eq!(start % IPC_BLOCK, 0, "the allocation starts a block");
        for other in [&first, &second] {
            let at = other.ptr() as usize;
            assert!(std::ptr::eq(other, buffer) || !(start..start + len).contains(&at));
        }
    }
    // The padding an importer can reach is zeros, not stale bytes of this process.
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_reads_the_whole_block", "--ignored"])
        .env(HANDLE_VAR, hex(&ipc::export(&first).unwrap().to_bytes()))
        .status()
        .unwrap();
    assert!(status.success());
}

/// The child half of the test above: the whole block, through a handle claiming all of it.
#[test]
#[ignore = "run by a_shareable_allocation_owns_whole_ipc_blocks"]
fn child_reads_the_whole_block() {
    let handle = IpcHandle::from_bytes(&unhex(&std::env::var(HANDLE_VAR).unwrap())).unwrap();
    let whole = IpcHandle {
        len: handle.size,
        ..handle
    };
    let queue = CudaBackend
        .open(whole.device.strip_prefix("cuda:").unwrap())
        .unwrap();
    let bytes = ipc::open(&queue, &whole).unwrap().to_vec().unwrap();
    assert!(bytes[..4096].iter().all(|&b| b == 1));
    assert!(bytes[4096..].iter().all(|&b| b == 0));
}
