//! The size of the backend contract as a newcomer meets it: the trait methods the skeleton writes
//! (in `impl Queue`, `impl Interop` and `impl Backend` blocks; a provided macro such as
//! `hands_nothing_out!()` is one line, not its methods) stay at most
//! [`MOST_WRITTEN`] (docs/architecture.md, "Adding a backend").

use std::path::Path;

/// The most trait methods a host-like backend writes by the checklist.
const MOST_WRITTEN: usize = 15;

const TRAITS: [&str; 3] = ["Queue", "Interop", "Backend"];

/// The methods written directly inside each `impl <trait> for ...` block of `source`, by trait.
fn written_methods(source: &str) -> Vec<(&'static str, String)> {
    let mut found = Vec::new();
    let mut open: Option<(&'static str, usize)> = None;
    for line in source.lines() {
        let indent = line.len() - line.trim_start().len();
        let text = line.trim_start();
        match open {
            None => {
                for name in TRAITS {
                    let plain = format!("impl {name} for ");
                    let qualified = format!("impl devbuf_core::{name} for ");
                    if (text.starts_with(&plain) || text.starts_with(&qualified))
                        && text.ends_with('{')
                    {
                        open = Some((name, indent));
                    }
                }
            }
            Some((name, depth)) => {
                if indent == depth && text == "}" {
                    open = None;
                } else if indent == depth + 4 {
                    let signature = text.strip_prefix("unsafe ").unwrap_or(text);
                    if let Some(rest) = signature.strip_prefix("fn ") {
                        let method = rest.split(['(', '<']).next().unwrap_or(rest);
                        found.push((name, method.to_owned()));
                    }
                }
            }
        }
    }
    found
}

#[test]
fn the_skeleton_writes_at_most_fifteen_trait_methods() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut written = Vec::new();
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|ext| ext == "rs") {
            written.extend(written_methods(&std::fs::read_to_string(&path).unwrap()));
        }
    }
    // Each trait is implemented (a parser that found nothing must not pass).
    for name in TRAITS {
        assert!(
            written.iter().any(|(trait_name, _)| *trait_name == name),
            "no impl {name} found in {}",
            src.display()
        );
    }
    assert!(
        written.len() <= MOST_WRITTEN,
        "the skeleton writes {} trait methods, more than {MOST_WRITTEN}: {written:?}",
        written.len()
    );
}

#[test]
fn the_count_reads_methods_and_skips_macros() {
    let source = "\
impl Queue for Q {
    fn device(&self) -> &DeviceInfo {
        &self.device
    }

    devbuf_core::works_on_the_calling_thread!();

    unsafe fn deallocate(&self, ptr: NonNull<u8>) {
        fn nested() {}
    }
}

impl Other for Q {
    fn not_counted(&self) {}
}
";
    let names: Vec<_> = written_methods(source)
        .into_iter()
        .map(|(name, method)| format!("{name}::{method}"))
        .collect();
    assert_eq!(names, ["Queue::device", "Queue::deallocate"]);
}
