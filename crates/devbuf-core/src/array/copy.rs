//! Copies between arrays of any layouts: the byte runs two layouts of one shape share (a whole
//! contiguous array is one run, a transposed or strided one many), and copies that move those
//! runs and nothing else.

use std::sync::Arc;

use super::{Array, Dims, Layout};
use crate::buffer::Runs;
use crate::{Buffer, Error, Event, MemKind, Queue, Result};

impl Layout {
    /// The runs a copy of `src`'s elements into this layout's moves (same shape and item size):
    /// the bytes per run, and where each run starts in either buffer, element by element in C
    /// order. Innermost dimensions contiguous on both sides merge into one run.
    #[allow(
        clippy::arithmetic_side_effects,
        reason = "layouts of arrays, whose elements check_fits placed inside their buffers: every \
                  run and position is a byte inside one"
    )]
    pub fn copy_runs(&self, src: &Layout) -> (usize, Vec<(usize, usize)>) {
        debug_assert_eq!(self.shape, src.shape);
        if self.size() == 0 {
            return (0, Vec::new());
        }
        let mut dims: Dims<(usize, isize, isize)> = self
            .shape
            .iter()
            .zip(&self.strides)
            .zip(&src.strides)
            .filter(|((n, _), _)| **n != 1)
            .map(|((&n, &to), &from)| (n, to, from))
            .collect();
        let mut len = self.dtype.itemsize();
        while let Some(&(n, to, from)) = dims.last() {
            if to != len as isize || from != len as isize {
                break;
            }
            len *= n;
            dims.pop();
        }
        let count = dims.iter().map(|d| d.0).product();
        let mut starts = Vec::with_capacity(count);
        let mut position: Dims<usize> = Dims::from_elem(0, dims.len());
        let (mut to, mut from) = (self.offset as isize, src.offset as isize);
        for _ in 0..count {
            // check_fits placed every element of both views inside their buffers.
            starts.push((to as usize, from as usize));
            // Step the odometer: the last dimension fastest, carrying into the ones before.
            for (axis, &(n, to_stride, from_stride)) in dims.iter().enumerate().rev() {
                position[axis] += 1;
                to += to_stride;
                from += from_stride;
                if position[axis] < n {
                    break;
                }
                position[axis] = 0;
                to -= to_stride * n as isize;
                from -= from_stride * n as isize;
            }
        }
        (len, starts)
    }
}

impl Array {
    /// Copies the elements of `src` (same dtype and shape, any layout and device) into this
    /// array's elements and waits. Only the bytes the elements occupy move, on either side: a
    /// strided slice copies its elements, not the span between them.
    pub fn copy_elements_from(&self, src: &Array) -> Result<()> {
        self.check_copy_source(src)?;
        match self.single_runs(src)? {
            Some((to, from)) => to.copy_from(&from),
            None => {
                let (len, starts) = self.layout.copy_runs(&src.layout);
                let runs = Runs {
                    len,
                    starts: &starts,
                };
                self.buffer.copy_runs_from(&src.buffer, runs)
            }
        }
    }

    /// [`Array::copy_elements_from`] enqueued on `queue` (which must reach both), returning
    /// without waiting; the work is recorded as [`Buffer::enqueue_copy_from`]'s.
    pub fn enqueue_copy_elements_from(&self, src: &Array, queue: &Arc<dyn Queue>) -> Result<Event> {
        self.check_copy_source(src)?;
        match self.single_runs(src)? {
            Some((to, from)) => to.enqueue_copy_from(&from, queue),
            None => {
                let (len, starts) = self.layout.copy_runs(&src.layout);
                let runs = Runs {
                    len,
                    starts: &starts,
                };
                self.buffer.enqueue_copy_runs_from(&src.buffer, runs, queue)
            }
        }
    }

    /// Copies the elements in C order into `dst`, host memory of this array's `nbytes`, on
    /// `queue`, and waits: only the elements' bytes move, straight into `dst` (a strided view's
    /// runs, as rows where they are: [`Buffer::copy_runs_to_host_on`]).
    pub fn copy_elements_to_host_on(&self, dst: &mut [u8], queue: &Arc<dyn Queue>) -> Result<()> {
        let packed = Layout::contiguous(self.layout.dtype, &self.layout.shape, 0)?;
        if dst.len() != packed.nbytes() {
            return Err(Error::invalid(
                "out",
                format!(
                    "destination has {} bytes, the elements {}",
                    dst.len(),
                    packed.nbytes()
                ),
            ));
        }
        let (len, starts) = packed.copy_runs(&self.layout);
        let runs = Runs {
            len,
            starts: &starts,
        };
        self.buffer.copy_runs_to_host_on(dst, runs, queue)
    }

    /// A writable copy of the elements in a new `kind` allocation on `queue`. An array whose
    /// elements fill their span (contiguous in any order) is copied whole and keeps its strides;
    /// any other (a strided slice) becomes C-contiguous, and only its elements' bytes move.
    #[allow(
        clippy::arithmetic_side_effects,
        reason = "the extent of an array's elements, which Array::new placed inside its buffer"
    )]
    pub fn copy_to(&self, queue: &Arc<dyn Queue>, kind: MemKind) -> Result<Array> {
        let (low, end) = self.layout.extent().unwrap_or((0, 0));
        if (end - low) as usize == self.layout.nbytes() {
            // check_fits guaranteed the span lies inside the buffer.
            let start = (self.layout.offset as i128 + low) as usize;
            let span = self.buffer.slice(start..start + (end - low) as usize)?;
            let copy = Buffer::alloc(queue, kind, span.len())?;
            copy.copy_from(&span)?;
            let layout = Layout {
                offset: (-low) as usize,
                readonly: false,
                ..self.layout.clone()
            };
            return Ok(Array {
                buffer: copy,
                layout,
            });
        }
        self.compact_copy(queue, kind)
    }

    /// A writable C-contiguous copy of the elements in a new `kind` allocation on `queue`
    /// (NumPy's and CuPy's `x.copy()`): only the elements' bytes move.
    pub fn compact_copy(&self, queue: &Arc<dyn Queue>, kind: MemKind) -> Result<Array> {
        let layout = Layout::contiguous(self.layout.dtype, &self.layout.shape, 0)?;
        let copy = Array::new(Buffer::alloc(queue, kind, layout.nbytes())?, layout)?;
        copy.copy_elements_from(self)?;
        Ok(copy)
    }

    fn check_copy_source(&self, src: &Array) -> Result<()> {
        if self.layout.readonly {
            return Err(Error::invalid("destination", "this view is read-only"));
        }
        if src.layout.dtype != self.layout.dtype || src.layout.shape != self.layout.shape {
            return Err(Error::invalid(
                "src",
                format!(
                    "{} elements of shape {:?} cannot be copied into {} elements of shape {:?}",
                    src.layout.dtype, src.layout.shape, self.layout.dtype, self.layout.shape
                ),
            ));
        }
        Ok(())
    }

    /// Whether a waited-for write into this array's elements (of `source`'s elements, or of one
    /// value when `None`) runs on the host rather than as runtime copies: the elements lie in
    /// several runs on one side, and both sides are the host's own memory
    /// ([`Buffer::copy_runs_from`]). Then a caller that named a stream and waits for the write
    /// loses nothing by letting it run so: the host waits for all the work on the memory first.
    pub fn writes_on_the_host(&self, source: Option<&Array>) -> bool {
        let in_runs = !self.layout.is_c_contiguous()
            || source.is_some_and(|source| !source.layout.is_c_contiguous());
        in_runs
            && self.buffer.is_host_resident()
            && source.is_none_or(|source| source.buffer.is_host_resident())
    }

    /// Both arrays' bytes, when each is one C-contiguous run: the copy is then one copy.
    #[allow(
        clippy::arithmetic_side_effects,
        reason = "a contiguous array's bytes, which Array::new placed inside its buffer"
    )]
    fn single_runs(&self, src: &Array) -> Result<Option<(Buffer, Buffer)>> {
        let contiguous = |array: &Array| {
            let layout = &array.layout;
            (layout.is_c_contiguous()).then(|| {
                array
                    .buffer
                    .slice(layout.offset..layout.offset + layout.nbytes())
            })
        };
        match (contiguous(self), contiguous(src)) {
            (Some(to), Some(from)) => Ok(Some((to?, from?))),
            _ => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, HostQueue};

    fn numbered(queue: &Arc<dyn Queue>, kind: MemKind, n: usize) -> Buffer {
        let buffer = Buffer::alloc(queue, kind, n).unwrap();
        buffer
            .copy_from_host(&(0..n).map(|i| i as u8).collect::<Vec<u8>>())
            .unwrap();
        buffer
    }

    #[test]
    fn runs_merge_contiguous_inner_dimensions() {
        let c = Layout::contiguous(DType::UINT8, &[2, 3], 0).unwrap();
        assert_eq!(c.copy_runs(&c), (6, vec![(0, 0)]));
        let t = c.transpose(None).unwrap();
        let dst = Layout::contiguous(DType::UINT8, &[3, 2], 10).unwrap();
        assert_eq!(
            dst.copy_runs(&t),
            (
                1,
                vec![(10, 0), (11, 3), (12, 1), (13, 4), (14, 2), (15, 5)]
            )
        );
        // Rows of a column slice are runs of 2 bytes.
        let wide = Layout::new(DType::UINT8, &[2, 2], Some(&[8, 1]), 3, false).unwrap();
        let dst = Layout::contiguous(DType::UINT8, &[2, 2], 0).unwrap();
        assert_eq!(dst.copy_runs(&wide), (2, vec![(0, 3), (2, 11)]));
    }

    #[test]
    fn strided_copies_move_only_the_elements() {
        let queue: Arc<dyn Queue> = Arc::new(HostQueue::new());
        let parent = Array::new(
            numbered(&queue, MemKind::Device, 24),
            Layout::contiguous(DType::UINT16, &[3, 4], 0).unwrap(),
        )
        .unwrap();
        let step = |step| crate::Index::Slice {
            start: None,
            stop: None,
            step: Some(step),
        };
        // x[:, ::3]: 2 of every 4 columns; the copy holds 6 elements, not the parent's span.
        let layout = parent
            .layout()
            .index(&[crate::Index::ALL, step(3)])
            .unwrap();
        let columns = Array::new(parent.buffer().clone(), layout).unwrap();
        let copy = columns.copy_to(&queue, MemKind::Host).unwrap();
        assert_eq!(copy.buffer().len(), 12);
        assert!(copy.layout().is_c_contiguous());
        assert_eq!(
            copy.buffer().to_vec().unwrap(),
            [0, 1, 6, 7, 8, 9, 14, 15, 16, 17, 22, 23]
        );
        // A transpose fills its span: copied whole, with its strides.
        let t = Array::new(
            parent.buffer().clone(),
            parent.layout().transpose(None).unwrap(),
        )
        .unwrap();
        let copy = t.copy_to(&queue, MemKind::Host).unwrap();
        assert_eq!(copy.layout().strides(), &[2, 8]);
        // Into a transposed destination, from a transposed source.
        let dst_buffer = Buffer::alloc(&queue, MemKind::Device, 24).unwrap();
        let dst = Array::new(
            dst_buffer.clone(),
            Layout::new(DType::UINT16, &[4, 3], Some(&[2, 8]), 0, false).unwrap(),
        )
        .unwrap();
        dst.copy_elements_from(&t).unwrap();
        assert_eq!(dst_buffer.to_vec().unwrap(), (0..24).collect::<Vec<u8>>());
        let err = dst.copy_elements_from(&columns).unwrap_err();
        assert!(err.to_string().starts_with("src: "), "{err}");
    }
}
