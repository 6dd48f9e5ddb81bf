//! What the benchmark examples share: rows of devbuf against a reference timed in alternating
//! rounds of one run, each row's ratio the median of the per-round ratios, printed as a Markdown
//! table and appended as JSON lines to the file `DEVBUF_BENCH_JSON` names, when set.

#![allow(dead_code)] // each example uses what it needs

use std::io::Write;
use std::time::Instant;

/// Nanoseconds per call of `calls` calls of `op`.
pub fn time_ns(calls: usize, op: &mut impl FnMut()) -> f64 {
    let start = Instant::now();
    for _ in 0..calls {
        op();
    }
    start.elapsed().as_nanos() as f64 / calls as f64
}

pub fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[sorted.len() / 2]
}

/// One devbuf side of a row: its case, its goal and one call.
pub type Side<'a> = (&'static str, Option<f64>, &'a mut dyn FnMut());

/// One case: devbuf's and the reference's ns per call in each round.
pub struct Row {
    case: &'static str,
    reference: &'static str,
    goal: Option<f64>,
    ours: Vec<f64>,
    theirs: Vec<f64>,
}

impl Row {
    /// Times `ours` and `theirs` in `rounds` alternating rounds of `calls` calls each.
    pub fn alternate(
        case: &'static str,
        reference: &'static str,
        goal: Option<f64>,
        (rounds, calls): (usize, usize),
        mut ours: impl FnMut(),
        theirs: impl FnMut(),
    ) -> Row {
        let side: [Side; 1] = [(case, goal, &mut ours)];
        let [row] = Row::against_one_reference(reference, (rounds, calls), theirs, side);
        row
    }

    /// Rows whose devbuf sides share one measurement of the reference: each round times the
    /// reference, then every side, `calls` calls each. glibc's `posix_memalign` takes 35–50 ns
    /// here depending on the heap's history (which chunks its split leaves where), so a
    /// reference timed separately for each row was not the same reference in every row.
    pub fn against_one_reference<const N: usize>(
        reference: &'static str,
        (rounds, calls): (usize, usize),
        mut theirs: impl FnMut(),
        mut sides: [Side<'_>; N],
    ) -> [Row; N] {
        // One whole round of warm-up: the first calls of each side (caches, pools, the heap's
        // first splits) are not its steady state.
        time_ns(calls, &mut theirs);
        for (_, _, ours) in &mut sides {
            time_ns(calls, ours);
        }
        let mut reference_ns = Vec::new();
        let mut ours_ns = [(); N].map(|()| Vec::new());
        for round in 0..rounds {
            // A row of its own times the reference last in every other round: whichever side a
            // round timed first read a few percent slower in the 64 MiB copies. Rows that share
            // the reference keep one order, so that each side always follows the same one, whose
            // state (caches, heap) it inherits: alternating it moved them by up to 5 ns.
            let reference_last = N == 1 && round % 2 == 1;
            if !reference_last {
                reference_ns.push(time_ns(calls, &mut theirs));
            }
            for ((_, _, ours), times) in sides.iter_mut().zip(&mut ours_ns) {
                times.push(time_ns(calls, ours));
            }
            if reference_last {
                reference_ns.push(time_ns(calls, &mut theirs));
            }
        }
        let mut times = ours_ns.into_iter();
        sides.map(|(case, goal, _)| Row {
            case,
            reference,
            goal,
            ours: times.next().unwrap_or_default(),
            theirs: reference_ns.clone(),
        })
    }

    fn ratios(&self) -> Vec<f64> {
        self.ours
            .iter()
            .zip(&self.theirs)
            .map(|(a, b)| a / b)
            .collect()
    }

    pub fn ratio(&self) -> f64 {
        median(&self.ratios())
    }

    /// The lowest and highest per-round ratio.
    fn spread(&self) -> (f64, f64) {
        let ratios = self.ratios();
        let low = ratios.iter().copied().fold(f64::INFINITY, f64::min);
        (low, ratios.iter().copied().fold(0.0, f64::max))
    }

    fn verdict(&self) -> String {
        match self.goal {
            None => "—".into(),
            Some(goal) if self.ratio() <= goal => format!("≤ {goal:?}×: meets"),
            Some(goal) => format!("≤ {goal:?}×: MISSES"),
        }
    }

    fn markdown(&self) -> String {
        let (low, high) = self.spread();
        format!(
            "| {} | {} | {} ({}) | {:.3}× ({low:.3}–{high:.3}) | {} |",
            self.case,
            show(median(&self.ours)),
            show(median(&self.theirs)),
            self.reference,
            self.ratio(),
            self.verdict()
        )
    }

    fn json(&self, section: &str) -> String {
        let (low, high) = self.spread();
        let goal = self.goal.map_or("null".into(), |g| format!("{g:?}"));
        let meets = self
            .goal
            .map_or("null".into(), |g| (self.ratio() <= g).to_string());
        format!(
            "{{\"section\": {}, \"case\": {}, \"reference\": {}, \"unit\": \"ns\", \"devbuf\": {}, \
             \"peer\": {}, \"ratio\": {}, \"ratio_spread\": [{low}, {high}], \"goal\": {goal}, \
             \"meets\": {meets}, \"rounds\": {}}}",
            quoted(section),
            quoted(self.case),
            quoted(self.reference),
            median(&self.ours),
            median(&self.theirs),
            self.ratio(),
            self.ours.len()
        )
    }
}

fn show(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{ns:.1} ns")
    }
}

fn quoted(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

/// Prints `rows` as a Markdown table, and appends them to `DEVBUF_BENCH_JSON`'s file, when set.
pub fn write_rows(section: &str, rows: &[Row]) -> Result<(), String> {
    println!("| case | devbuf | reference | devbuf / reference (spread of rounds) | goal |");
    println!("|---|---:|---:|---:|---|");
    for row in rows {
        println!("{}", row.markdown());
    }
    if let Ok(path) = std::env::var("DEVBUF_BENCH_JSON") {
        let mut out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|err| format!("{path}: {err}"))?;
        for row in rows {
            writeln!(out, "{}", row.json(section)).map_err(|err| format!("{path}: {err}"))?;
        }
    }
    Ok(())
}
