//! devbuf's debug log, RMM's: lines about what the memory resources do, kept or dropped by a
//! level that can change at run time ([`set_level`]), written to the file the
//! `DEVBUF_DEBUG_LOG_FILE` environment variable names (made anew at the first line, as RMM's
//! `RMM_DEBUG_LOG_FILE`) or else to stderr, each line as RMM's: `[thread][HH:MM:SS:micro UTC][level] text`.
//!
//! | level | what devbuf logs at it |
//! |---|---|
//! | trace | every allocation and free through an adaptor (pool, binning, limiting, statistics...) |
//! | debug | a pool taking a block from upstream, and giving one back; a device's current resource for a kind being set or reset |
//! | info, warn, critical | nothing (devbuf has no such events) |
//! | error | a pool refusing a request its maximum size leaves no room for |
//!
//! The level starts at off, not at RMM's info: a library writes nothing to stderr unless asked
//! (every refusal is raised to the caller anyway). Lines at the flush level ([`set_flush_level`])
//! or above are written out at once; the others wait in a buffer for [`flush`] or a later line at
//! the flush level. Each event costs the hot paths one relaxed atomic load while it is not kept.

use std::fmt;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

use crate::{Error, Result};

/// The environment variable that names the log's file.
pub const LOG_FILE_ENV: &str = "DEVBUF_DEBUG_LOG_FILE";

/// A line's level (RMM's `level_enum`), least severe first; [`LogLevel::Off`] as the log's level
/// keeps every line out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum LogLevel {
    /// Every allocation and free.
    Trace,
    /// Blocks a pool takes from and gives back to upstream; changes of the current resources.
    Debug,
    /// Nothing yet.
    Info,
    /// Nothing yet.
    Warn,
    /// Requests a pool refuses at its maximum size.
    Error,
    /// Nothing yet.
    Critical,
    /// No line.
    Off,
}

impl LogLevel {
    /// Every level, least severe first.
    pub const ALL: [LogLevel; 7] = [
        LogLevel::Trace,
        LogLevel::Debug,
        LogLevel::Info,
        LogLevel::Warn,
        LogLevel::Error,
        LogLevel::Critical,
        LogLevel::Off,
    ];

    /// The level of index `index` in [`LogLevel::ALL`] (RMM's numbering).
    pub fn from_index(index: u8) -> Result<LogLevel> {
        Self::ALL.get(usize::from(index)).copied().ok_or_else(|| {
            Error::invalid(
                "level",
                format!("{index} is no log level (0, trace, to 6, off)"),
            )
        })
    }

    /// The level's name, as RMM's lines show it.
    pub fn name(self) -> &'static str {
        match self {
            LogLevel::Trace => "trace",
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
            LogLevel::Critical => "critical",
            LogLevel::Off => "off",
        }
    }
}

static LEVEL: AtomicU8 = AtomicU8::new(LogLevel::Off as u8);
static FLUSH_LEVEL: AtomicU8 = AtomicU8::new(LogLevel::Warn as u8);
/// Opened at the first line.
static SINK: Mutex<Option<BufWriter<Box<dyn Write + Send>>>> = Mutex::new(None);

fn load(level: &AtomicU8) -> LogLevel {
    LogLevel::ALL[usize::from(level.load(Ordering::Relaxed))]
}

/// Lines of `level` and above are kept from now on.
pub fn set_level(level: LogLevel) {
    LEVEL.store(level as u8, Ordering::Relaxed);
}

/// The least severe level kept.
pub fn level() -> LogLevel {
    load(&LEVEL)
}

/// Lines of `level` and above are written out at once from now on.
pub fn set_flush_level(level: LogLevel) {
    FLUSH_LEVEL.store(level as u8, Ordering::Relaxed);
}

/// The least severe level written out at once.
pub fn flush_level() -> LogLevel {
    load(&FLUSH_LEVEL)
}

/// Whether a line of `level` would be kept.
#[inline]
pub fn should_log(level: LogLevel) -> bool {
    level != LogLevel::Off && level as u8 >= LEVEL.load(Ordering::Relaxed)
}

/// Writes out the lines waiting in the buffer.
pub fn flush() -> io::Result<()> {
    match SINK.lock().as_mut() {
        Some(sink) => sink.flush(),
        None => Ok(()),
    }
}

/// Writes one line of `level` (callers ask [`should_log`] first: the `debug_log!` macro).
/// A line that cannot be written is lost: logging never fails the operation it describes.
#[cold]
pub(crate) fn write(level: LogLevel, text: fmt::Arguments<'_>) {
    let mut sink = SINK.lock();
    let sink = sink.get_or_insert_with(open_sink);
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let seconds = since_epoch.as_secs() % 86_400;
    let _ = writeln!(
        sink,
        "[{:?}][{:02}:{:02}:{:02}:{:06}][{:<8}] {text}",
        std::thread::current().id(),
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60,
        since_epoch.subsec_micros(),
        level.name(),
    );
    if level >= flush_level() {
        let _ = sink.flush();
    }
}

fn open_sink() -> BufWriter<Box<dyn Write + Send>> {
    let file = std::env::var_os(LOG_FILE_ENV).and_then(|path| File::create(path).ok());
    BufWriter::new(match file {
        Some(file) => Box::new(file),
        None => Box::new(io::stderr()),
    })
}

/// Logs a line at a level when the log keeps that level: `debug_log!(LogLevel::Debug, "...", args)`.
macro_rules! debug_log {
    ($level:expr, $($text:tt)*) => {
        if $crate::debug_log::should_log($level) {
            $crate::debug_log::write($level, format_args!($($text)*));
        }
    };
}
pub(crate) use debug_log;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_number_as_rmms_and_off_keeps_nothing() {
        for (index, level) in LogLevel::ALL.iter().enumerate() {
            assert_eq!(LogLevel::from_index(index as u8).unwrap(), *level);
        }
        assert!(LogLevel::from_index(7).is_err());
        // The level is process-wide: this test only reads what a level would keep.
        let before = level();
        set_level(LogLevel::Warn);
        assert!(!should_log(LogLevel::Info) && should_log(LogLevel::Error));
        assert!(!should_log(LogLevel::Off));
        set_level(before);
    }
}
