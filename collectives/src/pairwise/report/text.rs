//! Human text on stdout: a header block and per-pair rows in perftest's columns (with source and
//! destination rank and host after them), the N x N matrix, per-host summaries and the verdict.

use std::fmt::Write as _;

use super::{matrix, score_to_value, unit};
use crate::pairwise::{OpName, PairwiseOutcome, Selection, TestKind};
use crate::stats::median;

const RULE: &str = "---------------------------------------------------------------------------------------";

/// The whole text report, as printed on stdout.
pub fn render(o: &PairwiseOutcome) -> String {
    let mut s = String::new();
    header(&mut s, o);
    rows(&mut s, o);
    let mx = matrix(o);
    matrix_table(&mut s, o, &mx);
    summaries(&mut s, o, &mx);
    verdict(&mut s, o);
    s
}

/// Distinct host names, in rank order.
fn nodes(o: &PairwiseOutcome) -> Vec<&String> {
    let mut nodes: Vec<&String> = Vec::new();
    for h in &o.hosts {
        if !nodes.contains(&h) {
            nodes.push(h);
        }
    }
    nodes
}

/// Width of the host column.
fn host_width(o: &PairwiseOutcome) -> usize {
    o.hosts.iter().map(String::len).max().unwrap_or(4).max(4)
}

/// perftest's header block: test, transport, ranks, pairs, depth, direction, run, transport facts.
fn header(s: &mut String, o: &PairwiseOutcome) {
    let c = &o.config;
    let n = o.hosts.len();
    let nodes = nodes(o);
    let kind = match c.test {
        TestKind::Bw => "BW",
        TestKind::Lat => "Latency",
    };
    let w = |s: &mut String, l: &str, lv: String, r: &str, rv: String| {
        let _ = writeln!(s, " {l:<16}: {lv:<16}{r:<15}: {rv}");
    };
    let _ = writeln!(s, "{RULE}");
    let _ = writeln!(
        s,
        "                    {} {} Test (meshrun pairwise)",
        c.op.title(),
        kind
    );
    w(
        s,
        "Transport",
        o.transport.clone(),
        "Ranks",
        format!("{n} on {} host(s)", nodes.len()),
    );
    let sel = match c.selection {
        Selection::All => "all pairs".to_string(),
        Selection::Pair(a, b) => format!("pair {a},{b}"),
        Selection::InterNode => "inter-node".into(),
        Selection::IntraNode => "intra-node".into(),
    };
    w(s, "Pairs", sel, "Rounds", o.rounds.to_string());
    let dir = if c.test == TestKind::Lat && c.op == OpName::Read {
        "one read in flight"
    } else if c.test == TestKind::Lat {
        "ping-pong"
    } else if c.bidirectional {
        "bidirectional"
    } else {
        "unidirectional"
    };
    w(s, "TX depth", c.window.to_string(), "Direction", dir.into());
    let amount = match c.amount {
        crate::pairwise::measure::Amount::Iterations(i) => format!("{i} iterations"),
        crate::pairwise::measure::Amount::Duration(d) => format!("{d} s"),
    };
    w(s, "Run", amount, "Warm-up", c.warmup.to_string());
    for (k, v) in &o.transport_details {
        let _ = writeln!(s, " {k:<16}: {v}");
    }
    let _ = writeln!(s, "{RULE}");
}

/// One row per measured direction (or pair), in perftest's columns plus ranks and hosts.
fn rows(s: &mut String, o: &PairwiseOutcome) {
    let c = &o.config;
    match c.test {
        TestKind::Bw => {
            let _ = writeln!(
                s,
                " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]    src   dst  src_host  dst_host"
            );
            for m in &o.measurements {
                if let Some(b) = m.bw {
                    let _ = writeln!(
                        s,
                        " {:<7}    {:<7}          {:<7.2}            {:<7.2}              {:<9.6}   {:>4}  {:>4}  {}  {}",
                        b.bytes, b.iterations, b.peak_gbps, b.avg_gbps, b.msg_rate_mpps, m.src, m.dst, o.hosts[m.src], o.hosts[m.dst]
                    );
                }
            }
        }
        TestKind::Lat => {
            let _ = writeln!(
                s,
                " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]    src   dst  src_host  dst_host"
            );
            for m in &o.measurements {
                if let Some(l) = m.lat {
                    let _ = writeln!(
                        s,
                        " {:<7} {:<7}       {:<7.2}        {:<7.2}      {:<7.2}           {:<7.2}          {:<7.2}         {:<7.2}                {:<7.2}               {:>4}  {:>4}  {}  {}",
                        m.bytes, m.iterations, l.t_min, l.t_max, l.t_typical, l.t_avg, l.t_stdev, l.p99, l.p99_9, m.src, m.dst, o.hosts[m.src], o.hosts[m.dst]
                    );
                }
            }
        }
    }
    let _ = writeln!(s, "{RULE}");
}

/// The N x N matrix at the matrix size.
fn matrix_table(s: &mut String, o: &PairwiseOutcome, mx: &[Vec<Option<f64>>]) {
    let c = &o.config;
    let n = o.hosts.len();
    let what = match c.test {
        TestKind::Bw if c.bidirectional => "Bidirectional bandwidth [Gb/sec] (both directions summed)",
        TestKind::Bw => "Average bandwidth [Gb/sec], row = source, column = destination",
        TestKind::Lat if c.op == OpName::Read => "Typical latency [usec] (one RDMA read's round trip)",
        TestKind::Lat => "Typical latency [usec] (half round trip)",
    };
    let _ = writeln!(s, "# {what}, at {} bytes", c.matrix_size());
    let hw = host_width(o);
    let _ = write!(s, "{:>6}  {:<hw$}", "rank", "host");
    for j in 0..n {
        let _ = write!(s, " {j:>8}");
    }
    s.push('\n');
    for (i, row) in mx.iter().enumerate() {
        let _ = write!(s, "{i:>6}  {:<hw$}", o.hosts[i]);
        for (j, v) in row.iter().enumerate() {
            let cell = if i == j {
                "-".into()
            } else {
                v.map_or(".".to_string(), |v| format!("{v:.2}"))
            };
            let _ = write!(s, " {cell:>8}");
        }
        s.push('\n');
    }
}

/// Per-host min / median / max, from and to each host, and over all cells.
fn summaries(s: &mut String, o: &PairwiseOutcome, mx: &[Vec<Option<f64>>]) {
    let hw = host_width(o);
    let stats = |v: &mut Vec<f64>| -> String {
        if v.is_empty() {
            return "-".into();
        }
        let min = v.iter().copied().fold(f64::INFINITY, f64::min);
        let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        format!("min {min:.2} / median {:.2} / max {max:.2}", median(v))
    };
    let u = unit(o.config.test);
    let _ = writeln!(s, "# Per host [{u}]");
    for h in &nodes(o) {
        let mut out: Vec<f64> = Vec::new();
        let mut inn: Vec<f64> = Vec::new();
        for (i, row) in mx.iter().enumerate() {
            for (j, v) in row.iter().enumerate() {
                if let Some(v) = *v {
                    if &o.hosts[i] == *h {
                        out.push(v);
                    }
                    if &o.hosts[j] == *h {
                        inn.push(v);
                    }
                }
            }
        }
        let _ = writeln!(s, "#   {h:<hw$}  from: {}   to: {}", stats(&mut out), stats(&mut inn));
    }
    let mut all: Vec<f64> = mx.iter().flatten().flatten().copied().collect();
    let count = all.len();
    let _ = writeln!(s, "# All {count} measured cells: {}", stats(&mut all));
}

/// The bar, what was cleared, the slow nodes and links, and PASS or FAIL.
fn verdict(s: &mut String, o: &PairwiseOutcome) {
    let c = &o.config;
    let u = unit(c.test);
    let v = &o.verdict;
    let bar = score_to_value(c.test, v.bar);
    let med = score_to_value(c.test, v.median);
    let cmp = if c.test == TestKind::Bw { "below" } else { "above" };
    let mut why = format!("{:.0}% of the median {med:.2} {u}", c.threshold * 100.0);
    if let (TestKind::Bw, Some(f)) = (c.test, c.expect_gbps) {
        why = format!("{why}, or the floor --expect-gbps {f}");
    }
    let _ = writeln!(s, "# Slow: {cmp} {bar:.2} {u} ({why}); suspects are retested alone");
    for (a, b) in &v.cleared {
        let _ = writeln!(
            s,
            "# cleared: rank {a} ({}) <-> rank {b} ({}) was slow only with other pairs running; fine alone",
            o.hosts[*a], o.hosts[*b]
        );
    }
    for node in &v.slow_nodes {
        let _ = writeln!(
            s,
            "# SLOW NODE: {}: {} of its {} pairs are slow",
            node.host, node.slow_pairs, node.pairs
        );
    }
    for p in &v.confirmed {
        let explained = v
            .slow_nodes
            .iter()
            .find(|nd| nd.host == p.host_a || nd.host == p.host_b);
        let dirs: Vec<String> = p.directions.iter().map(|(x, y)| format!("{x}->{y}")).collect();
        let retest = p.retest.map_or("not retested".to_string(), |r| {
            format!("alone {:.2}", score_to_value(c.test, r))
        });
        let label = match explained {
            Some(nd) => format!("slow pair (node {})", nd.host),
            None => "SLOW LINK".to_string(),
        };
        let _ = writeln!(
            s,
            "# {label}: rank {} ({}) <-> rank {} ({}): {:.2} {u} ({retest}), direction {}",
            p.a,
            p.host_a,
            p.b,
            p.host_b,
            score_to_value(c.test, p.first),
            dirs.join(", ")
        );
    }
    if v.pass {
        let _ = writeln!(s, "# PASS: no slow pairs");
    } else {
        let _ = writeln!(
            s,
            "# FAIL: {} slow pair(s): {} slow node(s), {} slow link(s)",
            v.confirmed.len(),
            v.slow_nodes.len(),
            v.slow_links.len()
        );
    }
}

/// The text report on stdout.
pub struct Text;

impl super::Exporter for Text {
    fn render(&self, o: &PairwiseOutcome) -> Result<Vec<u8>, String> {
        Ok(render(o).into_bytes())
    }
}
