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

/// The longest `--repeat-for` takes: a week.
pub const MAX_SPAN_S: f64 = 7.0 * 86_400.0;

/// A span of wall time as `90s`, `10m`, `1h`, `1h30m` or `2m30s` (a bare number is seconds), more
/// than 0 and at most a week: how long `--repeat-for` keeps starting passes.
pub fn parse_span(s: &str) -> Result<f64, String> {
    let bad = || format!("`{s}` is not a duration; expected a number with s, m or h, e.g. 90s, 10m, 1h30m");
    let t = s.trim();
    if t.is_empty() {
        return Err(bad());
    }
    let mut total = 0.0;
    let mut number = String::new();
    for c in t.chars() {
        if c.is_ascii_digit() || c == '.' {
            number.push(c);
            continue;
        }
        let unit = match c {
            's' => 1.0,
            'm' => 60.0,
            'h' => 3600.0,
            _ => return Err(bad()),
        };
        let v: f64 = number.parse().map_err(|_| bad())?;
        total += v * unit;
        number.clear();
    }
    if !number.is_empty() {
        // A bare number is seconds; after a unit (`1h30`) it is ambiguous.
        if total > 0.0 || t.chars().any(|c| c.is_ascii_alphabetic()) {
            return Err(bad());
        }
        total = number.parse().map_err(|_| bad())?;
    }
    if !(total > 0.0 && total <= MAX_SPAN_S) {
        return Err(format!(
            "`{s}` is out of range; expected more than 0 and at most a week (168h)"
        ));
    }
    Ok(total)
}

/// Seconds as a span for people: `0.4s`, `45s`, `2m10s`, `1h02m` (tenths under 10 s, else
/// rounded to the second; minutes shown from a minute on, hours from an hour on).
pub fn format_span(seconds: f64) -> String {
    if seconds.is_finite() && seconds < 9.95 {
        return format!("{:.1}s", seconds.max(0.0));
    }
    let s = if seconds.is_finite() {
        seconds.max(0.0).round() as u64
    } else {
        0
    };
    match (s / 3600, s % 3600 / 60, s % 60) {
        (0, 0, sec) => format!("{sec}s"),
        (0, m, 0) => format!("{m}m"),
        (0, m, sec) => format!("{m}m{sec:02}s"),
        (h, m, _) => format!("{h}h{m:02}m"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans() {
        assert_eq!(parse_span("90s"), Ok(90.0));
        assert_eq!(parse_span("10m"), Ok(600.0));
        assert_eq!(parse_span("1h"), Ok(3600.0));
        assert_eq!(parse_span("1h30m"), Ok(5400.0));
        assert_eq!(parse_span("2m30s"), Ok(150.0));
        assert_eq!(parse_span("1.5m"), Ok(90.0));
        assert_eq!(parse_span("45"), Ok(45.0));
        for bad in ["", "10x", "m", "1h30", "-5s", "1d", "10 m", "s10"] {
            let e = parse_span(bad).unwrap_err();
            assert!(e.contains("e.g. 90s, 10m, 1h30m") && !e.contains('\n'), "{bad}: {e}");
        }
        for out in ["0s", "0", "169h"] {
            let e = parse_span(out).unwrap_err();
            assert!(e.contains("at most a week"), "{out}: {e}");
        }
    }

    #[test]
    fn spans_for_people() {
        assert_eq!(format_span(0.4), "0.4s");
        assert_eq!(format_span(9.96), "10s");
        assert_eq!(format_span(45.0), "45s");
        assert_eq!(format_span(120.0), "2m");
        assert_eq!(format_span(130.0), "2m10s");
        assert_eq!(format_span(3725.0), "1h02m");
        assert_eq!(format_span(f64::NAN), "0s");
        assert_eq!(format_span(-1.0), "0.0s");
    }

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
