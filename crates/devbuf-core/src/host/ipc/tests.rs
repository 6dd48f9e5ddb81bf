use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;

use super::*;
use crate::{Buffer, Queue, ipc};

#[test]
fn a_shared_buffer_opens_as_the_same_bytes_and_not_twice() {
    let queue = HostQueue::shared();
    let buffer = ipc::alloc_shareable(&queue, MemKind::Host, 1000).unwrap();
    buffer.copy_from_host(&[7; 1000]).unwrap();
    let part = buffer.slice(100..300).unwrap();
    let handle = IpcHandle::from_bytes(&ipc::export(&part).unwrap().to_bytes()).unwrap();
    assert_eq!(
        (handle.offset, handle.len, handle.read_only),
        (100, 200, false)
    );
    let opened = ipc::open(&queue, &handle).unwrap();
    assert_ne!(opened.ptr(), part.ptr());
    opened.fill(9).unwrap();
    assert_eq!(
        buffer.to_vec().unwrap()[99..301],
        [&[7][..], &[9; 200], &[7]].concat()
    );
    // Open once per process, and again once the first view is gone.
    assert!(ipc::open(&queue, &handle).is_err());
    drop(opened);
    drop(ipc::open(&queue, &handle).unwrap());
    // Freed by the exporter: the handle no longer opens.
    drop((buffer, part));
    let err = ipc::open(&queue, &handle).unwrap_err().to_string();
    assert!(err.contains("freed"), "{err}");
}

#[test]
fn only_shareable_buffers_export() {
    let queue: Arc<dyn Queue> = HostQueue::shared();
    let plain = Buffer::alloc(&queue, MemKind::Host, 8).unwrap();
    assert!(matches!(ipc::export(&plain), Err(Error::Unexportable(_))));
}

/// A handle with the payload fields `pid, fd, dev, ino` and the rest of `like`.
fn forged(like: &IpcHandle, fd: libc::c_int, dev: u64, ino: u64, size: usize) -> IpcHandle {
    let mut payload = Vec::new();
    payload.extend_from_slice(&std::process::id().to_le_bytes());
    payload.extend_from_slice(&fd.to_le_bytes());
    payload.extend_from_slice(&dev.to_le_bytes());
    payload.extend_from_slice(&ino.to_le_bytes());
    IpcHandle {
        size,
        offset: 0,
        len: size,
        payload,
        ..like.clone()
    }
}

fn open_error(handle: &IpcHandle) -> String {
    let err = ipc::open(&HostQueue::shared(), handle).unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidDescriptor {
                key: "ipc_handle",
                ..
            }
        ),
        "{err}"
    );
    err.to_string()
}

// A handle forged from another open descriptor of a process of the same user (a regular file,
// named by its true device and inode) mapped that file read-write, and a fill changed it on disk.
#[test]
fn a_forged_handle_naming_another_file_is_refused_and_the_file_untouched() {
    let queue = HostQueue::shared();
    let genuine = ipc::export(&ipc::alloc_shareable(&queue, MemKind::Host, 64).unwrap()).unwrap();
    let path = std::env::temp_dir().join(format!("devbuf-forged-{}", std::process::id()));
    let mut file = std::fs::File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    file.write_all(&[b'A'; 64]).unwrap();
    let meta = file.metadata().unwrap();
    let handle = forged(&genuine, file.as_raw_fd(), meta.dev(), meta.ino(), 64);
    let err = open_error(&handle);
    assert!(err.contains("not devbuf's shared memory"), "{err}");
    assert_eq!(
        std::fs::read(format!("/proc/self/fd/{}", file.as_raw_fd())).unwrap(),
        [b'A'; 64]
    );
    // Nor a memfd of someone else's: another name, or devbuf's name without devbuf's seals.
    for (name, flags) in [(c"other", 0), (NAME, 0), (NAME, libc::MFD_ALLOW_SEALING)] {
        // SAFETY: a valid C string; the descriptor is owned by `Fd`.
        let fd = Fd(unsafe { libc::memfd_create(name.as_ptr(), flags) });
        // SAFETY: our memfd.
        assert_eq!(unsafe { libc::ftruncate(fd.0, 64) }, 0);
        let found = identity(fd.0).unwrap();
        let err = open_error(&forged(&genuine, fd.0, found.dev, found.ino, 64));
        assert!(err.contains("devbuf's"), "{name:?}: {err}");
    }
}

#[test]
fn a_handle_claiming_another_size_is_refused() {
    let queue = HostQueue::shared();
    let buffer = ipc::alloc_shareable(&queue, MemKind::Host, 4096).unwrap();
    let genuine = ipc::export(&buffer).unwrap();
    for size in [1 << 30, 4097, 4095] {
        let err = open_error(&IpcHandle {
            size,
            ..genuine.clone()
        });
        assert!(err.contains(&format!("the handle claims {size}")), "{err}");
    }
}

// Another process of the user shrank the exported memfd after an importer opened it: the importer
// died of SIGBUS on its next read. The file is sealed: no one can shrink (or grow) it.
#[test]
fn no_one_can_resize_a_shared_allocation() {
    let queue = HostQueue::shared();
    let buffer = ipc::alloc_shareable(&queue, MemKind::Host, 1 << 16).unwrap();
    let handle = ipc::export(&buffer).unwrap();
    let opened = ipc::open(&queue, &handle).unwrap();
    let (_, fd, _, _) = decode(handle.payload.as_slice().try_into().unwrap());
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/self/fd/{fd}"))
        .unwrap();
    for size in [0, 4096, 1 << 17] {
        let err = file.set_len(size).unwrap_err();
        assert_eq!(
            err.raw_os_error(),
            Some(libc::EPERM),
            "resizing to {size}: {err}"
        );
    }
    assert_eq!(opened.to_vec().unwrap(), vec![0; 1 << 16]);
}

// A read-only buffer's handle opened writable in the other process. It opens read-only now, and
// the kernel refuses a writable mapping to anyone, whatever the handle's flag says.
#[test]
fn a_read_only_handle_opens_read_only_and_its_flag_cannot_be_flipped() {
    let queue = HostQueue::shared();
    let buffer = ipc::alloc_shareable(&queue, MemKind::Host, 4096).unwrap();
    let writable = ipc::export(&buffer).unwrap();
    buffer.fill(3).unwrap();
    let handle = ipc::export_read_only(&buffer.slice(0..100).unwrap()).unwrap();
    assert!(handle.read_only);
    let opened = ipc::open(&queue, &handle).unwrap();
    assert!(opened.is_read_only());
    assert!(matches!(
        opened.fill(1),
        Err(Error::InvalidDescriptor { key: "buffer", .. })
    ));
    assert!(opened.copy_from_host(&[1; 100]).is_err());
    // The exporter still writes, and the reader sees it.
    buffer.fill(5).unwrap();
    assert_eq!(opened.to_vec().unwrap(), vec![5; 100]);
    drop(opened);
    // The flag flipped, or an earlier writable handle: both refused.
    for handle in [
        IpcHandle {
            read_only: false,
            ..handle.clone()
        },
        writable,
    ] {
        let err = open_error(&handle);
        assert!(err.contains("read-only"), "{err}");
    }
    // And past devbuf, the kernel: no writable shared mapping of the file, for anyone.
    let (_, fd, _, _) = decode(handle.payload.as_slice().try_into().unwrap());
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/self/fd/{fd}"))
        .unwrap();
    let err = map_shared(file.as_raw_fd(), 4096, false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("Operation not permitted"), "{err}");
    map_shared(file.as_raw_fd(), 4096, true).unwrap();
}
