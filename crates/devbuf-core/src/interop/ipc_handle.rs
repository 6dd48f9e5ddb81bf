//! [`IpcHandle`]: what another process needs to open shared memory, and its encoding as bytes
//! (untrusted input: every field is bounded before use).

use crate::{Error, MemKind, Result};

/// What another process on this machine needs to open a view of shared memory. Plain data: it
/// travels as bytes ([`IpcHandle::to_bytes`]), through pickle or any pipe.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IpcHandle {
    /// Selector of the device that owns the memory, the same in every process ("host", CUDA's
    /// `"cuda:GPU-<uuid>"`: see [`super::IpcSharing::stable_selector`]).
    pub device: String,
    /// The kind of memory.
    pub kind: MemKind,
    /// Size of the whole shared allocation in bytes.
    pub size: usize,
    /// Where the exported view starts within the allocation.
    pub offset: usize,
    /// Length of the exported view in bytes.
    pub len: usize,
    /// Whether the view opens for reading only. The exporter enforces it where the platform can
    /// (a sealed memfd cannot be mapped writable again); flipping this flag in a handle does not
    /// undo that.
    pub read_only: bool,
    /// The backend's own description of the allocation (a memfd's owner and identity, a
    /// `CUipcMemHandle`).
    pub payload: Vec<u8>,
}

/// The first bytes of an encoded handle, with the format version.
const MAGIC: &[u8] = b"devbuf-ipc\x02";
/// Longest selector or payload an encoded handle may carry (a sanity bound on foreign input).
const MAX_FIELD: usize = 4096;

impl IpcHandle {
    /// The handle as bytes: what `from_bytes` reads back in another process.
    pub fn to_bytes(&self) -> Vec<u8> {
        // A capacity hint only.
        let fields = self.device.len().saturating_add(self.payload.len());
        let mut out = Vec::with_capacity(fields.saturating_add(MAGIC.len()).saturating_add(48));
        out.extend_from_slice(MAGIC);
        for field in [self.device.as_bytes(), self.kind.as_str().as_bytes()] {
            out.extend_from_slice(&(field.len() as u32).to_le_bytes());
            out.extend_from_slice(field);
        }
        for number in [self.size, self.offset, self.len] {
            out.extend_from_slice(&(number as u64).to_le_bytes());
        }
        out.push(u8::from(self.read_only));
        out.extend_from_slice(&(self.payload.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.payload);
        out
    }

    /// Reads a handle made by [`IpcHandle::to_bytes`]; anything else (truncated, garbled, from
    /// another format version) is an [`Error::InvalidDescriptor`] naming `ipc_handle`.
    pub fn from_bytes(bytes: &[u8]) -> Result<IpcHandle> {
        let mut reader = Reader(bytes);
        if reader.take(MAGIC.len())? != MAGIC {
            return Err(bad_handle(
                "does not start with devbuf's IPC handle marker (version 2)",
            ));
        }
        let device = reader.text("device")?;
        let kind: MemKind = reader.text("kind")?.parse()?;
        let size = reader.number("size")?;
        let offset = reader.number("offset")?;
        let len = reader.number("len")?;
        let read_only = match reader.take(1)? {
            [0] => false,
            [1] => true,
            other => {
                return Err(bad_handle(format!(
                    "read-only flag {other:?} is not [0] or [1]"
                )));
            }
        };
        let payload = reader.field("payload")?.to_vec();
        if !reader.0.is_empty() {
            return Err(bad_handle(format!("{} trailing bytes", reader.0.len())));
        }
        if offset.checked_add(len).is_none_or(|end| end > size) {
            return Err(bad_handle(format!(
                "the view {offset}..{} lies outside the {size}-byte allocation",
                (offset as u128).saturating_add(len as u128)
            )));
        }
        Ok(IpcHandle {
            device,
            kind,
            size,
            offset,
            len,
            read_only,
            payload,
        })
    }
}

pub(crate) fn bad_handle(message: impl Into<String>) -> Error {
    Error::invalid("ipc_handle", message)
}

/// Reads the encoded fields of a handle, each bounded before use.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.0.len() < n {
            return Err(bad_handle("truncated"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn field(&mut self, name: &str) -> Result<&'a [u8]> {
        let len = u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")) as usize;
        if len > MAX_FIELD {
            return Err(bad_handle(format!("{name} claims {len} bytes")));
        }
        self.take(len)
    }

    fn text(&mut self, name: &str) -> Result<String> {
        String::from_utf8(self.field(name)?.to_vec())
            .map_err(|_| bad_handle(format!("{name} is not UTF-8")))
    }

    fn number(&mut self, name: &str) -> Result<usize> {
        let value = u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes"));
        usize::try_from(value).map_err(|_| bad_handle(format!("{name} {value} is too large")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handle() -> IpcHandle {
        IpcHandle {
            device: "host".into(),
            kind: MemKind::Host,
            size: 4096,
            offset: 16,
            len: 100,
            read_only: true,
            payload: vec![1, 2, 3],
        }
    }

    #[test]
    fn handles_round_trip_through_bytes() {
        assert_eq!(
            IpcHandle::from_bytes(&handle().to_bytes()).unwrap(),
            handle()
        );
    }

    #[test]
    fn every_truncation_and_garbling_is_an_error_naming_the_handle() {
        let bytes = handle().to_bytes();
        for cut in 0..bytes.len() {
            let err = IpcHandle::from_bytes(&bytes[..cut]).unwrap_err();
            assert!(
                err.to_string().starts_with("ipc_handle") || err.to_string().starts_with("kind"),
                "{err}"
            );
        }
        let mut extra = bytes.clone();
        extra.push(0);
        assert!(IpcHandle::from_bytes(&extra).is_err());
        let outside = IpcHandle {
            offset: 4000,
            ..handle()
        };
        assert!(IpcHandle::from_bytes(&outside.to_bytes()).is_err());
        let mut huge = bytes.clone();
        huge[MAGIC.len()..MAGIC.len() + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(IpcHandle::from_bytes(&huge).is_err());
        // The read-only flag is one byte, 0 or 1, after the three numbers.
        let flag = MAGIC.len() + 4 + "host".len() + 4 + "host".len() + 24;
        let mut odd = bytes.clone();
        odd[flag] = 2;
        let err = IpcHandle::from_bytes(&odd).unwrap_err().to_string();
        assert!(err.contains("read-only flag [2]"), "{err}");
        odd[flag] = 0;
        assert!(!IpcHandle::from_bytes(&odd).unwrap().read_only);
    }
}
