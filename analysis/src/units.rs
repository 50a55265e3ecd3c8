//! The values flags take: sizes with binary suffixes (as nccl-tests and perftest take them),
//! seconds, fractions, bandwidth bars and rank pairs, each checked with a one-line error.

/// Parse `8`, `64K`, `128M`, `1G` (binary multiples; `B` suffix optional).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let t = t.strip_suffix(['B', 'b']).unwrap_or(t);
    let (num, mult) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 1u64 << 20),
        Some('G' | 'g') => (&t[..t.len() - 1], 1u64 << 30),
        _ => (t, 1),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a size; expected a whole number with an optional K, M or G suffix"))?;
    n.checked_mul(mult).ok_or_else(|| format!("`{s}` is too large"))
}

pub fn parse_timeout(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("`{s}` is not a number of seconds"))?;
    if !(v > 0.0 && v <= 86_400.0) {
        return Err(format!("{v} is out of range; expected seconds in (0, 86400]"));
    }
    Ok(v)
}

/// Seconds to wait, 0 (do not wait) to a day.
pub fn parse_wait(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("`{s}` is not a number of seconds"))?;
    if !(0.0..=86_400.0).contains(&v) {
        return Err(format!("{v} is out of range; expected seconds in [0, 86400]"));
    }
    Ok(v)
}

pub fn parse_nonzero_size(s: &str) -> Result<u64, String> {
    match parse_size(s)? {
        0 => Err("size 0 is not a message; expected 1 byte or more".into()),
        n if n > (1 << 30) => Err(format!("{n} bytes is over the 1 GiB limit")),
        n => Ok(n),
    }
}

pub fn parse_duration(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("`{s}` is not a number of seconds"))?;
    if !(v > 0.0 && v <= 3600.0) {
        return Err(format!("{v} is out of range; expected seconds in (0, 3600]"));
    }
    Ok(v)
}

pub fn parse_pair(s: &str) -> Result<(usize, usize), String> {
    let (a, b) = s
        .split_once(',')
        .ok_or_else(|| format!("`{s}`: expected two ranks as A,B"))?;
    let a: usize = a.trim().parse().map_err(|_| format!("`{a}` is not a rank number"))?;
    let b: usize = b.trim().parse().map_err(|_| format!("`{b}` is not a rank number"))?;
    if a == b {
        return Err(format!("`{s}`: a pair needs two different ranks"));
    }
    Ok((a, b))
}

pub fn parse_fraction(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("`{s}` is not a number"))?;
    if !(v > 0.0 && v <= 1.0) {
        return Err(format!(
            "{v} is out of range; expected a fraction of the median in (0, 1], e.g. 0.9"
        ));
    }
    Ok(v)
}

/// A bandwidth bar in GB/s: a finite number, 0 or more (0, as nccl-tests allows, never fails).
pub fn parse_bar(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number of GB/s; expected e.g. 40"))?;
    if !(v >= 0.0 && v.is_finite()) {
        return Err(format!("{v} is out of range; expected GB/s, 0 or more"));
    }
    Ok(v)
}

pub fn parse_positive(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("`{s}` is not a number"))?;
    if !(v > 0.0 && v.is_finite()) {
        return Err(format!("{v} is out of range; expected a positive number"));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("8").unwrap(), 8);
        assert_eq!(parse_size("64K").unwrap(), 65536);
        assert_eq!(parse_size("128M").unwrap(), 134_217_728);
        assert_eq!(parse_size("1G").unwrap(), 1 << 30);
        assert_eq!(parse_size("2KB").unwrap(), 2048);
        assert!(parse_size("x").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_size("99999999999G").is_err());
    }
}
