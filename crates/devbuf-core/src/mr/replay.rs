//! [`replay`]: runs a [`super::LoggingResource`] log (or RMM's) again against any resource.

use std::collections::HashMap;
use std::io::BufRead;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{FreeAfter, MemoryResource};
use crate::{DEFAULT_ALIGNMENT, Error, MemKind, Result};

/// What a replay did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplayReport {
    /// Allocations made.
    pub allocations: usize,
    /// Frees made.
    pub frees: usize,
    /// Allocations the resource refused (the program's own failures, `allocate failure` lines,
    /// are not replayed).
    pub failures: usize,
    /// Frees of addresses the log never allocated (the log began after they were made) or whose
    /// allocation the resource refused: skipped.
    pub unmatched_frees: usize,
    /// The most bytes allocated at once.
    pub peak_bytes: usize,
    /// Allocations the log left live, freed at the end of the replay.
    pub left_live: usize,
    /// The time the resource took, allocating and freeing.
    pub elapsed: Duration,
}

/// The columns a replay reads, by position in the header.
struct Columns {
    action: usize,
    pointer: usize,
    size: usize,
    kind: Option<usize>,
}

impl Columns {
    fn of(header: &str) -> Result<Columns> {
        let names: Vec<&str> = header.trim().split(',').map(str::trim).collect();
        let find = |name: &'static str| {
            names
                .iter()
                .position(|column| column.eq_ignore_ascii_case(name))
                .ok_or_else(|| {
                    Error::invalid(
                        "log",
                        format!("the header {header:?} has no {name} column (RMM's columns are Thread,Time,Action,Pointer,Size,Stream)"),
                    )
                })
        };
        Ok(Columns {
            action: find("Action")?,
            pointer: find("Pointer")?,
            size: find("Size")?,
            kind: find("Kind").ok(),
        })
    }
}

/// One allocation of the replay, by the address the log gave it.
struct Live {
    ptr: NonNull<u8>,
    kind: MemKind,
    size: usize,
}

/// Runs every allocation and free of `log` (a CSV log with RMM's columns, devbuf's `Kind`
/// column optional) against `resource`, in order, on this thread: allocations of `default_kind`
/// where the log names no kind, each aligned to [`DEFAULT_ALIGNMENT`]. Memory the log leaves
/// live is freed at the end. A line that cannot be read is an error naming it; what was
/// allocated is freed first.
pub fn replay(
    log: impl BufRead,
    resource: &Arc<dyn MemoryResource>,
    default_kind: MemKind,
) -> Result<ReplayReport> {
    let mut lines = log.lines().enumerate();
    let header = match lines.next() {
        Some((_, line)) => line.map_err(|err| unreadable(1, &err.to_string()))?,
        None => return Err(Error::invalid("log", "the log is empty: it has no header")),
    };
    let columns = Columns::of(&header)?;
    let mut report = ReplayReport::default();
    let mut live: HashMap<usize, Live> = HashMap::new();
    let mut in_use = 0usize;
    let mut outcome = Ok(());
    for (index, line) in lines {
        let number = index.saturating_add(1);
        let line = match line {
            Ok(line) if line.trim().is_empty() => continue,
            Ok(line) => line,
            Err(err) => {
                outcome = Err(unreadable(number, &err.to_string()));
                break;
            }
        };
        let step =
            Step::parse(&line, &columns, default_kind).map_err(|why| unreadable(number, &why));
        let step = match step {
            Ok(step) => step,
            Err(err) => {
                outcome = Err(err);
                break;
            }
        };
        match step {
            Step::Allocate {
                address,
                kind,
                size,
            } => {
                let start = Instant::now();
                let allocated = resource.allocate(kind, size.max(1), DEFAULT_ALIGNMENT);
                report.elapsed = report.elapsed.saturating_add(start.elapsed());
                // Counts and sums of allocations that exist: they fit, and saturate if a resource
                // lied about its memory.
                match allocated {
                    Ok(ptr) => {
                        report.allocations = report.allocations.saturating_add(1);
                        in_use = in_use.saturating_add(size);
                        report.peak_bytes = report.peak_bytes.max(in_use);
                        if let Some(earlier) = live.insert(address, Live { ptr, kind, size }) {
                            // The log allocated an address twice without a free between: the
                            // earlier one's free was not logged. Ours goes back now.
                            in_use = in_use.saturating_sub(earlier.size);
                            free(resource, earlier, &mut report);
                        }
                    }
                    Err(_) => report.failures = report.failures.saturating_add(1),
                }
            }
            Step::Free { address } => match live.remove(&address) {
                Some(allocation) => {
                    in_use = in_use.saturating_sub(allocation.size);
                    report.frees = report.frees.saturating_add(1);
                    free(resource, allocation, &mut report);
                }
                None => report.unmatched_frees = report.unmatched_frees.saturating_add(1),
            },
            Step::Skip => {}
        }
    }
    report.left_live = live.len();
    for (_, allocation) in live.drain() {
        free(resource, allocation, &mut report);
    }
    outcome.map(|()| report)
}

fn free(resource: &Arc<dyn MemoryResource>, allocation: Live, report: &mut ReplayReport) {
    let start = Instant::now();
    // SAFETY: `allocation` is one of `resource`'s allocations made above with these arguments,
    // freed once (it left `live`), and nothing else ever saw the memory.
    unsafe {
        resource.deallocate(
            allocation.ptr,
            allocation.kind,
            allocation.size.max(1),
            DEFAULT_ALIGNMENT,
            FreeAfter::Now,
        );
    }
    report.elapsed = report.elapsed.saturating_add(start.elapsed());
}

fn unreadable(number: usize, why: &str) -> Error {
    Error::invalid("log", format!("line {number}: {why}"))
}

/// One line of the log.
enum Step {
    Allocate {
        address: usize,
        kind: MemKind,
        size: usize,
    },
    Free {
        address: usize,
    },
    /// A line the replay does not run (`allocate failure`).
    Skip,
}

impl Step {
    fn parse(
        line: &str,
        columns: &Columns,
        default_kind: MemKind,
    ) -> std::result::Result<Step, String> {
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        let field = |at: usize, name: &str| {
            fields
                .get(at)
                .copied()
                .ok_or_else(|| format!("{line:?} has no {name} column"))
        };
        let address = || {
            let text = field(columns.pointer, "Pointer")?;
            let digits = text.trim_start_matches("0x").trim_start_matches("0X");
            usize::from_str_radix(digits, 16)
                .map_err(|_| format!("Pointer {text:?} is not a hexadecimal address"))
        };
        match field(columns.action, "Action")? {
            "allocate" => {
                let size = field(columns.size, "Size")?;
                let size = size
                    .parse()
                    .map_err(|_| format!("Size {size:?} is not a number of bytes"))?;
                let kind = match columns.kind {
                    Some(at) => {
                        let kind = field(at, "Kind")?;
                        kind.parse()
                            .map_err(|_| format!("Kind {kind:?} is not host, device or shared"))?
                    }
                    None => default_kind,
                };
                Ok(Step::Allocate {
                    address: address()?,
                    kind,
                    size,
                })
            }
            "free" => Ok(Step::Free {
                address: address()?,
            }),
            "allocate failure" => Ok(Step::Skip),
            other => Err(format!(
                "Action {other:?} is not allocate, allocate failure or free"
            )),
        }
    }
}
