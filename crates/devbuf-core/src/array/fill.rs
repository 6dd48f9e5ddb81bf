//! Filling an array with one value (`devbuf.full`, `x.fill(value)`, `x[...] = value`): a byte
//! fill where every byte of the value is the same (zeros, -1), else the value copied in once and
//! then doubled, copy by copy, so that `n` elements take about log2(n) device copies and no
//! kernel. A strided array is filled run by run (its contiguous stretches) from one host run of
//! the value.

use std::sync::Arc;

use super::Array;
use crate::{Buffer, Error, Event, HostQueue, MemKind, Queue, Result, Runs, Scalar};

impl Array {
    /// Sets every element of this array (any layout) to `value`, converted to its dtype as
    /// [`crate::DType::encode_as`] converts it (errors naming `key`), and waits.
    pub fn fill_with(&self, value: Scalar) -> Result<()> {
        self.fill_as(value, "fill_value")
    }

    /// [`Array::fill_with`], its errors naming `key` (the argument that carried the value).
    #[allow(
        clippy::arithmetic_side_effects,
        reason = "positions inside the array's bytes, which Array::new placed inside its buffer; \
                  an element is one item, at least a byte"
    )]
    pub fn fill_as(&self, value: Scalar, key: &'static str) -> Result<()> {
        let element = self.fill_element(value, key)?;
        let layout = &self.layout;
        if !layout.is_c_contiguous() {
            // The host's own memory is filled by memory copies on the host (copy_runs_from).
            let fill = self.fill_runs(&element, !self.buffer.is_host_resident())?;
            return self.buffer.copy_runs_from(&fill.pattern, fill.runs());
        }
        let bytes = self
            .buffer
            .slice(layout.offset..layout.offset + layout.nbytes())?;
        if bytes.is_empty() {
            return Ok(());
        }
        if element.iter().all(|&b| b == element[0]) {
            return bytes.fill(element[0]);
        }
        bytes.slice(0..element.len())?.copy_from_host(&element)?;
        let mut filled = element.len();
        while filled < bytes.len() {
            let step = filled.min(bytes.len() - filled);
            bytes
                .slice(filled..filled + step)?
                .copy_from(&bytes.slice(0..step)?)?;
            filled += step;
        }
        Ok(())
    }

    /// [`Array::fill_as`] enqueued on `queue` (which must reach the memory), returning without
    /// waiting: the event of its last command, which the allocation records as pending work.
    #[allow(
        clippy::arithmetic_side_effects,
        reason = "positions inside the array's bytes, which Array::new placed inside its buffer; \
                  an element is one item, at least a byte"
    )]
    pub fn enqueue_fill_as(
        &self,
        value: Scalar,
        key: &'static str,
        queue: &Arc<dyn Queue>,
    ) -> Result<Event> {
        let element = self.fill_element(value, key)?;
        let layout = &self.layout;
        if !layout.is_c_contiguous() {
            let fill = self.fill_runs(&element, true)?;
            return self
                .buffer
                .enqueue_copy_runs_from(&fill.pattern, fill.runs(), queue);
        }
        let bytes = self
            .buffer
            .slice(layout.offset..layout.offset + layout.nbytes())?;
        if bytes.is_empty() || element.iter().all(|&b| b == element[0]) {
            return bytes.enqueue_fill_on(element[0], queue);
        }
        // Each copy reads what the one before wrote: the allocation's pending work orders them
        // on any queue, in order or not.
        let mut last = bytes
            .slice(0..element.len())?
            .enqueue_copy_from(&host_pattern(&element, 1)?, queue)?;
        let mut filled = element.len();
        while filled < bytes.len() {
            let step = filled.min(bytes.len() - filled);
            last = bytes
                .slice(filled..filled + step)?
                .enqueue_copy_from(&bytes.slice(0..step)?, queue)?;
            filled += step;
        }
        Ok(last)
    }

    /// The bytes of one element holding `value`, once the array is known writable.
    fn fill_element(&self, value: Scalar, key: &'static str) -> Result<Vec<u8>> {
        if self.readonly() {
            return Err(Error::invalid("destination", "this view is read-only"));
        }
        self.layout.dtype.encode_as(value, key)
    }

    /// Host memory holding contiguous runs of this (strided) array's elements, each `element`,
    /// and the runs a fill copies from it. With `as_rows`,
    /// consecutive runs read consecutive runs of the pattern (up to [`PATTERN_BYTES`] of them, then
    /// again from the first), so that a queue copies them as rows ([`Queue::copy_rows`]: a 2-D
    /// copy reads a row per row); else every run reads the one run there is, which the host's
    /// memory copies keep in cache.
    #[allow(
        clippy::arithmetic_side_effects,
        reason = "positions inside the array's bytes, which Array::new placed inside its buffer; \
                  an element is one item, at least a byte"
    )]
    fn fill_runs(&self, element: &[u8], as_rows: bool) -> Result<FillRuns> {
        let (len, starts) = self.layout.copy_runs(&self.layout);
        // An empty array has no runs (and runs of 0 bytes).
        let rows = match PATTERN_BYTES.checked_div(len) {
            Some(fit) if as_rows => starts.len().min(fit).max(1),
            _ => 1,
        };
        let pattern = host_pattern(element, rows * len / element.len())?;
        // The pattern's rows in turn, wrapping; one row, the host's path, is a plain map (about
        // a microsecond less for a 1000-run column than the counter).
        let starts = if rows == 1 {
            starts.into_iter().map(|(to, _)| (to, 0)).collect()
        } else {
            let mut row = 0;
            starts
                .into_iter()
                .map(|(to, _)| {
                    let from = row * len;
                    row += 1;
                    if row == rows {
                        row = 0;
                    }
                    (to, from)
                })
                .collect()
        };
        Ok(FillRuns {
            pattern,
            len,
            starts,
        })
    }
}

/// What a strided fill copies: runs of `len` bytes from `pattern` into the array.
struct FillRuns {
    pattern: Buffer,
    len: usize,
    starts: Vec<(usize, usize)>,
}

impl FillRuns {
    fn runs(&self) -> Runs<'_> {
        Runs {
            len: self.len,
            starts: &self.starts,
        }
    }
}

/// The most host memory a strided fill's pattern takes when its runs are copied as rows.
const PATTERN_BYTES: usize = 256 << 10;

/// `count` copies of `element` in host memory of the host backend, which every queue's copies
/// read.
fn host_pattern(element: &[u8], count: usize) -> Result<Buffer> {
    let bytes = element.repeat(count);
    let pattern = Buffer::alloc(&HostQueue::shared(), MemKind::Host, bytes.len())?;
    pattern.copy_from_host(&bytes)?;
    Ok(pattern)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::{Buffer, DType, HostQueue, Layout, MemKind, Queue};

    #[test]
    fn every_element_holds_the_value() {
        let queue: Arc<dyn Queue> = Arc::new(HostQueue::new());
        for n in [1, 2, 7, 64] {
            let layout = Layout::contiguous(DType::FLOAT32, &[n], 0).unwrap();
            let array = Array::new(
                Buffer::alloc(&queue, MemKind::Device, 4 * n).unwrap(),
                layout,
            )
            .unwrap();
            array.fill_with(Scalar::Float(1.5)).unwrap();
            let expected: Vec<u8> = (0..n).flat_map(|_| 1.5f32.to_ne_bytes()).collect();
            assert_eq!(array.buffer().to_vec().unwrap(), expected);
            array.fill_with(Scalar::Int(0)).unwrap();
            assert_eq!(array.buffer().to_vec().unwrap(), vec![0; 4 * n]);
        }
    }

    #[test]
    fn strided_fills_touch_only_the_elements() {
        let queue: Arc<dyn Queue> = Arc::new(HostQueue::new());
        let buffer = Buffer::alloc(&queue, MemKind::Device, 24).unwrap();
        let parent = Array::new(
            buffer.clone(),
            Layout::contiguous(DType::UINT16, &[3, 4], 0).unwrap(),
        )
        .unwrap();
        let every_other_column = parent
            .layout()
            .index(&[
                crate::Index::ALL,
                crate::Index::Slice {
                    start: Some(1),
                    stop: None,
                    step: Some(2),
                },
            ])
            .unwrap();
        let columns = Array::new(buffer.clone(), every_other_column).unwrap();
        for enqueued in [false, true] {
            buffer.fill(0).unwrap();
            if enqueued {
                columns
                    .enqueue_fill_as(Scalar::Int(0x0102), "value", &queue)
                    .unwrap()
                    .wait()
                    .unwrap();
            } else {
                columns.fill_as(Scalar::Int(0x0102), "value").unwrap();
            }
            let expected: Vec<u16> = (0..12)
                .map(|i| if i % 2 == 1 { 0x0102 } else { 0 })
                .collect();
            let expected: Vec<u8> = expected.iter().flat_map(|v| v.to_ne_bytes()).collect();
            assert_eq!(buffer.to_vec().unwrap(), expected);
        }
        let err = columns.fill_as(Scalar::Int(-1), "value").unwrap_err();
        assert!(
            err.to_string().starts_with("value: -1 is out of range"),
            "{err}"
        );
        let readonly = columns.clone().into_readonly(true);
        assert!(readonly.fill_as(Scalar::Int(1), "value").is_err());
    }

    #[test]
    fn enqueued_contiguous_fills_double_in_order() {
        let queue: Arc<dyn Queue> = Arc::new(HostQueue::new());
        for n in [1, 3, 64] {
            let array = Array::new(
                Buffer::alloc(&queue, MemKind::Device, 8 * n).unwrap(),
                Layout::contiguous(DType::FLOAT64, &[n], 0).unwrap(),
            )
            .unwrap();
            let done = array
                .enqueue_fill_as(Scalar::Float(2.5), "value", &queue)
                .unwrap();
            done.wait().unwrap();
            let expected: Vec<u8> = (0..n).flat_map(|_| 2.5f64.to_ne_bytes()).collect();
            assert_eq!(array.buffer().to_vec().unwrap(), expected);
        }
    }
}
