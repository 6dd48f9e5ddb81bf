//! The conformance matrix: every check of [`devbuf_core::conformance`] on every device of every
//! backend compiled in. Unavailable backends and unusable devices are rows of skips with the reason.

use std::fmt;

use devbuf_core::conformance::{CHECKS, Outcome, run_one};

use crate::registry::split_selector;
use crate::{Availability, backends};

/// One device's (or one unavailable backend's) results.
#[derive(Debug, Clone)]
pub struct Row {
    /// The device's selector, or the backend name when it has no usable runtime.
    pub label: String,
    /// `(check name, outcome)` for every check.
    pub outcomes: Vec<(&'static str, Outcome)>,
    /// What stands in for the hardware when the device is a test double's.
    pub test_double: Option<String>,
}

/// Which cells of the matrix to run: every row and check, or one row (a device's selector or an
/// unavailable backend's name), or one check, or both (`python -m devbuf matrix` runs each cell
/// so, in a process of its own, so that a crash costs one cell, not the matrix).
#[derive(Debug, Clone, Copy, Default)]
pub struct Selection<'a> {
    pub row: Option<&'a str>,
    pub check: Option<&'a str>,
}

impl Selection<'_> {
    fn row(&self, label: &str) -> bool {
        self.row.is_none_or(|row| row == label)
    }

    fn checks(&self) -> impl Iterator<Item = &'static devbuf_core::conformance::Check> + '_ {
        CHECKS
            .iter()
            .filter(|check| self.check.is_none_or(|name| name == check.name))
    }
}

/// The names of the checks, the matrix's columns, in order.
pub fn checks() -> Vec<&'static str> {
    CHECKS.iter().map(|check| check.name).collect()
}

impl Row {
    fn skipped(label: String, reason: &str, selection: Selection<'_>) -> Row {
        let outcomes = selection
            .checks()
            .map(|check| (check.name, Outcome::Skip(reason.to_string())))
            .collect();
        Row {
            label,
            outcomes,
            test_double: None,
        }
    }

    /// Whether any check failed.
    pub fn failed(&self) -> bool {
        self.outcomes
            .iter()
            .any(|(_, o)| matches!(o, Outcome::Fail(_)))
    }
}

/// The matrix for every backend compiled in.
pub fn run() -> Vec<Row> {
    run_selected(Selection::default())
}

/// The cells of the matrix that `selection` names.
pub fn run_selected(selection: Selection<'_>) -> Vec<Row> {
    let mut rows = Vec::new();
    for backend in backends() {
        if let Availability::Unavailable(reason) = backend.availability() {
            if selection.row(backend.name()) {
                rows.push(Row::skipped(backend.name().into(), &reason, selection));
            }
            continue;
        }
        let devices = match backend.devices() {
            Ok(devices) => devices,
            Err(err) if selection.row(backend.name()) => {
                rows.push(Row {
                    label: backend.name().into(),
                    outcomes: vec![("devices", Outcome::Fail(err.to_string()))],
                    test_double: None,
                });
                continue;
            }
            Err(_) => continue,
        };
        for device in devices {
            let label = device.selector.clone();
            if !selection.row(&label) {
                continue;
            }
            if let Some(reason) = &device.unusable_reason {
                rows.push(Row::skipped(
                    label,
                    &format!("{}: {reason}", device.name),
                    selection,
                ));
                continue;
            }
            let test_double = device.test_double.clone();
            match backend.open(split_selector(&device.selector).1) {
                Ok(queue) => rows.push(Row {
                    label,
                    outcomes: selection
                        .checks()
                        .map(|check| (check.name, run_one(check, &queue)))
                        .collect(),
                    test_double,
                }),
                Err(err) => rows.push(Row {
                    label,
                    outcomes: vec![("open", Outcome::Fail(err.to_string()))],
                    test_double,
                }),
            }
        }
    }
    rows
}

/// Prints rows as a table of pass / FAIL / skip, with the reasons as numbered notes below it.
pub struct Table<'a>(pub &'a [Row]);

impl fmt::Display for Table<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let label_width = self
            .0
            .iter()
            .map(|r| r.label.len())
            .max()
            .unwrap_or(0)
            .max(6);
        write!(f, "{:label_width$}", "device")?;
        for check in CHECKS.iter() {
            write!(f, "  {:>7}", check.name)?;
        }
        writeln!(f)?;
        let mut notes: Vec<String> = Vec::new();
        for row in self.0 {
            write!(f, "{:label_width$}", row.label)?;
            for (_, outcome) in &row.outcomes {
                let cell = match outcome {
                    Outcome::Pass => "pass".to_string(),
                    Outcome::Fail(why) | Outcome::Skip(why) => {
                        let word = if matches!(outcome, Outcome::Fail(_)) {
                            "FAIL"
                        } else {
                            "skip"
                        };
                        let note = notes.iter().position(|n| n == why).unwrap_or_else(|| {
                            notes.push(why.clone());
                            notes.len() - 1
                        });
                        format!("{word}[{}]", note + 1)
                    }
                };
                write!(f, "  {cell:>7}")?;
            }
            writeln!(f)?;
        }
        for (i, note) in notes.iter().enumerate() {
            writeln!(f, "[{}] {note}", i + 1)?;
        }
        for row in self.0 {
            if let Some(double) = &row.test_double {
                writeln!(f, "{} is NOT hardware: {double}", row.label)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_selection_runs_only_its_cell() {
        let selection = Selection {
            row: Some("host"),
            check: Some("fill"),
        };
        let rows = run_selected(selection);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].label, "host");
        assert!(matches!(rows[0].outcomes[..], [("fill", Outcome::Pass)]));
        assert!(
            run_selected(Selection {
                row: Some("no such row"),
                check: None
            })
            .is_empty()
        );
        assert_eq!(checks().len(), CHECKS.len());
    }
}
