//! The embedded default in one page: open the default device (`devbuf::default_device`: a CUDA
//! GPU, else a SYCL device, else an OpenCL device with every kind, else the host), move bytes
//! through every kind of memory it has, and print the conformance matrix of every backend.

use devbuf::{Buffer, MemKind};

fn main() -> devbuf::Result<()> {
    let queue = devbuf::default_queue()?;
    let device = queue.device();
    println!("default device: {device} [{}]", device.vendor);
    let message = b"devbuf: zero-copy device memory across library boundaries";
    let mut previous: Option<Buffer> = None;
    for kind in MemKind::ALLOCATABLE
        .into_iter()
        .filter(|&k| queue.supports(k))
    {
        let buffer = Buffer::alloc(&queue, kind, message.len())?;
        match &previous {
            None => buffer.copy_from_host(message)?,
            Some(src) => buffer.copy_from(src)?,
        }
        println!(
            "  {kind:>6} buffer at {:p}: queue classifies it as {}",
            buffer.ptr(),
            queue.kind_of(buffer.ptr())
        );
        previous = Some(buffer);
    }
    if let Some(last) = previous {
        println!(
            "  read back: {:?}",
            String::from_utf8_lossy(&last.to_vec()?)
        );
    }
    println!();
    let rows = devbuf::matrix::run();
    print!("{}", devbuf::matrix::Table(&rows));
    if rows.iter().any(devbuf::matrix::Row::failed) {
        std::process::exit(1);
    }
    Ok(())
}
