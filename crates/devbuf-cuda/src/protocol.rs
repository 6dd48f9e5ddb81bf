//! How the exchange protocols name CUDA streams with integers, decoded without touching a GPU.
//!
//! | value | CAI v3 `stream` | DLPack `__dlpack__(stream=...)` | `__cuda_stream__` handle |
//! |---|---|---|---|
//! | absent / `None` | no synchronization needed | the legacy default stream | - |
//! | -1 | invalid | no synchronization | - |
//! | 0 | invalid (ambiguous) | invalid (ambiguous) | the legacy default stream |
//! | 1 | the legacy default stream | the legacy default stream | the legacy default stream |
//! | 2 | the per-thread default stream | the per-thread default stream | the per-thread default stream |
//! | other | a `CUstream` handle | a `CUstream` handle | a `CUstream` handle |
//!
//! What is done with the decoded stream is [`crate::CudaQueue::wait_for_stream`] (importing: our
//! work waits for the producer's) and [`crate::CudaQueue::make_stream_wait`] (exporting: the
//! consumer's work waits for ours).

use std::sync::OnceLock;

use devbuf_core::{Error, Result};

/// A stream named by a protocol integer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProtocolStream {
    /// No synchronization is asked for.
    NoSync,
    /// The legacy default stream of the current context (`CU_STREAM_LEGACY`, 1).
    Legacy,
    /// The calling thread's default stream (`CU_STREAM_PER_THREAD`, 2).
    PerThread,
    /// A `CUstream` handle, never 0, 1 or 2.
    Handle(usize),
}

/// The handle value of `CU_STREAM_LEGACY`.
pub const CU_STREAM_LEGACY: usize = 1;
/// The handle value of `CU_STREAM_PER_THREAD`.
pub const CU_STREAM_PER_THREAD: usize = 2;

impl ProtocolStream {
    /// The `CUstream` value the driver accepts for this stream; `None` for [`ProtocolStream::NoSync`].
    pub fn handle(self) -> Option<usize> {
        match self {
            ProtocolStream::NoSync => None,
            ProtocolStream::Legacy => Some(CU_STREAM_LEGACY),
            ProtocolStream::PerThread => Some(CU_STREAM_PER_THREAD),
            ProtocolStream::Handle(handle) => Some(handle),
        }
    }

    /// The stream a driver handle denotes: 1 and 2 are the default streams, 0 is rejected as
    /// ambiguous (the legacy or the per-thread default stream, depending on compile flags).
    pub fn from_handle(handle: usize) -> Result<Self> {
        match handle {
            0 => Err(Error::invalid(
                "stream",
                "0 is ambiguous (legacy or per-thread default stream): pass 1 for the legacy \
                 default stream or 2 for the per-thread default stream",
            )),
            CU_STREAM_LEGACY => Ok(ProtocolStream::Legacy),
            CU_STREAM_PER_THREAD => Ok(ProtocolStream::PerThread),
            handle => Ok(ProtocolStream::Handle(handle)),
        }
    }
}

/// The `CUstream` a stream protocol's handle (`__cuda_stream__`'s second item) names: 0 is the
/// legacy default stream, which Numba's `default_stream()` reports as 0 and cuda.core and RMM
/// adopt as such (the NULL stream of code that calls the driver API without per-thread default
/// streams, as those libraries do by default); other values are as [`ProtocolStream::from_handle`]
/// reads them. CAI's and DLPack's integers keep their own rule for 0.
pub fn stream_protocol_handle(handle: usize) -> usize {
    match handle {
        0 => CU_STREAM_LEGACY,
        handle => handle,
    }
}

/// Decodes the `stream` entry of a foreign `__cuda_array_interface__` (v3): the stream on which
/// the producer may still have work on the data.
pub fn decode_cai_stream(stream: Option<i64>) -> Result<ProtocolStream> {
    match stream {
        None => Ok(ProtocolStream::NoSync),
        Some(0) => Err(Error::invalid(
            "stream",
            "0 is disallowed by the CUDA Array Interface (ambiguous between None and the default \
             streams): use None, 1 (legacy default stream) or 2 (per-thread default stream)",
        )),
        Some(value) => stream_from_integer(value, "a CUDA Array Interface stream"),
    }
}

/// The stream devbuf orders a CAI import after when the dict names none (no `stream` key, or
/// `None`): the legacy default stream. Producers before v3 had no key and worked on it, relying on
/// its implicit ordering with blocking streams (devbuf's are non-blocking). From v3 on, `None`
/// means "no synchronization needed", but producers say it while their default-stream work may
/// still run: Numba's arrays on stream 0 export `None` right after a host-to-device copy from
/// pageable memory, which the driver lets return before the DMA completes. Waiting for the legacy
/// stream costs an event and no host wait.
pub fn implied_cai_stream() -> i64 {
    CU_STREAM_LEGACY as i64
}

/// Decodes the `stream` argument of `__dlpack__(stream=...)`: the consumer's stream, on which the
/// consumer will use the data. `None` means the legacy default stream, -1 no synchronization.
pub fn decode_dlpack_stream(stream: Option<i64>) -> Result<ProtocolStream> {
    match stream {
        None => Ok(ProtocolStream::Legacy),
        Some(-1) => Ok(ProtocolStream::NoSync),
        Some(0) => Err(Error::invalid(
            "stream",
            "0 is disallowed for CUDA by DLPack (ambiguous between the default streams): use 1 \
             (legacy default stream), 2 (per-thread default stream) or -1 (no synchronization)",
        )),
        Some(value) => stream_from_integer(value, "a DLPack stream for CUDA"),
    }
}

fn stream_from_integer(value: i64, what: &str) -> Result<ProtocolStream> {
    let handle = usize::try_from(value).map_err(|_| {
        Error::invalid(
            "stream",
            format!("{value} is not {what}: expected 1, 2 or a CUstream handle"),
        )
    })?;
    ProtocolStream::from_handle(handle)
}

/// The environment variable that, set to 0, turns off synchronizing on imported CAI streams for
/// the whole process (as `NUMBA_CUDA_ARRAY_INTERFACE_SYNC` does for Numba).
pub const CAI_SYNC_ENV: &str = "DEVBUF_CUDA_ARRAY_INTERFACE_SYNC";

/// Whether a CAI import should synchronize on the producer's `stream` (the default), read from
/// [`CAI_SYNC_ENV`] once per process.
pub fn cai_import_sync_enabled() -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED.get_or_init(|| sync_enabled_by(std::env::var(CAI_SYNC_ENV).ok().as_deref()))
}

/// The meaning of a value of [`CAI_SYNC_ENV`]: "0" (or "false", "no", "off") turns sync off,
/// anything else, or nothing, leaves it on.
fn sync_enabled_by(value: Option<&str>) -> bool {
    !value.is_some_and(|value| {
        matches!(
            value.trim().to_ascii_lowercase().as_str(),
            "0" | "false" | "no" | "off"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cai_streams_decode_as_the_spec_says() {
        assert_eq!(decode_cai_stream(None).unwrap(), ProtocolStream::NoSync);
        assert_eq!(decode_cai_stream(Some(1)).unwrap(), ProtocolStream::Legacy);
        assert_eq!(
            decode_cai_stream(Some(2)).unwrap(),
            ProtocolStream::PerThread
        );
        assert_eq!(
            decode_cai_stream(Some(0x5555_0000)).unwrap(),
            ProtocolStream::Handle(0x5555_0000)
        );
        for bad in [0, -1, -2, i64::MIN] {
            let err = decode_cai_stream(Some(bad)).unwrap_err();
            assert!(
                matches!(err, Error::InvalidDescriptor { key: "stream", .. }),
                "{bad}: {err:?}"
            );
            assert!(
                err.to_string().contains(&bad.to_string()) || bad == 0,
                "{err}"
            );
        }
        assert!(
            decode_cai_stream(Some(0))
                .unwrap_err()
                .to_string()
                .starts_with("stream: 0 is disallowed")
        );
    }

    #[test]
    fn a_cai_without_a_stream_implies_the_legacy_stream() {
        assert_eq!(
            decode_cai_stream(Some(implied_cai_stream())).unwrap(),
            ProtocolStream::Legacy
        );
    }

    #[test]
    fn dlpack_streams_decode_as_the_standard_says() {
        assert_eq!(decode_dlpack_stream(None).unwrap(), ProtocolStream::Legacy);
        assert_eq!(
            decode_dlpack_stream(Some(-1)).unwrap(),
            ProtocolStream::NoSync
        );
        assert_eq!(
            decode_dlpack_stream(Some(1)).unwrap(),
            ProtocolStream::Legacy
        );
        assert_eq!(
            decode_dlpack_stream(Some(2)).unwrap(),
            ProtocolStream::PerThread
        );
        assert_eq!(
            decode_dlpack_stream(Some(3)).unwrap(),
            ProtocolStream::Handle(3)
        );
        for bad in [0, -2, i64::MIN] {
            let err = decode_dlpack_stream(Some(bad)).unwrap_err();
            assert!(
                matches!(err, Error::InvalidDescriptor { key: "stream", .. }),
                "{bad}: {err:?}"
            );
        }
    }

    #[test]
    fn handles_round_trip_and_zero_is_rejected() {
        for stream in [
            ProtocolStream::Legacy,
            ProtocolStream::PerThread,
            ProtocolStream::Handle(0x7f00_1234),
        ] {
            let handle = stream.handle().unwrap();
            assert_eq!(ProtocolStream::from_handle(handle).unwrap(), stream);
        }
        assert_eq!(ProtocolStream::NoSync.handle(), None);
        assert!(ProtocolStream::from_handle(0).is_err());
    }

    #[test]
    fn the_stream_protocols_zero_is_the_legacy_default_stream() {
        assert_eq!(stream_protocol_handle(0), CU_STREAM_LEGACY);
        for handle in [CU_STREAM_LEGACY, CU_STREAM_PER_THREAD, 0x7f00_1234] {
            assert_eq!(stream_protocol_handle(handle), handle);
        }
    }

    #[test]
    fn only_an_explicit_off_value_disables_cai_sync() {
        assert!(sync_enabled_by(None));
        for on in ["1", "", "yes", "2"] {
            assert!(sync_enabled_by(Some(on)), "{on:?}");
        }
        for off in ["0", " 0 ", "false", "OFF", "no"] {
            assert!(!sync_enabled_by(Some(off)), "{off:?}");
        }
    }
}
