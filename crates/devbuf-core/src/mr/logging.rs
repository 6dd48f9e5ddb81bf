//! [`LoggingResource`]: a CSV line for every allocation and free, in RMM's columns.

use std::fmt;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

use super::{Adaptor, FreeAfter, MemoryResource};
use crate::{MemKind, Result};

/// The log's first line: RMM's columns (`logging_resource_adaptor`), then devbuf's kind and
/// device, so that a log of a program using several kinds replays each on its own kind.
pub const LOG_HEADER: &str = "Thread,Time,Action,Pointer,Size,Stream,Kind,Device";

/// Where a [`LoggingResource`] writes its lines. A sink is called from any thread, without a
/// lock of the resource held.
pub trait LogSink: Send + Sync + fmt::Debug + 'static {
    /// Writes one line (`line` has no newline).
    fn write_line(&self, line: &str) -> io::Result<()>;

    /// Writes out what is buffered.
    fn flush(&self) -> io::Result<()>;
}

/// A log file, buffered (flushed after each line with `auto_flush`, else by
/// [`LoggingResource::flush`] and when the resource is dropped).
#[derive(Debug)]
pub struct FileSink {
    path: PathBuf,
    file: Mutex<BufWriter<File>>,
    auto_flush: bool,
}

impl FileSink {
    /// Creates (or truncates) the file at `path`.
    pub fn create(path: impl AsRef<Path>, auto_flush: bool) -> io::Result<FileSink> {
        let path = path.as_ref().to_path_buf();
        let file = File::create(&path)?;
        Ok(FileSink {
            path,
            file: Mutex::new(BufWriter::new(file)),
            auto_flush,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl LogSink for FileSink {
    fn write_line(&self, line: &str) -> io::Result<()> {
        let mut file = self.file.lock();
        writeln!(file, "{line}")?;
        if self.auto_flush {
            file.flush()?;
        }
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        self.file.lock().flush()
    }
}

/// Passes allocations on to `upstream` and logs each one, and each free, as a CSV line: the OS
/// thread id, the UTC time of day (`HH:MM:SS.ffffff`), the action (`allocate`,
/// `allocate failure`, `free`), the address, the size, the stream (the queue's native work
/// stream: a CUDA stream or a `sycl::queue*`, `0x0` for none), the kind and the device
/// (RMM's `logging_resource_adaptor`, plus the last two columns). [`super::replay`] runs a log
/// again against any resource.
#[derive(Debug)]
pub struct LoggingResource {
    upstream: Arc<dyn MemoryResource>,
    sink: Arc<dyn LogSink>,
    /// The stream and device columns, the same on every line.
    stream: usize,
    device: String,
    /// The first failure to write a line, reported by [`LoggingResource::flush`].
    write_error: Mutex<Option<io::Error>>,
}

impl LoggingResource {
    /// Logs the allocations made through it from `upstream` to `sink`, which gets
    /// [`LOG_HEADER`] at once.
    pub fn new(upstream: Arc<dyn MemoryResource>, sink: Arc<dyn LogSink>) -> Result<Arc<Self>> {
        sink.write_line(LOG_HEADER)
            .map_err(|err| crate::Error::invalid("log", format!("cannot write the log: {err}")))?;
        let queue = upstream.queue();
        let stream = queue.interop().dlpack_work_stream().unwrap_or(0);
        let device = queue.device().selector.clone();
        Ok(Arc::new(LoggingResource {
            upstream,
            sink,
            stream,
            device,
            write_error: Mutex::new(None),
        }))
    }

    /// Logs to a new file at `path` (RMM's `log_file_name`).
    pub fn to_file(
        upstream: Arc<dyn MemoryResource>,
        path: impl AsRef<Path>,
        auto_flush: bool,
    ) -> Result<Arc<Self>> {
        let path = path.as_ref();
        let sink = FileSink::create(path, auto_flush).map_err(|err| {
            crate::Error::invalid(
                "log_file_name",
                format!("cannot create {}: {err}", path.display()),
            )
        })?;
        LoggingResource::new(upstream, Arc::new(sink))
    }

    /// Where the lines go.
    pub fn sink(&self) -> &Arc<dyn LogSink> {
        &self.sink
    }

    /// Writes out buffered lines; the first line that could not be written, if any, is the
    /// error (once).
    pub fn flush(&self) -> io::Result<()> {
        if let Some(err) = self.write_error.lock().take() {
            return Err(err);
        }
        self.sink.flush()
    }

    fn log(&self, action: &str, ptr: usize, kind: MemKind, size: usize) {
        let line = format!(
            "{},{},{action},{ptr:#x},{size},{:#x},{kind},{}",
            thread_id(),
            time_of_day(),
            self.stream,
            self.device
        );
        // A log that cannot be written must not fail the program's allocations.
        if let Err(err) = self.sink.write_line(&line) {
            self.write_error.lock().get_or_insert(err);
        }
    }
}

/// The OS thread id, as RMM's log has it (asked of the kernel once per thread).
fn thread_id() -> i64 {
    thread_local! {
        // SAFETY: gettid takes no arguments and cannot fail.
        static ID: i64 = i64::from(unsafe { libc::gettid() });
    }
    ID.with(|id| *id)
}

/// The UTC time of day, `HH:MM:SS.ffffff`.
fn time_of_day() -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let seconds = now.as_secs() % 86_400;
    format!(
        "{:02}:{:02}:{:02}.{:06}",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60,
        now.subsec_micros()
    )
}

impl Adaptor for LoggingResource {
    fn upstream(&self) -> &Arc<dyn MemoryResource> {
        &self.upstream
    }

    fn allocated(&self, ptr: Option<NonNull<u8>>, kind: MemKind, size: usize, _align: usize) {
        match ptr {
            Some(ptr) => self.log("allocate", ptr.as_ptr() as usize, kind, size),
            None => self.log("allocate failure", 0, kind, size),
        }
    }

    // Logged before upstream has it back: upstream may hand the address out again at once, and
    // the log must show the free before that allocation.
    fn freeing(
        &self,
        ptr: NonNull<u8>,
        kind: MemKind,
        size: usize,
        _align: usize,
        _after: &FreeAfter,
    ) {
        self.log("free", ptr.as_ptr() as usize, kind, size);
    }
}

impl Drop for LoggingResource {
    fn drop(&mut self) {
        let _ = self.sink.flush();
    }
}
