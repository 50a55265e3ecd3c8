//! Host names written back as a Slurm hostlist expression (`node[01-04,07]`), the inverse of
//! [`crate::expand_hostlist`]: `expand_hostlist(&compress_hostlist(names))` gives the same names
//! (sorted, each once).

use std::collections::BTreeMap;

/// `names` as one hostlist expression: names that end in a number grouped by what comes before
/// it and by its zero padding (`node01`..`node09` as `node[01-09]`, `node10` beside them as
/// `node[10]`'s own group, since Slurm pads a range to its lower bound's digits), consecutive
/// numbers as ranges; the rest as they are. Groups in name order, joined by commas.
pub fn compress_hostlist<S: AsRef<str>>(names: &[S]) -> String {
    // (prefix, padded width or 0) -> numbers; names without a trailing number.
    let mut groups: BTreeMap<(&str, usize), Vec<u64>> = BTreeMap::new();
    let mut plain: Vec<&str> = Vec::new();
    for n in names {
        let n = n.as_ref();
        let digits = n.len() - n.trim_end_matches(|c: char| c.is_ascii_digit()).len();
        let (prefix, num) = n.split_at(n.len() - digits);
        // A number too long for u64 or without digits is left as it is.
        match num.parse::<u64>() {
            Ok(v) if !num.is_empty() => {
                let width = if num.len() > 1 && num.starts_with('0') {
                    num.len()
                } else {
                    0
                };
                groups.entry((prefix, width)).or_default().push(v);
            }
            _ => plain.push(n),
        }
    }
    let mut parts: Vec<(String, String)> = plain.iter().map(|p| (p.to_string(), p.to_string())).collect();
    for ((prefix, width), mut nums) in groups {
        nums.sort_unstable();
        nums.dedup();
        let fmt = |v: u64| format!("{v:0width$}");
        let first = fmt(nums[0]);
        if nums.len() == 1 {
            parts.push((format!("{prefix}{first}"), format!("{prefix}{first}")));
            continue;
        }
        let mut ranges: Vec<String> = Vec::new();
        let mut start = nums[0];
        let mut prev = nums[0];
        for &v in nums.iter().skip(1).chain(std::iter::once(&u64::MAX)) {
            if v != u64::MAX && v == prev + 1 {
                prev = v;
                continue;
            }
            ranges.push(if start == prev {
                fmt(start)
            } else {
                format!("{}-{}", fmt(start), fmt(prev))
            });
            start = v;
            prev = v;
        }
        parts.push((format!("{prefix}{first}"), format!("{prefix}[{}]", ranges.join(","))));
    }
    parts.sort();
    parts.dedup();
    parts.into_iter().map(|(_, p)| p).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expand_hostlist;

    #[test]
    fn ranges_padding_and_plain_names() {
        let names = [
            "node03", "node01", "node02", "node07", "node10", "login", "gpu9", "gpu8", "gpu11",
        ];
        let s = compress_hostlist(&names);
        assert_eq!(s, "gpu[8-9,11],login,node[01-03,07],node10");
        let mut back = expand_hostlist(&s).unwrap();
        back.sort();
        let mut want: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        want.sort();
        assert_eq!(back, want);
    }

    #[test]
    fn round_trips_what_expand_makes() {
        for expr in [
            "n[0064-0127]",
            "sl390lin[1-5,7-11,13-18,20-21,24-27,29,33]",
            "a,b[1-2],c007",
            "x[8-10]",
        ] {
            let names = expand_hostlist(expr).unwrap();
            let mut back = expand_hostlist(&compress_hostlist(&names)).unwrap();
            back.sort();
            let mut want = names.clone();
            want.sort();
            assert_eq!(back, want, "{expr} -> {}", compress_hostlist(&names));
        }
        assert_eq!(compress_hostlist::<&str>(&[]), "");
        assert_eq!(compress_hostlist(&["h1", "h1"]), "h1");
    }
}
