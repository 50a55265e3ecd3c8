//! Line-by-line host file parsing.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::error::HostfileError;
use crate::hostlist::{expand_hostlist, MAX_EXPANDED_HOSTS};

/// One host and how many ranks it may run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostSlots {
    pub host: String,
    /// Ranks to place on this host (summed over repeated lines; a line without a count is 1).
    pub slots: u32,
    /// Open MPI's `max_slots`, when given.
    pub max_slots: Option<u32>,
}

/// Read and parse a host file.
pub fn parse_hostfile(path: &Path) -> Result<Vec<HostSlots>, HostfileError> {
    let text = std::fs::read_to_string(path).map_err(|source| HostfileError::Read {
        path: path.to_owned(),
        source,
    })?;
    parse_hostfile_str(&text, path)
}

/// Parse host file text; `path` is only used in error messages.
pub fn parse_hostfile_str(text: &str, path: &Path) -> Result<Vec<HostSlots>, HostfileError> {
    let mut out: Vec<HostSlots> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut expanded_total: u64 = 0;
    for (idx, raw) in text.lines().enumerate() {
        let line_no = idx + 1;
        let line = raw.split('#').next().unwrap_or("");
        let syntax = |column: usize, message: String| HostfileError::Syntax {
            path: PathBuf::from(path),
            line: line_no,
            column,
            message,
        };
        let tokens = tokens_with_columns(line);
        let Some(&(host_col, first)) = tokens.first() else {
            continue;
        };
        // `host:N` (MPICH/Intel MPI).
        let (host_expr, mut slots) = match first.split_once(':') {
            Some((h, n)) => {
                let n = parse_count(n).map_err(|m| {
                    syntax(
                        host_col + h.len() + 1,
                        format!("slot count `{n}` {m}; expected `host:N` with N >= 1"),
                    )
                })?;
                (h, Some(n))
            }
            None => (first, None),
        };
        let mut max_slots = None;
        for &(col, tok) in &tokens[1..] {
            let (key, value) = tok.split_once('=').ok_or_else(|| {
                syntax(
                    col,
                    format!("unexpected `{tok}`; expected `slots=N` or `max_slots=N` after the host name"),
                )
            })?;
            let value_col = col + key.len() + 1;
            let n = parse_count(value).map_err(|m| {
                syntax(
                    value_col,
                    format!("`{key}` value `{value}` {m}; expected a whole number >= 1"),
                )
            })?;
            match key {
                "slots" => {
                    if slots.is_some() {
                        return Err(syntax(col, "slot count given twice on one line".into()));
                    }
                    slots = Some(n)
                }
                "max_slots" | "max-slots" => max_slots = Some(n),
                _ => {
                    return Err(syntax(
                        col,
                        format!("unknown key `{key}`; expected `slots` or `max_slots`"),
                    ));
                }
            }
        }
        let names = expand_hostlist(host_expr).map_err(|e| syntax(host_col + e.column - 1, e.message))?;
        expanded_total += names.len() as u64;
        if expanded_total > MAX_EXPANDED_HOSTS {
            return Err(syntax(
                host_col,
                format!("the file names more than {MAX_EXPANDED_HOSTS} hosts; is a range mistyped?"),
            ));
        }
        for name in names {
            if let Err(m) = valid_hostname(&name) {
                return Err(syntax(host_col, format!("host name `{name}` {m}")));
            }
            let add = slots.unwrap_or(1);
            if let Some(m) = max_slots {
                if add > m {
                    return Err(syntax(
                        host_col,
                        format!("slots={add} is more than max_slots={m} for `{name}`"),
                    ));
                }
            }
            match index.get(&name).map(|&i| &mut out[i]) {
                Some(h) => {
                    h.slots = h.slots.saturating_add(add);
                    if max_slots.is_some() {
                        h.max_slots = max_slots;
                    }
                }
                None => {
                    index.insert(name.clone(), out.len());
                    out.push(HostSlots {
                        host: name,
                        slots: add,
                        max_slots,
                    })
                }
            }
        }
    }
    if out.is_empty() {
        return Err(HostfileError::Empty { path: path.to_owned() });
    }
    Ok(out)
}

/// Check one expanded host name: DNS rules (RFC 1123 labels of letters, digits and `-`, dots between),
/// which also rules out anything a shell would interpret.
pub fn valid_hostname(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 253 {
        return Err("must be 1 to 253 characters long".into());
    }
    for label in name.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err("has an empty or over-long (> 63) label between dots".into());
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err("has a label that starts or ends with `-`".into());
        }
        if let Some(c) = label.chars().find(|c| !(c.is_ascii_alphanumeric() || *c == '-')) {
            return Err(format!("contains `{c}`; only letters, digits, `-` and `.` are allowed"));
        }
    }
    Ok(())
}

fn parse_count(s: &str) -> Result<u32, &'static str> {
    match s.parse::<u32>() {
        Ok(0) => Err("is zero"),
        Ok(n) => Ok(n),
        Err(_) => Err("is not a whole number"),
    }
}

/// Whitespace-separated tokens with their 1-based columns.
fn tokens_with_columns(line: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in line.char_indices() {
        if c.is_whitespace() {
            if let Some(s) = start.take() {
                out.push((s + 1, &line[s..i]));
            }
        } else if start.is_none() {
            start = Some(i);
        }
    }
    if let Some(s) = start {
        out.push((s + 1, &line[s..]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Vec<HostSlots>, HostfileError> {
        parse_hostfile_str(text, Path::new("hosts.txt"))
    }

    fn hs(host: &str, slots: u32) -> HostSlots {
        HostSlots {
            host: host.into(),
            slots,
            max_slots: None,
        }
    }

    #[test]
    fn open_mpi_format_with_comments_and_repeats() {
        let text = "# cluster\n\nnode01 slots=4 max_slots=8\nnode02 slots=2 # trailing\n  node01 slots=2\n";
        let hosts = parse(text).unwrap();
        assert_eq!(
            hosts[0],
            HostSlots {
                host: "node01".into(),
                slots: 6,
                max_slots: Some(8)
            }
        );
        assert_eq!(hosts[1], hs("node02", 2));
        assert_eq!(crate::total_slots(&hosts), 8);
    }

    #[test]
    fn mpich_format_and_plain_lines() {
        assert_eq!(
            parse("a:4\nb:2\nc\n").unwrap(),
            vec![hs("a", 4), hs("b", 2), hs("c", 1)]
        );
    }

    #[test]
    fn kubeflow_mpijob_hostfile() {
        let text = "mpi-job-worker-0.mpi-job.default.svc slots=8\nmpi-job-worker-1.mpi-job.default.svc slots=8\n";
        let hosts = parse(text).unwrap();
        assert_eq!(hosts.len(), 2);
        assert_eq!(hosts[1], hs("mpi-job-worker-1.mpi-job.default.svc", 8));
    }

    #[test]
    fn hostlist_lines_with_slots() {
        let hosts = parse("node[01-03] slots=2\n").unwrap();
        assert_eq!(hosts, vec![hs("node01", 2), hs("node02", 2), hs("node03", 2)]);
    }

    #[test]
    fn errors_name_file_line_and_column() {
        let e = parse("a slots=4\nnode02 slots=x\n").unwrap_err().to_string();
        assert_eq!(
            e,
            "hosts.txt:2:14: `slots` value `x` is not a whole number; expected a whole number >= 1"
        );
        let e = parse("node[04-01]\n").unwrap_err().to_string();
        assert!(e.starts_with("hosts.txt:1:6: "), "{e}");
        assert!(e.contains("reversed"), "{e}");
        let e = parse("a cpus=2\n").unwrap_err().to_string();
        assert!(e.starts_with("hosts.txt:1:3: unknown key `cpus`"), "{e}");
        let e = parse("a:0\n").unwrap_err().to_string();
        assert!(e.starts_with("hosts.txt:1:3: slot count `0` is zero"), "{e}");
        let e = parse("  a$(reboot)\n").unwrap_err().to_string();
        assert!(e.starts_with("hosts.txt:1:4: "), "{e}");
        let e = parse("a slots=9 max_slots=2\n").unwrap_err().to_string();
        assert!(e.contains("more than max_slots"), "{e}");
    }

    #[test]
    fn empty_file_is_an_error() {
        let e = parse("# nothing\n\n").unwrap_err();
        assert!(matches!(e, HostfileError::Empty { .. }));
    }

    #[test]
    fn cap_applies_across_lines() {
        let text = "a[1-40000]\nb[1-40000]\n";
        let e = parse(text).unwrap_err().to_string();
        assert!(e.starts_with("hosts.txt:2:1:"), "{e}");
    }

    #[test]
    fn hostname_rules() {
        assert!(valid_hostname("node-01.cluster").is_ok());
        assert!(valid_hostname("-bad").is_err());
        assert!(valid_hostname("a..b").is_err());
        assert!(valid_hostname(&"x".repeat(64)).is_err());
    }
}
