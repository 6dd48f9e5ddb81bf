//! `x[...] = value` for an array value: NumPy's assignment without a kernel. The value must
//! already have the destination's element type (converting is arithmetic, which devbuf leaves
//! to the libraries that compute); it is broadcast to the destination's shape (a view with
//! zero strides, [`Layout::broadcast_for_assignment`]) and copied run by run, through the same
//! copies, and so the same ordering, as every other copy. A value that shares bytes with the
//! destination (`x[1:] = x[:-1]`) is copied out first, as NumPy does.

use std::sync::Arc;

use super::Array;
use crate::{Error, Event, MemKind, Queue, Result};

impl Array {
    /// Copies `value`, broadcast to this array's shape, into its elements and waits. Errors
    /// name `value`: another element type, or a shape that does not broadcast.
    ///
    /// ```
    /// use devbuf_core::{Array, Buffer, DType, HostQueue, Layout, MemKind};
    ///
    /// let queue = HostQueue::shared();
    /// let grid = Array::new(
    ///     Buffer::alloc(&queue, MemKind::Device, 6)?,
    ///     Layout::contiguous(DType::UINT8, &[2, 3], 0)?,
    /// )?;
    /// let row = Array::new(Buffer::alloc(&queue, MemKind::Host, 3)?, Layout::contiguous(DType::UINT8, &[3], 0)?)?;
    /// row.buffer().copy_from_host(&[7, 8, 9])?;
    /// grid.assign_from(&row)?;
    /// assert_eq!(grid.buffer().to_vec()?, [7, 8, 9, 7, 8, 9]);
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn assign_from(&self, value: &Array) -> Result<()> {
        let value = self.assignable(value)?;
        self.copy_elements_from(&value)
    }

    /// [`Array::assign_from`] enqueued on `queue` (which must reach both), returning without
    /// waiting; the work is recorded as every enqueued copy's.
    pub fn enqueue_assign_from(&self, value: &Array, queue: &Arc<dyn Queue>) -> Result<Event> {
        let value = self.assignable(value)?;
        self.enqueue_copy_elements_from(&value, queue)
    }

    /// `value` as the source of a copy into this array: its dtype checked, broadcast to this
    /// shape, and copied out first when it shares bytes with this array.
    fn assignable(&self, value: &Array) -> Result<Array> {
        if self.readonly() {
            return Err(Error::invalid("destination", "this view is read-only"));
        }
        if value.layout.dtype != self.layout.dtype {
            return Err(Error::wrong_type(
                "value",
                format!(
                    "cannot assign {} elements into a {} array: devbuf converts no element \
                     types (it runs no kernels); convert the value where it lives first (its \
                     library's astype, or NumPy's on the host), or assign a Python scalar or \
                     list, which devbuf converts as NumPy would",
                    value.layout.dtype, self.layout.dtype
                ),
            ));
        }
        let layout = value.layout.broadcast_for_assignment(&self.layout.shape)?;
        let value = if self.shares_bytes_with(value) {
            let queue = value.buffer.queue();
            let kind = match value.buffer.kind() {
                kind @ (MemKind::Host | MemKind::Device | MemKind::Shared)
                    if queue.supports(kind) =>
                {
                    kind
                }
                _ if queue.supports(MemKind::Device) => MemKind::Device,
                _ => MemKind::Host,
            };
            let copy = value.compact_copy(queue, kind)?;
            let layout = copy.layout.broadcast_for_assignment(&self.layout.shape)?;
            Array::fitting(copy.buffer, layout)
        } else {
            Array::fitting(value.buffer.clone(), layout)
        };
        Ok(value)
    }

    /// Whether the spans of both arrays' elements meet in one address range: the same
    /// allocation, or two imports of the same memory (a copy between them would overlap).
    #[allow(
        clippy::arithmetic_side_effects,
        reason = "an address and a byte offset in 128 bits, which cannot overflow"
    )]
    fn shares_bytes_with(&self, other: &Array) -> bool {
        let span = |array: &Array| {
            array.layout.extent().map(|(low, end)| {
                let start = array.data_ptr() as i128;
                (start + low, start + end)
            })
        };
        match (span(self), span(other)) {
            (Some((a_low, a_end)), Some((b_low, b_end))) => a_low < b_end && b_low < a_end,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Buffer, DType, HostQueue, Index, Layout};

    fn numbered(queue: &Arc<dyn Queue>, shape: &[usize]) -> Array {
        let layout = Layout::contiguous(DType::UINT8, shape, 0).unwrap();
        let buffer = Buffer::alloc(queue, MemKind::Device, layout.nbytes()).unwrap();
        buffer
            .copy_from_host(&(0..layout.nbytes() as u8).collect::<Vec<u8>>())
            .unwrap();
        Array::new(buffer, layout).unwrap()
    }

    fn view(array: &Array, index: &[Index]) -> Array {
        Array::new(array.buffer().clone(), array.layout().index(index).unwrap()).unwrap()
    }

    fn range(start: isize, stop: Option<isize>) -> Index {
        Index::Slice {
            start: Some(start),
            stop,
            step: None,
        }
    }

    #[test]
    fn values_broadcast_into_strided_destinations() {
        let queue: Arc<dyn Queue> = Arc::new(HostQueue::new());
        let grid = numbered(&queue, &[3, 4]);
        let column = numbered(&queue, &[3, 1]);
        // grid[:, 1::2] = column: each row's odd columns take that row's value.
        let odd_columns = view(
            &grid,
            &[
                Index::ALL,
                Index::Slice {
                    start: Some(1),
                    stop: None,
                    step: Some(2),
                },
            ],
        );
        odd_columns.assign_from(&column).unwrap();
        assert_eq!(
            grid.buffer().to_vec().unwrap(),
            [0, 0, 2, 0, 4, 1, 6, 1, 8, 2, 10, 2]
        );
        let on_queue = numbered(&queue, &[3, 4]);
        on_queue
            .enqueue_assign_from(&numbered(&queue, &[4]), &queue)
            .unwrap()
            .wait()
            .unwrap();
        assert_eq!(
            on_queue.buffer().to_vec().unwrap(),
            [0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3]
        );
    }

    #[test]
    fn overlapping_values_are_copied_out_first() {
        let queue: Arc<dyn Queue> = Arc::new(HostQueue::new());
        let line = numbered(&queue, &[6]);
        // line[1:] = line[:-1], NumPy's result: every element moves one to the right.
        view(&line, &[range(1, None)])
            .assign_from(&view(&line, &[range(0, Some(-1))]))
            .unwrap();
        assert_eq!(line.buffer().to_vec().unwrap(), [0, 0, 1, 2, 3, 4]);
        // Interleaved views of one allocation: line[::2] = line[1::2].
        let every = |start| Index::Slice {
            start: Some(start),
            stop: None,
            step: Some(2),
        };
        view(&line, &[every(0)])
            .assign_from(&view(&line, &[every(1)]))
            .unwrap();
        assert_eq!(line.buffer().to_vec().unwrap(), [0, 0, 2, 2, 4, 4]);
    }

    #[test]
    fn mistakes_name_the_value() {
        let queue: Arc<dyn Queue> = Arc::new(HostQueue::new());
        let grid = numbered(&queue, &[2, 3]);
        let err = grid.assign_from(&numbered(&queue, &[2])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "value: could not broadcast input array from shape (2,) into shape (2, 3)"
        );
        let wide = Array::new(
            Buffer::alloc(&queue, MemKind::Host, 6).unwrap(),
            Layout::contiguous(DType::UINT16, &[3], 0).unwrap(),
        )
        .unwrap();
        let err = grid.assign_from(&wide).unwrap_err();
        assert!(
            matches!(err, Error::InvalidType { key: "value", .. }),
            "{err}"
        );
        let err = grid
            .clone()
            .into_readonly(true)
            .assign_from(&grid)
            .unwrap_err();
        assert!(err.to_string().contains("read-only"), "{err}");
    }
}
