//! perftest's header block (test, transport, ranks, pairs, depth, direction, run, transport
//! facts) and one row per measured direction in perftest's columns, with ranks and hosts.

use std::fmt::Write as _;

use super::{nodes, RULE};
use crate::pairwise::{Amount, HopPath, Measurement, OpName, PairwiseOutcome, Pattern, Selection, TestKind};

/// The header's title (`Send BW Test (meshrun pairwise)`) and its facts, a line of one or two
/// (name, value) each, in the order the text prints them; the HTML report shows the same.
pub(crate) fn facts(o: &PairwiseOutcome) -> (String, Vec<Vec<(String, String)>>) {
    let c = &o.config;
    let n = o.hosts.len();
    let nodes = nodes(o);
    let kind = match c.test {
        TestKind::Bw => "BW",
        TestKind::Lat => "Latency",
    };
    let title = format!("{} {} Test (meshrun pairwise)", c.op.title(), kind);
    let two = |l: &str, lv: String, r: &str, rv: String| vec![(l.to_string(), lv), (r.to_string(), rv)];
    let mut rows = vec![two(
        "Transport",
        o.transport.clone(),
        "Ranks",
        format!("{n} on {} host(s)", nodes.len()),
    )];
    if let Some(nc) = &c.nic_choice {
        rows.push(vec![("NIC choice".to_string(), nc.clone())]);
    }
    if let Some(p) = &c.p2p {
        // TCP reaches no GPU memory: its pairs on the network moved host memory.
        let host = o.transport == "tcp" && (p.within_nodes == "net" || p.nodes > 1);
        let note = if host {
            "; the network's pairs move host memory over TCP"
        } else {
            ""
        };
        rows.push(vec![("P2P".to_string(), format!("{}{note}", p.line()))]);
    }
    let mut sel = match c.selection {
        Selection::All => "all pairs".to_string(),
        Selection::Pair(a, b) => format!("pair {a},{b}"),
        Selection::InterNode => "inter-node".into(),
        Selection::IntraNode => "intra-node".into(),
        Selection::Rails { intra: false } => "rails".into(),
        Selection::Rails { intra: true } => "rails and intra-node".into(),
    };
    let pattern = match c.pattern {
        Pattern::All => None,
        Pattern::Ring => Some("ring".to_string()),
        Pattern::Shift(k) => Some(format!("shift:{k}")),
        Pattern::Random(k) => Some(format!("random:{k}")),
    };
    if let Some(p) = pattern {
        sel = match c.selection {
            Selection::All => p,
            _ => format!("{p}, {sel}"),
        };
    }
    rows.push(two("Pairs", sel, "Rounds", o.rounds.to_string()));
    if !o.follow_up.is_empty() {
        let ranks: Vec<String> = o.follow_up.iter().map(usize::to_string).collect();
        rows.push(vec![(
            "Follow-up".to_string(),
            format!(
                "all pairs of ranks {} (the slow pairs' ranks and healthy references)",
                ranks.join(",")
            ),
        )]);
    }
    let dir = if c.test == TestKind::Lat && c.op == OpName::Read {
        "one read in flight"
    } else if c.test == TestKind::Lat {
        "ping-pong"
    } else if c.bidirectional {
        "bidirectional"
    } else {
        "unidirectional"
    };
    rows.push(two("TX depth", c.window.to_string(), "Direction", dir.into()));
    let amount = match c.amount {
        Amount::Iterations(i) => format!("{i} iterations"),
        Amount::Duration(d) => format!("{d} s"),
    };
    rows.push(two("Run", amount, "Warm-up", c.warmup.to_string()));
    for (k, v) in &o.transport_details {
        rows.push(vec![(k.clone(), v.clone())]);
    }
    (title, rows)
}

/// perftest's header block: test, transport, ranks, pairs, depth, direction, run, transport facts.
pub(super) fn header(s: &mut String, o: &PairwiseOutcome) {
    let (title, rows) = facts(o);
    let _ = writeln!(s, "{RULE}");
    let _ = writeln!(s, "                    {title}");
    for row in rows {
        match row.as_slice() {
            [(l, lv), (r, rv)] => {
                let _ = writeln!(s, " {l:<16}: {lv:<15} {r:<15}: {rv}");
            }
            [(k, v)] => {
                let _ = writeln!(s, " {k:<16}: {v}");
            }
            _ => {}
        }
    }
    let _ = writeln!(s, "{RULE}");
}

/// One row per measured direction (or pair), in perftest's columns plus ranks and hosts (and,
/// in a GPU run, the pair's path: `ipc` GPU to GPU, or `net`).
pub(super) fn rows(s: &mut String, o: &PairwiseOutcome) {
    let c = &o.config;
    let path = |m: &Measurement| match m.path {
        Some(HopPath::Ipc) => "  ipc",
        Some(HopPath::Net) => "  net",
        None => "",
    };
    match c.test {
        TestKind::Bw => {
            let _ = writeln!(
                s,
                " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]    src   dst  src_host  dst_host{}",
                if c.p2p.is_some() { "  path" } else { "" }
            );
            for m in &o.measurements {
                if let Some(b) = m.bw {
                    let _ = writeln!(
                        s,
                        " {:<7}    {:<7}          {:<7.2}            {:<7.2}              {:<9.6}   {:>4}  {:>4}  {}  {}{}",
                        b.bytes, b.iterations, b.peak_gbps, b.avg_gbps, b.msg_rate_mpps, m.src, m.dst, o.hosts[m.src], o.hosts[m.dst], path(m)
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
