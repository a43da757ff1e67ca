//! Kubernetes resource quantities (`500m`, `1.5Gi`, `2e3`), parsed exactly like the API server rounds them:
//! values are kept in thousandths and rounded up, so `0.1m` CPU counts as `1m`.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuantityError {
    pub input: String,
    pub reason: &'static str,
}

impl fmt::Display for QuantityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid quantity {:?}: {}", self.input, self.reason)
    }
}

impl std::error::Error for QuantityError {}

/// Parses a quantity into thousandths of its unit (millicores for CPU), rounding up.
pub fn parse_milli(input: &str) -> Result<i128, QuantityError> {
    let fail = |reason| QuantityError { input: input.to_string(), reason };
    let text = input.trim();
    let (negative, unsigned) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        Some(_) => (false, text),
        None => return Err(fail("empty")),
    };
    let number_end = unsigned.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(unsigned.len());
    let (number, suffix) = unsigned.split_at(number_end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() {
        return Err(fail("no digits"));
    }
    if fraction.contains('.') {
        return Err(fail("more than one decimal point"));
    }
    if whole.len() + fraction.len() > 30 {
        return Err(fail("too many digits"));
    }
    let (binary_shift, decimal_exponent): (u32, i32) = match suffix {
        "" => (0, 0),
        "n" => (0, -9),
        "u" => (0, -6),
        "m" => (0, -3),
        "k" => (0, 3),
        "M" => (0, 6),
        "G" => (0, 9),
        "T" => (0, 12),
        "P" => (0, 15),
        "E" => (0, 18),
        "Ki" => (10, 0),
        "Mi" => (20, 0),
        "Gi" => (30, 0),
        "Ti" => (40, 0),
        "Pi" => (50, 0),
        "Ei" => (60, 0),
        exponent if exponent.starts_with(['e', 'E']) => {
            let value: i32 = exponent[1..].parse().map_err(|_| fail("malformed exponent"))?;
            if !(-30..=30).contains(&value) {
                return Err(fail("exponent out of range"));
            }
            (0, value)
        }
        _ => return Err(fail("unknown suffix")),
    };
    let mantissa: i128 = format!("{whole}{fraction}").parse().map_err(|_| fail("malformed number"))?;
    let scaled = mantissa.checked_shl(binary_shift).ok_or_else(|| fail("too large"))?;
    // Thousandths: shift the decimal point by the suffix, three places for milli, back by the fraction digits.
    let exponent = decimal_exponent + 3 - fraction.len() as i32;
    let magnitude = if exponent >= 0 {
        10i128.checked_pow(exponent as u32).and_then(|factor| scaled.checked_mul(factor)).ok_or_else(|| fail("too large"))?
    } else {
        let divisor = 10i128.checked_pow((-exponent) as u32).ok_or_else(|| fail("too small"))?;
        (scaled + divisor - 1) / divisor
    };
    Ok(if negative { -magnitude } else { magnitude })
}

/// CPU in millicores.
pub fn cpu_millis(input: &str) -> Result<u64, QuantityError> {
    non_negative(input, parse_milli(input)?)
}

/// A byte (or plain count) quantity in whole units, rounded up.
pub fn whole_units(input: &str) -> Result<u64, QuantityError> {
    let milli = parse_milli(input)?;
    non_negative(input, (milli + 999).div_euclid(1000))
}

fn non_negative(input: &str, value: i128) -> Result<u64, QuantityError> {
    if value < 0 {
        return Err(QuantityError { input: input.to_string(), reason: "negative" });
    }
    u64::try_from(value).map_err(|_| QuantityError { input: input.to_string(), reason: "too large" })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_forms() {
        assert_eq!(cpu_millis("500m").unwrap(), 500);
        assert_eq!(cpu_millis("2").unwrap(), 2000);
        assert_eq!(cpu_millis("0.5").unwrap(), 500);
        assert_eq!(cpu_millis("1.25").unwrap(), 1250);
        assert_eq!(cpu_millis("0.1m").unwrap(), 1, "fractions of a millicore round up");
        assert_eq!(cpu_millis("100u").unwrap(), 1);
    }

    #[test]
    fn memory_forms() {
        assert_eq!(whole_units("1Gi").unwrap(), 1 << 30);
        assert_eq!(whole_units("1.5Gi").unwrap(), 3 << 29);
        assert_eq!(whole_units("128974848").unwrap(), 128_974_848);
        assert_eq!(whole_units("129e6").unwrap(), 129_000_000);
        assert_eq!(whole_units("129M").unwrap(), 129_000_000);
        assert_eq!(whole_units("123Mi").unwrap(), 123 << 20);
        assert_eq!(whole_units("1k").unwrap(), 1000);
        assert_eq!(whole_units("110").unwrap(), 110);
    }

    #[test]
    fn rejects_garbage_with_the_reason() {
        for (input, reason) in [
            ("", "empty"),
            ("abc", "no digits"),
            ("1.2.3", "more than one decimal point"),
            ("5Xi", "unknown suffix"),
            ("1e", "malformed exponent"),
            ("-1", "negative"),
        ] {
            let error = whole_units(input).unwrap_err();
            assert_eq!(error.reason, reason, "{input}");
        }
        assert!(whole_units("1Ei").is_ok());
        assert_eq!(cpu_millis("1Ei").unwrap_err().reason, "too large");
        assert_eq!(whole_units("99999999999Ei").unwrap_err().reason, "too large");
    }
}
