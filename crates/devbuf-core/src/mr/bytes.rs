//! [`parse_bytes`]: sizes written as RMM writes them (`"4MiB"`, `"2kib"`, `"1.5 GB"`).

use crate::{Error, Result};

/// The bytes a size string means, as RMM's `parse_bytes`: a decimal number (digits, optionally a
/// point and more digits), optional spaces or tabs, and an optional case-insensitive unit: `b`,
/// the SI `kb` to `pb` (powers of 1000) or the binary `kib` to `pib` (powers of 1024). A fraction
/// of a byte is dropped. Anything else (`"2k"`, `"-1"`, `"1e6"`) is an error naming `arg` that
/// says "Could not parse", RMM's words.
pub fn parse_bytes(arg: &'static str, text: &str) -> Result<usize> {
    let refuse = || {
        Error::invalid(
            arg,
            format!(
                "Could not parse {text:?} as a byte specification (a number, then b, kb to pb or \
                 kib to pib)"
            ),
        )
    };
    let mut chars = text.chars().peekable();
    let mut whole = String::new();
    while let Some(digit) = chars.next_if(char::is_ascii_digit) {
        whole.push(digit);
    }
    let mut fraction = String::new();
    if chars.next_if_eq(&'.').is_some() {
        while let Some(digit) = chars.next_if(char::is_ascii_digit) {
            fraction.push(digit);
        }
    }
    while chars.next_if(|c| *c == ' ' || *c == '\t').is_some() {}
    let unit: String = chars.map(|c| c.to_ascii_lowercase()).collect();
    if whole.is_empty() {
        return Err(refuse());
    }
    let multiplier: u128 = match unit.as_str() {
        "" | "b" => 1,
        "kb" => 1000,
        "mb" => 1000u128.pow(2),
        "gb" => 1000u128.pow(3),
        "tb" => 1000u128.pow(4),
        "pb" => 1000u128.pow(5),
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        "pib" => 1 << 50,
        _ => return Err(refuse()),
    };
    let too_large = || {
        Error::invalid(
            arg,
            format!("{text:?} is more bytes than this machine can address"),
        )
    };
    let whole: u128 = whole.parse().map_err(|_| too_large())?;
    // The fraction, exactly: its digits times the multiplier over 10^digits (at most 38 digits
    // count; later ones cannot change a whole byte of a multiplier below 2^51).
    let digits: String = fraction.chars().take(20).collect();
    let fraction_bytes = if digits.is_empty() {
        0
    } else {
        let numerator: u128 = digits.parse().map_err(|_| refuse())?;
        let denominator = 10u128.pow(u32::try_from(digits.len()).map_err(|_| refuse())?);
        numerator
            .checked_mul(multiplier)
            .and_then(|bytes| bytes.checked_div(denominator))
            .ok_or_else(too_large)?
    };
    let bytes = whole
        .checked_mul(multiplier)
        .and_then(|bytes| bytes.checked_add(fraction_bytes))
        .ok_or_else(too_large)?;
    usize::try_from(bytes).map_err(|_| too_large())
}

#[cfg(test)]
mod tests {
    use super::parse_bytes;

    #[test]
    fn parses_rmm_sizes() {
        for (text, bytes) in [
            ("4MiB", 4 << 20),
            ("2kib", 2048),
            ("8KIB", 8192),
            ("100", 100),
            ("100 b", 100),
            ("1.5\tkB", 1500),
            ("0.5kib", 512),
            ("1.", 1),
            ("3 pib", 3 << 50),
        ] {
            assert_eq!(parse_bytes("size", text).unwrap(), bytes, "{text}");
        }
    }

    #[test]
    fn refuses_what_rmm_refuses() {
        for text in [
            "2k", "", "kib", "-1", "1e6", ".5kb", "1 kibs", "１kb", "4 MiB ", "1..2",
        ] {
            let err = parse_bytes("size", text).unwrap_err().to_string();
            assert!(
                err.contains("Could not parse") && err.contains("size"),
                "{text}: {err}"
            );
        }
        let err = parse_bytes("size", "99999999999 pib")
            .unwrap_err()
            .to_string();
        assert!(err.contains("more bytes"), "{err}");
    }
}
