//! Filling an array with one value (`devbuf.full`): a byte fill where every byte of the value is
//! the same (zeros, -1), else the value copied in once and then doubled, copy by copy, so that
//! `n` elements take about log2(n) device copies and no kernel.

use super::Array;
use crate::{Error, Result, Scalar};

impl Array {
    /// Sets every element of this C-contiguous array to `value`, converted to its dtype as
    /// [`crate::DType::encode`] converts it, and waits.
    #[allow(
        clippy::arithmetic_side_effects,
        reason = "positions inside a contiguous array's bytes, which Array::new placed inside its \
                  buffer"
    )]
    pub fn fill_with(&self, value: Scalar) -> Result<()> {
        let layout = &self.layout;
        if self.readonly() {
            return Err(Error::invalid("destination", "this view is read-only"));
        }
        if !layout.is_c_contiguous() {
            return Err(Error::invalid(
                "destination",
                format!(
                    "fills need a C-contiguous array, not byte strides {:?}",
                    layout.strides
                ),
            ));
        }
        let element = layout.dtype.encode(value)?;
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
        let layout = Layout::new(DType::UINT8, &[2], Some(&[2]), 0, false).unwrap();
        let strided = Array::new(Buffer::alloc(&queue, MemKind::Host, 4).unwrap(), layout).unwrap();
        let err = strided.fill_with(Scalar::Int(1)).unwrap_err();
        assert!(err.to_string().contains("C-contiguous"), "{err}");
    }
}
