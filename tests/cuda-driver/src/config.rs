//! The double's settings and injected faults, read once per process from `DEVBUF_CUDA_TEST_*`
//! environment variables (listed in the crate documentation).

use std::sync::OnceLock;
use std::time::Duration;

use cudarc::driver::sys::CUresult;

use crate::errors::parse_code;

/// The driver version the double reports by default: CUDA 13.0, which numba-cuda's cuda-bindings
/// 13.x accept and which runs programs built for older CUDA versions (cudarc's 12.8 bindings);
/// CUDA 11.1 for the `old-driver` build, which lacks the stream-ordered allocator.
const DEFAULT_DRIVER_VERSION: i32 = if cfg!(feature = "old-driver") {
    11010
} else {
    13000
};

#[derive(Debug)]
pub(crate) struct Config {
    /// `DEVBUF_CUDA_TEST_DEVICES`: how many devices (default 2).
    pub devices: u32,
    /// `DEVBUF_CUDA_TEST_DELAY_US`: how long each stream operation waits before it runs.
    pub delay: Duration,
    /// `DEVBUF_CUDA_TEST_TOTAL_MEMORY_MB`: each device's memory (default 16 GiB).
    pub total_memory: u64,
    /// `DEVBUF_CUDA_TEST_DRIVER_VERSION`: what `cuDriverGetVersion` answers.
    pub driver_version: i32,
    /// `DEVBUF_CUDA_TEST_INIT_ERROR`: the code `cuInit` fails with.
    pub init_error: Option<CUresult>,
    /// `DEVBUF_CUDA_TEST_FAIL_ALLOCATIONS`: 1-based numbers of the allocation calls (of any kind,
    /// counted over the process) that fail, each with its code (CUDA_ERROR_OUT_OF_MEMORY unless
    /// the entry names one: `N:CODE`).
    pub failing_allocations: Vec<(u64, CUresult)>,
    /// `DEVBUF_CUDA_TEST_UNAVAILABLE_DEVICES`: ordinals whose primary context cannot be retained
    /// (CUDA_ERROR_DEVICE_UNAVAILABLE, as for a device another process holds exclusively).
    pub unavailable_devices: Vec<i32>,
    /// `DEVBUF_CUDA_TEST_CONCURRENT_MANAGED_ACCESS=0`: the attribute reads 0, and managed memory
    /// is host-inaccessible while stream work on it is pending.
    pub concurrent_managed_access: bool,
    /// `DEVBUF_CUDA_TEST_MEMORY_POOLS=0`: no stream-ordered allocator on any device.
    pub memory_pools: bool,
    /// `DEVBUF_CUDA_TEST_POOL_REUSE=immediate`: the pool hands the block freed last by
    /// `cuMemFreeAsync` to the next `cuMemAllocAsync` that fits, at once.
    pub immediate_pool_reuse: bool,
    /// `DEVBUF_CUDA_TEST_NO_PEER_ACCESS`: pairs of the machine's devices that are not peers.
    pub non_peers: Vec<(u32, u32)>,
    /// `DEVBUF_CUDA_TEST_HIDE`: entry points `cuGetProcAddress` says are missing.
    pub hidden: Vec<String>,
    /// `DEVBUF_CUDA_TEST_TRACE=1`: a line on stderr for every name `cuGetProcAddress` does not
    /// find.
    pub trace: bool,
    /// What was wrong with the variables, if anything: `cuInit` then fails and says so.
    pub error: Option<String>,
}

/// How many devices the program sees: `DEVBUF_CUDA_TEST_DEVICES`, narrowed by
/// `CUDA_VISIBLE_DEVICES` as the driver does when `cuInit` reads it (so a program may set it after
/// loading the library and before `cuInit`: NVIDIA's numba-cuda test
/// `test_visible_devices_set_after_import`).
pub(crate) fn device_count() -> u32 {
    visible().len() as u32
}

/// The machine's device behind the program's ordinal `ordinal` (a valid one): what its UUID and
/// its peers are a property of, the same in every process whatever `CUDA_VISIBLE_DEVICES` says.
pub(crate) fn physical(ordinal: usize) -> u32 {
    visible()[ordinal]
}

/// The machine's devices the program sees, in its ordinals' order.
fn visible() -> &'static [u32] {
    static VISIBLE: OnceLock<Vec<u32>> = OnceLock::new();
    VISIBLE.get_or_init(|| {
        visible_devices(
            config().devices,
            std::env::var("CUDA_VISIBLE_DEVICES").ok().as_deref(),
        )
    })
}

/// The double's UUID of the machine's device `physical`: "devbuf-test-dev" and the device's
/// number, never a real GPU's.
pub(crate) fn uuid(physical: u32) -> [u8; 16] {
    let mut bytes = *b"devbuf-test-dev\0";
    bytes[15] = physical as u8;
    bytes
}

/// A UUID as nvidia-smi and `CUDA_VISIBLE_DEVICES` write it: `GPU-` and 32 hex digits in groups
/// of 8, 4, 4, 4 and 12.
pub(crate) fn uuid_text(bytes: &[u8; 16]) -> String {
    let hex = |group: &[u8]| -> String { group.iter().map(|byte| format!("{byte:02x}")).collect() };
    format!(
        "GPU-{}-{}-{}-{}-{}",
        hex(&bytes[..4]),
        hex(&bytes[4..6]),
        hex(&bytes[6..8]),
        hex(&bytes[8..10]),
        hex(&bytes[10..])
    )
}

/// The machine's devices `CUDA_VISIBLE_DEVICES` leaves of `devices`, in its order. CUDA
/// Programming Guide, "CUDA Environment Variables": "A comma-separated sequence of GPU
/// identifiers ... given as integer indices or as UUID strings", in nvidia-smi's format, where
/// "abbreviated forms are allowed; simply specify enough digits from the beginning of the GPU UUID
/// to uniquely identify that GPU"; "they are enumerated in the order of the sequence"; "only the
/// devices whose index precedes the invalid index are visible". An identifier named twice, or a
/// prefix that fits two devices, counts as invalid (the double's reading). MIG identifiers are not
/// modelled (invalid). Unset, all are visible.
fn visible_devices(devices: u32, variable: Option<&str>) -> Vec<u32> {
    let Some(list) = variable else {
        return (0..devices).collect();
    };
    let find = |item: &str| -> Option<u32> {
        if let Ok(index) = item.parse::<u32>() {
            return (index < devices).then_some(index);
        }
        let prefix = item.to_ascii_lowercase();
        if !prefix.starts_with("gpu-") {
            return None;
        }
        let mut matching = (0..devices).filter(|&device| {
            uuid_text(&uuid(device))
                .to_ascii_lowercase()
                .starts_with(&prefix)
        });
        match (matching.next(), matching.next()) {
            (Some(device), None) => Some(device),
            _ => None,
        }
    };
    let mut seen = vec![];
    for item in list.split(',') {
        match find(item.trim()) {
            Some(device) if !seen.contains(&device) => seen.push(device),
            _ => break,
        }
    }
    seen
}

pub(crate) fn config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| Config::from_lookup(|name| std::env::var(name).ok()))
}

impl Config {
    fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Self {
        let mut errors = vec![];
        let mut number = |name: &str, default: u64| -> u64 {
            match lookup(name) {
                None => default,
                Some(text) => text.trim().parse().unwrap_or_else(|_| {
                    errors.push(format!("{name}={text:?} is not a number"));
                    default
                }),
            }
        };
        let devices = number("DEVBUF_CUDA_TEST_DEVICES", 2) as u32;
        let delay = Duration::from_micros(number("DEVBUF_CUDA_TEST_DELAY_US", 0));
        let total_memory = number("DEVBUF_CUDA_TEST_TOTAL_MEMORY_MB", 16 << 10) << 20;
        let driver_version = number(
            "DEVBUF_CUDA_TEST_DRIVER_VERSION",
            DEFAULT_DRIVER_VERSION as u64,
        ) as i32;
        let list = |name: &str| -> Vec<String> {
            lookup(name)
                .unwrap_or_default()
                .split(',')
                .map(|item| item.trim().to_string())
                .filter(|item| !item.is_empty())
                .collect()
        };
        let numbers = |name: &str, errors: &mut Vec<String>| -> Vec<u64> {
            list(name)
                .into_iter()
                .filter_map(|item| {
                    item.parse()
                        .map_err(|_| errors.push(format!("{name}: {item:?} is not a number")))
                        .ok()
                })
                .collect()
        };
        let failing_allocations = list("DEVBUF_CUDA_TEST_FAIL_ALLOCATIONS")
            .into_iter()
            .filter_map(|item| {
                let (number, code) = match item.split_once(':') {
                    Some((number, code)) => (number, parse_code(code)),
                    None => (item.as_str(), Some(CUresult::CUDA_ERROR_OUT_OF_MEMORY)),
                };
                match (number.trim().parse(), code) {
                    (Ok(number), Some(code)) if code != CUresult::CUDA_SUCCESS => {
                        Some((number, code))
                    }
                    _ => {
                        errors.push(format!(
                            "DEVBUF_CUDA_TEST_FAIL_ALLOCATIONS: {item:?} is not N or N:CODE"
                        ));
                        None
                    }
                }
            })
            .collect();
        let unavailable_devices = numbers("DEVBUF_CUDA_TEST_UNAVAILABLE_DEVICES", &mut errors)
            .into_iter()
            .map(|ordinal| ordinal as i32)
            .collect();
        let init_error = lookup("DEVBUF_CUDA_TEST_INIT_ERROR").and_then(|text| {
            let code = parse_code(&text);
            if code.is_none() || code == Some(CUresult::CUDA_SUCCESS) {
                errors.push(format!(
                    "DEVBUF_CUDA_TEST_INIT_ERROR={text:?} is not a failure code the driver knows"
                ));
            }
            code.filter(|&code| code != CUresult::CUDA_SUCCESS)
        });
        let non_peers = list("DEVBUF_CUDA_TEST_NO_PEER_ACCESS")
            .into_iter()
            .filter_map(|item| {
                let pair = item
                    .split_once('-')
                    .and_then(|(a, b)| Some((a.trim().parse().ok()?, b.trim().parse().ok()?)));
                if pair.is_none() {
                    errors.push(format!(
                        "DEVBUF_CUDA_TEST_NO_PEER_ACCESS: {item:?} is not a pair of devices A-B"
                    ));
                }
                pair
            })
            .collect();
        let mut switch = |name: &str, default: bool| match lookup(name).as_deref().map(str::trim) {
            None => default,
            Some("1" | "on" | "yes" | "true") => true,
            Some("0" | "off" | "no" | "false") => false,
            Some(other) => {
                errors.push(format!("{name}={other:?} is neither 0 nor 1"));
                default
            }
        };
        let concurrent_managed_access = switch("DEVBUF_CUDA_TEST_CONCURRENT_MANAGED_ACCESS", true);
        let memory_pools = switch("DEVBUF_CUDA_TEST_MEMORY_POOLS", true);
        let trace = switch("DEVBUF_CUDA_TEST_TRACE", false);
        let immediate_pool_reuse = match lookup("DEVBUF_CUDA_TEST_POOL_REUSE").as_deref() {
            None | Some("" | "never") => false,
            Some("immediate") => true,
            Some(other) => {
                errors.push(format!(
                    "DEVBUF_CUDA_TEST_POOL_REUSE={other:?} is neither \"immediate\" nor \"never\""
                ));
                false
            }
        };
        Config {
            devices,
            delay,
            total_memory,
            driver_version,
            init_error,
            failing_allocations,
            unavailable_devices,
            concurrent_managed_access,
            memory_pools,
            immediate_pool_reuse,
            non_peers,
            hidden: list("DEVBUF_CUDA_TEST_HIDE"),
            trace,
            error: (!errors.is_empty()).then(|| errors.join("; ")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(variables: &[(&str, &str)]) -> Config {
        Config::from_lookup(|name| {
            variables
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| value.to_string())
        })
    }

    #[test]
    fn defaults_are_two_devices_without_faults() {
        let config = with(&[]);
        assert_eq!(config.devices, 2);
        assert_eq!(config.delay, Duration::ZERO);
        assert!(config.concurrent_managed_access && config.memory_pools);
        assert!(!config.immediate_pool_reuse);
        assert!(config.init_error.is_none() && config.error.is_none());
    }

    #[test]
    fn visible_devices_stop_at_the_first_invalid_identifier() {
        let count = |devices, variable| visible_devices(devices, variable).len();
        assert_eq!(count(2, None), 2);
        assert_eq!(count(2, Some("1")), 1);
        assert_eq!(count(3, Some("0,7,1")), 1);
        assert_eq!(count(3, Some("0,0")), 1);
        assert_eq!(count(2, Some("")), 0);
        assert_eq!(count(2, Some("GPU-1234")), 0);
        assert_eq!(count(2, Some("MIG-0")), 0);
    }

    #[test]
    fn visible_devices_keep_the_sequence_s_order_and_take_uuids() {
        assert_eq!(visible_devices(3, Some("2,0")), [2, 0]);
        let second = uuid_text(&uuid(1));
        assert_eq!(second, "GPU-64657662-7566-2d74-6573-742d64657601");
        assert_eq!(visible_devices(2, Some(&format!("{second},0"))), [1, 0]);
        // A unique prefix names a device; one that fits both devices is invalid.
        assert_eq!(
            visible_devices(
                2,
                Some(&second.get(..second.len() - 1).unwrap().to_uppercase())
            ),
            [] as [u32; 0]
        );
        assert_eq!(
            visible_devices(2, Some(&format!("1,{}", second.get(..38).unwrap()))),
            [1]
        );
        assert_eq!(visible_devices(2, Some(&format!("{second},1"))), [1]);
    }

    #[test]
    fn variables_set_faults_and_bad_values_are_reported() {
        let config = with(&[
            ("DEVBUF_CUDA_TEST_INIT_ERROR", "NO_DEVICE"),
            ("DEVBUF_CUDA_TEST_FAIL_ALLOCATIONS", "3, 5:NOT_SUPPORTED"),
            ("DEVBUF_CUDA_TEST_HIDE", "cuMemAllocAsync,cuMemFreeAsync"),
            ("DEVBUF_CUDA_TEST_POOL_REUSE", "immediate"),
        ]);
        assert_eq!(config.init_error, Some(CUresult::CUDA_ERROR_NO_DEVICE));
        assert_eq!(
            config.failing_allocations,
            [
                (3, CUresult::CUDA_ERROR_OUT_OF_MEMORY),
                (5, CUresult::CUDA_ERROR_NOT_SUPPORTED)
            ]
        );
        assert_eq!(config.hidden, ["cuMemAllocAsync", "cuMemFreeAsync"]);
        assert!(config.immediate_pool_reuse);
        let bad = with(&[
            ("DEVBUF_CUDA_TEST_DEVICES", "two"),
            ("DEVBUF_CUDA_TEST_MEMORY_POOLS", "maybe"),
            ("DEVBUF_CUDA_TEST_FAIL_ALLOCATIONS", "2:NO_SUCH_CODE"),
        ]);
        let error = bad.error.unwrap();
        assert!(error.contains("DEVBUF_CUDA_TEST_DEVICES") && error.contains("MEMORY_POOLS"));
        assert!(
            error.contains("\"2:NO_SUCH_CODE\" is not N or N:CODE"),
            "{error}"
        );
    }
}
