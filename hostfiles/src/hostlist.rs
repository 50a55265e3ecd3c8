//! Slurm hostlist expressions (`node[01-04,07]`, `gpu-[1-3]-ib`, `a,b[1-2]`).
//!
//! The expression is checked first (characters, brackets, ranges, and a cap on the names it
//! expands to: a typo like `n[1-10000000]` must not allocate gigabytes; a reversed range like
//! `node[04-01]` is an error), then expanded here with Slurm's padding: every number of a range
//! is written with at least as many digits as its lower bound is (`n[0064-0127]` is `n0064` ..
//! `n0127`, `n[8-10]` is `n8`, `n9`, `n10`). The `hostlist-parser` crate, used before, pads by the
//! count of leading zeros instead and turns `n[0064-0127]` into `n064` .. `n127`, names no host
//! has; it stays as a cross-check in the tests, for ranges whose bounds have as many digits.

use crate::error::HostlistError;

/// The most host names one expression may expand to. Larger than any machine built so far.
pub const MAX_EXPANDED_HOSTS: u64 = 65_536;

/// Expand a hostlist expression into host names, in order.
pub fn expand_hostlist(expr: &str) -> Result<Vec<String>, HostlistError> {
    let expr = expr.trim();
    if expr.is_empty() {
        return Err(HostlistError {
            column: 1,
            message: "empty host list; expected names like `node01` or `node[01-04]`".into(),
        });
    }
    let count = precheck(expr)?;
    if count > MAX_EXPANDED_HOSTS {
        return Err(HostlistError {
            column: 1,
            message: format!(
                "`{expr}` expands to {count} hosts, more than the limit of {MAX_EXPANDED_HOSTS}; is a range mistyped?"
            ),
        });
    }
    if !expr.contains('[') {
        // Plain comma-separated names: no need for the expression parser.
        return Ok(expr.split(',').map(str::to_owned).collect());
    }
    let names = expand_checked(expr);
    if names.len() as u64 != count {
        return Err(HostlistError {
            column: 1,
            message: format!(
                "`{expr}` expanded to {} names where {count} were expected; expected e.g. `node[01-04,07]`",
                names.len()
            ),
        });
    }
    Ok(names)
}

/// Expand an expression [`precheck`] accepted: comma-separated terms, each literal text and
/// bracket groups, a name for every combination (the leftmost group varying slowest).
fn expand_checked(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    for term in top_level_terms(expr) {
        let mut names = vec![String::new()];
        let mut rest = term;
        while let Some(open) = rest.find('[') {
            let Some(close) = rest[open..].find(']').map(|c| open + c) else {
                break;
            };
            for n in &mut names {
                n.push_str(&rest[..open]);
            }
            let items = bracket_items(&rest[open + 1..close]);
            names = names
                .iter()
                .flat_map(|n| items.iter().map(move |i| format!("{n}{i}")))
                .collect();
            rest = &rest[close + 1..];
        }
        for n in &mut names {
            n.push_str(rest);
        }
        out.extend(names);
    }
    out
}

/// The terms of an expression: split at commas outside brackets.
fn top_level_terms(expr: &str) -> Vec<&str> {
    let (mut terms, mut depth, mut start) = (Vec::new(), 0usize, 0usize);
    for (i, c) in expr.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                terms.push(&expr[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&expr[start..]);
    terms
}

/// The numbers a checked bracket body stands for, each padded to its lower bound's digits.
fn bracket_items(body: &str) -> Vec<String> {
    let mut v = Vec::new();
    for part in body.split(',') {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let width = lo.len();
        let (Ok(a), Ok(b)) = (lo.parse::<u64>(), hi.parse::<u64>()) else {
            continue;
        };
        v.extend((a..=b).map(|x| format!("{x:0width$}")));
    }
    v
}

/// Walk the expression once: check characters, brackets and ranges, and count the names it expands to
/// without expanding them. Returns the count (saturating).
fn precheck(expr: &str) -> Result<u64, HostlistError> {
    let bytes = expr.as_bytes();
    let mut total: u64 = 0;
    let mut term_count: u64 = 1; // product of bracket sizes in the current comma-separated term
    let mut term_len = 0usize;
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i] as char;
        match c {
            ',' => {
                if term_len == 0 {
                    return Err(err(i, "empty name between commas"));
                }
                total = total.saturating_add(term_count);
                term_count = 1;
                term_len = 0;
                i += 1;
            }
            '[' => {
                let close = expr[i..]
                    .find(']')
                    .map(|o| i + o)
                    .ok_or_else(|| err(i, "`[` without a closing `]`"))?;
                let n = bracket_count(&expr[i + 1..close], i + 1)?;
                term_count = term_count.saturating_mul(n);
                term_len += close + 1 - i;
                i = close + 1;
            }
            ']' => return Err(err(i, "`]` without an opening `[`")),
            c if c.is_ascii_alphanumeric() || c == '-' || c == '.' => {
                term_len += 1;
                i += 1;
            }
            other => {
                return Err(err(
                    i,
                    &format!("character `{other}` is not allowed in a host name; expected letters, digits, `-`, `.`"),
                ))
            }
        }
    }
    if term_len == 0 {
        return Err(err(bytes.len().saturating_sub(1), "trailing comma"));
    }
    Ok(total.saturating_add(term_count))
}

/// Count the names a bracket body like `01-04,07` stands for, refusing reversed or malformed ranges.
/// `offset` is the byte index of the body in the whole expression.
fn bracket_count(body: &str, offset: usize) -> Result<u64, HostlistError> {
    if body.is_empty() {
        return Err(err(offset, "empty `[]`; expected a range like `[01-04]`"));
    }
    let mut n: u64 = 0;
    let mut pos = offset;
    for part in body.split(',') {
        let bad = |what: &str| {
            err(
                pos,
                &format!("`{part}` in brackets: {what}; expected `N`, `N-M` with N <= M, or a list of them"),
            )
        };
        if part.is_empty() {
            return Err(bad("empty item"));
        }
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (a, b),
            None => (part, part),
        };
        if lo.is_empty()
            || hi.is_empty()
            || !lo.bytes().all(|b| b.is_ascii_digit())
            || !hi.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(bad("not a number or range"));
        }
        let lo_v: u64 = lo.parse().map_err(|_| bad("number too large"))?;
        let hi_v: u64 = hi.parse().map_err(|_| bad("number too large"))?;
        if lo_v > hi_v {
            return Err(bad("reversed range"));
        }
        n = n.saturating_add(hi_v - lo_v + 1);
        pos += part.len() + 1;
    }
    Ok(n)
}

fn err(byte_index: usize, message: &str) -> HostlistError {
    HostlistError {
        column: byte_index + 1,
        message: message.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_padded_ranges_and_lists() {
        assert_eq!(
            expand_hostlist("node[01-04,07]").unwrap(),
            vec!["node01", "node02", "node03", "node04", "node07"]
        );
    }

    /// Slurm pads every number of a range to its lower bound's digits; the crate used before gave
    /// `n064` for `n[0064-0127]` (found by the verdict-accuracy campaign's 128-host topology).
    #[test]
    fn pads_to_the_lower_bound_as_slurm_does() {
        let v = expand_hostlist("n[0064-0127]").unwrap();
        assert_eq!((v.len(), v[0].as_str(), v[63].as_str()), (64, "n0064", "n0127"));
        assert_eq!(expand_hostlist("n[0099-0100]").unwrap(), vec!["n0099", "n0100"]);
        assert_eq!(expand_hostlist("n[8-10]").unwrap(), vec!["n8", "n9", "n10"]);
        assert_eq!(expand_hostlist("n[08-10]").unwrap(), vec!["n08", "n09", "n10"]);
        assert_eq!(
            expand_hostlist("r[1-2]n[09-10]-ib,x").unwrap(),
            vec!["r1n09-ib", "r1n10-ib", "r2n09-ib", "r2n10-ib", "x"]
        );
    }

    /// Where both bounds of every range have as many digits, the crate and this expansion agree.
    #[test]
    fn agrees_with_hostlist_parser_on_same_width_ranges() {
        for e in [
            "node[01-04,07]",
            "gpu-[1-3]-ib",
            "a,b[1-2]",
            "n[0000-0063]",
            "r[1-2]n[001-003]",
            "x[10-12,20]y",
        ] {
            let theirs = hostlist_parser::parse(e).expect("the crate parses it");
            assert_eq!(expand_hostlist(e).unwrap(), theirs, "{e}");
        }
    }

    #[test]
    fn expands_suffix_after_bracket() {
        assert_eq!(
            expand_hostlist("gpu-[1-3]-ib").unwrap(),
            vec!["gpu-1-ib", "gpu-2-ib", "gpu-3-ib"]
        );
    }

    #[test]
    fn expands_several_terms() {
        assert_eq!(expand_hostlist("a,b[1-2]").unwrap(), vec!["a", "b1", "b2"]);
    }

    #[test]
    fn refuses_reversed_range() {
        let e = expand_hostlist("node[04-01]").unwrap_err();
        assert!(e.message.contains("reversed range"), "{e}");
        assert_eq!(e.column, 6);
    }

    #[test]
    fn caps_huge_expansion_without_allocating() {
        let e = expand_hostlist("n[1-10000000]").unwrap_err();
        assert!(e.message.contains("10000000 hosts"), "{e}");
        // Products of brackets are counted too.
        let e = expand_hostlist("n[1-1000]x[1-1000]").unwrap_err();
        assert!(e.message.contains("1000000 hosts"), "{e}");
    }

    #[test]
    fn refuses_bad_characters_with_column() {
        let e = expand_hostlist("node;rm").unwrap_err();
        assert_eq!(e.column, 5);
        assert!(e.message.contains("`;`"));
        assert!(expand_hostlist("node[1-2").is_err());
        assert!(expand_hostlist("node1-2]").is_err());
        assert!(expand_hostlist("node[a-b]").is_err());
        assert!(expand_hostlist("a,,b").is_err());
        assert!(expand_hostlist("").is_err());
    }
}
