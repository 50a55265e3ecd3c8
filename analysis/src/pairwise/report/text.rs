//! Human text on stdout: a header block and per-pair rows in perftest's columns (with source and
//! destination rank and host after them), the N x N matrix, per-host summaries and the verdict.

use std::fmt::Write as _;

use super::{matrix, score_to_value, unit};
use crate::counters;
use crate::pairwise::blame::{Part, SlowCounts};
use crate::pairwise::defaults::{DEVIATIONS, MIN_CELLS, MIN_DROP};
use crate::pairwise::rails::RailOutcome;
use crate::pairwise::verdict::{self, Judged, Population, Rule, Verdict};
use crate::pairwise::{OpName, PairwiseOutcome, Pattern, Selection, TestKind};
use crate::stats::median;

const RULE: &str = "---------------------------------------------------------------------------------------";

/// The whole text report, as printed on stdout.
pub fn render(o: &PairwiseOutcome) -> String {
    let mut s = String::new();
    header(&mut s, o);
    rows(&mut s, o);
    s.push_str(&render_judged(o));
    s
}

/// The report from the matrix on: the matrix (one per rail), the summaries, the bar, what the
/// run could detect and the verdict (what `meshrun verdict` prints for a run judged again).
pub fn render_judged(o: &PairwiseOutcome) -> String {
    let mut s = String::new();
    let mx = matrix(o);
    if o.rails.is_empty() {
        let all: Vec<usize> = (0..o.hosts.len()).collect();
        matrix_table(&mut s, o, &mx, &all);
        summaries(&mut s, o, &mx);
        verdict(&mut s, o, &o.verdict);
        paths(&mut s, o);
        unblamed_counters(&mut s, o);
        pass_line(&mut s, o, &o.verdict);
    } else {
        for r in &o.rails {
            rail_section(&mut s, o, &mx, r);
        }
        summaries(&mut s, o, &mx);
        // Pairs within hosts, and the nodes slow on every rail; each rail's parts were said above.
        let mut rest = o.verdict.clone();
        rest.blamed
            .retain(|p| !o.rails.iter().any(|r| r.verdict.blamed.contains(p)));
        rest.cleared
            .retain(|p| !o.rails.iter().any(|r| r.verdict.cleared.contains(p)));
        verdict(&mut s, o, &rest);
        paths(&mut s, o);
        unblamed_counters(&mut s, o);
        pass_line(&mut s, o, &o.verdict);
    }
    s
}

/// One rail under `--rails`: its ranks and NICs, its matrix, its bar and its verdict.
fn rail_section(s: &mut String, o: &PairwiseOutcome, mx: &[Vec<Option<f64>>], r: &RailOutcome) {
    let mut nics: Vec<&str> = r.nics.iter().flatten().map(String::as_str).collect();
    nics.sort_unstable();
    nics.dedup();
    let nics = if nics.is_empty() {
        String::new()
    } else {
        format!(", NIC {}", nics.join(", "))
    };
    let _ = writeln!(
        s,
        "# Rail {} (local rank {}): {} rank(s) on as many hosts{nics}",
        r.rail,
        r.rail,
        r.ranks.len()
    );
    matrix_table(s, o, mx, &r.ranks);
    verdict(s, o, &r.verdict);
    let what = if r.verdict.pass {
        "PASS".to_string()
    } else {
        format!("FAIL: {} slow rank pair(s)", r.verdict.confirmed.len())
    };
    let _ = writeln!(s, "# Rail {}: {what}", r.rail);
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
    if let Some(nc) = &c.nic_choice {
        let _ = writeln!(s, " {:<16}: {nc}", "NIC choice");
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
    w(s, "Pairs", sel, "Rounds", o.rounds.to_string());
    if !o.follow_up.is_empty() {
        let ranks: Vec<String> = o.follow_up.iter().map(usize::to_string).collect();
        let _ = writeln!(
            s,
            " {:<16}: all pairs of ranks {} (the slow pairs' ranks and healthy references)",
            "Follow-up",
            ranks.join(",")
        );
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
    w(s, "TX depth", c.window.to_string(), "Direction", dir.into());
    let amount = match c.amount {
        crate::pairwise::Amount::Iterations(i) => format!("{i} iterations"),
        crate::pairwise::Amount::Duration(d) => format!("{d} s"),
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

/// The matrix at the matrix size, over `ranks` (every rank, or one rail's).
fn matrix_table(s: &mut String, o: &PairwiseOutcome, mx: &[Vec<Option<f64>>], ranks: &[usize]) {
    let c = &o.config;
    let what = match c.test {
        TestKind::Bw if c.bidirectional => "Bidirectional bandwidth [Gb/sec] (both directions summed)",
        TestKind::Bw => "Average bandwidth [Gb/sec], row = source, column = destination",
        TestKind::Lat if c.op == OpName::Read => "Typical latency [usec] (one RDMA read's round trip)",
        TestKind::Lat => "Typical latency [usec] (half round trip)",
    };
    let _ = writeln!(s, "# {what}, at {} bytes", c.matrix_size());
    let hw = host_width(o);
    let _ = write!(s, "{:>6}  {:<hw$}", "rank", "host");
    for j in ranks {
        let _ = write!(s, " {j:>8}");
    }
    s.push('\n');
    for &i in ranks {
        let _ = write!(s, "{i:>6}  {:<hw$}", o.hosts[i]);
        for &j in ranks {
            let cell = if i == j {
                "-".into()
            } else {
                mx[i][j].map_or(".".to_string(), |v| format!("{v:.2}"))
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
    if let Some(t) = &o.timings {
        timings(s, t, &retest_count(o));
    }
}

/// `, N messages each (...)` where the retests sent fewer bandwidth messages than the first
/// pass's count ([`crate::pairwise::verdict::retest_amount`]), else nothing.
fn retest_count(o: &PairwiseOutcome) -> String {
    let crate::pairwise::Amount::Iterations(first) = o.config.amount else {
        return String::new();
    };
    match o.retests.iter().filter(|m| m.bw.is_some()).map(|m| m.iterations).min() {
        Some(n) if n < first => format!(
            " of {n} messages each (the first pass's {first} cut to about {} s a direction)",
            crate::pairwise::defaults::RETEST_SECONDS
        ),
        _ => String::new(),
    }
}

/// `# Time: ...`: setup, the rounds against their wire time, retests, peak memory.
fn timings(s: &mut String, t: &crate::pairwise::Timings, retest_count: &str) {
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    let mut rss = if t.peak_rss > 0 {
        format!("; peak RSS of a rank {:.1} MiB", mib(t.peak_rss))
    } else {
        String::new()
    };
    if t.registered_peak > 0 {
        rss.push_str(&format!(
            ", registered {:.1} MiB at most, {} queue pairs",
            mib(t.registered_peak),
            t.qps
        ));
    }
    let _ = writeln!(
        s,
        "# Time: mesh setup {:.2} s; {} rounds in {:.2} s, wire {:.2} s, overhead {:.2} ms per round; {} retests{retest_count} in {:.2} s{rss}",
        t.setup_s,
        t.rounds,
        t.sweep_s,
        t.wire_s,
        t.overhead_per_round() * 1e3,
        t.retests,
        t.retest_s
    );
}

/// `# Sensitivity: ...`: what the run could have named, from the same bar the verdict used.
fn sensitivity(s: &mut String, test: TestKind, pop: &str, j: &Judged, median: f64, u: &str) {
    let d = j.sensitivity.clamp(0.0, 1.0);
    let what = match test {
        // Bandwidth: a fraction below the median.
        TestKind::Bw => format!("{:.0}% or more below", d * 100.0),
        // Latency: the score is 1/latency, so a drop d of it is a rise of 1/(1-d) - 1.
        TestKind::Lat if d < 1.0 => format!("{:.0}% or more above", (1.0 / (1.0 - d) - 1.0) * 100.0),
        TestKind::Lat => "any amount above".to_string(),
    };
    let _ = writeln!(
        s,
        "# Sensitivity{pop}: a pair {what} the healthy bulk's {median:.2} {u} would have been named ({} cells judged)",
        j.bulk.cells
    );
}

/// The bar, what was cleared and the blamed parts of one verdict (the run's, or a rail's).
fn verdict(s: &mut String, o: &PairwiseOutcome, v: &Verdict) {
    let c = &o.config;
    let u = unit(c.test);
    let val = |score: f64| score_to_value(c.test, score);
    let cmp = if c.test == TestKind::Bw { "below" } else { "above" };
    let floor = match (c.test, c.expect_gbps) {
        (TestKind::Bw, Some(f)) => format!(", or the floor --expect-gbps {f}"),
        _ => String::new(),
    };
    for j in &v.judged {
        let b = &j.bulk;
        match v.rule {
            Rule::Threshold(f) => {
                let _ = writeln!(
                    s,
                    "# Slow: {cmp} {:.2} {u} ({:.0}% of the median {:.2} {u}{floor}); suspects are retested alone",
                    val(b.bar),
                    f * 100.0,
                    val(b.median)
                );
                sensitivity(s, c.test, "", j, val(b.median), u);
            }
            Rule::Robust => {
                let pop = match (v.judged.len(), j.population) {
                    (1, _) => "",
                    (_, Population::BetweenHosts) => " (between hosts)",
                    (_, Population::WithinHost) => " (within a host)",
                };
                let assumed = if b.healthy < MIN_CELLS { " assumed" } else { "" };
                let _ = writeln!(
                    s,
                    "# Slow{pop}: {cmp} {:.2} {u}, the larger of {DEVIATIONS} robust deviations and {:.0}% from the healthy bulk \
                     (median {:.2} {u}, spread +-{:.0}%{assumed}, {} of {} cells){floor}",
                    val(b.bar),
                    (1.0 - (-MIN_DROP).exp()) * 100.0,
                    val(b.median),
                    (b.spread.exp() - 1.0) * 100.0,
                    b.healthy,
                    b.cells
                );
                sensitivity(s, c.test, pop, j, val(b.median), u);
                if let Some(alone) = j.reference_alone {
                    let noise = j.alone_spread.map_or(String::new(), |sd| {
                        format!(
                            " (4 deviations of the retests' own noise, +-{:.0}% from pass to pass)",
                            (sd.exp() - 1.0) * 100.0
                        )
                    });
                    let pct = |sd: f64| (sd.exp() - 1.0) * 100.0;
                    let how = match (j.retested_at_once, j.at_once_noise) {
                        (true, None) => " (pairs sharing no host at once: the first pass was quiet)".to_string(),
                        (true, Some(sd)) => format!(
                            " (pairs sharing no host at once: the first pass was quiet; a pass at once that varied \
                             +-{:.0}% from pass to pass ran again one pair at a time)",
                            pct(sd)
                        ),
                        (false, Some(sd)) => format!(
                            " (one pair at a time: pairs sharing no host at once varied +-{:.0}% from pass to pass, \
                             though the first pass was quiet)",
                            pct(sd)
                        ),
                        (false, None) => String::new(),
                    };
                    let settled = if j.settled_in_two_passes {
                        format!(
                            "; two passes settled it (at most {} suspect pairs; each direction of the slow ones alike within {:.1}% in both)",
                            crate::pairwise::defaults::FEW_SUSPECTS,
                            pct(crate::pairwise::defaults::QUIET_SPREAD)
                        )
                    } else {
                        String::new()
                    };
                    let _ = writeln!(
                        s,
                        "# Retested alone{pop}{how}: the suspects, and {} reference pair(s) from the bulk, which ran at {:.2} {u} alone: \
                         {cmp} {:.2} {u} alone is slow{noise}{settled}",
                        j.references.len(),
                        val(alone),
                        val(j.bar_alone)
                    );
                }
            }
        }
    }
    for &(a, b) in &v.cleared {
        // What it ran at alone against the bar alone of its population, so a reader sees how
        // near the bar it was (a wide bar on a noisy run clears a pair a quiet run would name).
        let judged = verdict::judged_for(&v.judged, v.rule, &o.hosts, (a, b));
        let figures = match (verdict::alone_score(&o.retests, (a, b)), judged) {
            (Some(alone), Some(j)) => format!(
                " ({:.2} {u}; slow alone is {cmp} {:.2} {u})",
                val(alone),
                val(j.bar_alone)
            ),
            _ => String::new(),
        };
        let _ = writeln!(
            s,
            "# cleared: rank {a} ({}) <-> rank {b} ({}) was slow only with other pairs running; fine alone{figures}",
            o.hosts[a], o.hosts[b]
        );
    }
    let bulk_of = |within: bool| {
        let want = if within {
            Population::WithinHost
        } else {
            Population::BetweenHosts
        };
        // Under --threshold one bar covers both populations.
        let j = v
            .judged
            .iter()
            .find(|j| j.population == want)
            .or(v.judged.first().filter(|_| matches!(v.rule, Rule::Threshold(_))));
        j.map_or(String::new(), |j| {
            format!("; healthy bulk {:.2} {u}", val(j.bulk.median))
        })
    };
    let figures = |k: &SlowCounts| {
        let alone = k
            .worst_retest
            .map_or(", not retested".to_string(), |r| format!(", alone {:.2}", val(r)));
        format!("worst {:.2} {u}{alone}{}", val(k.worst), bulk_of(false))
    };
    for part in &v.blamed {
        let written = match part {
            Part::Uplink {
                switch_a,
                switch_b,
                counts: k,
            } => writeln!(
                s,
                "# SLOW UPLINK: {switch_a} <-> {switch_b}: {} of the {} host links across it are slow ({} rank pairs); {}",
                k.slow,
                k.of,
                k.slow_pairs,
                figures(k)
            ),
            Part::Node { host, counts: k } if !o.rails.is_empty() => writeln!(
                s,
                "# SLOW NODE: {host}: its NICs on {} of its {} rails are slow ({} rank pairs); {}",
                k.slow,
                k.of,
                k.slow_pairs,
                figures(k)
            ),
            Part::Node { host, counts: k } => writeln!(
                s,
                "# SLOW NODE: {host}: {} of its {} host links are slow ({} rank pairs); {}",
                k.slow,
                k.of,
                k.slow_pairs,
                figures(k)
            ),
            Part::HostLink {
                host_a,
                host_b,
                counts: k,
            } => writeln!(
                s,
                "# SLOW HOST LINK: {host_a} <-> {host_b}: {} of its {} rank pairs are slow; {}",
                k.slow,
                k.of,
                figures(k)
            ),
            Part::Nic { rank, host, counts: k } => writeln!(
                s,
                "# SLOW NIC: rank {rank} ({host}): {} of its {} pairs to other hosts are slow, the other ranks of {host} are fine; {}",
                k.slow,
                k.of,
                figures(k)
            ),
            Part::RailNic {
                rail,
                rank,
                host,
                nic,
                counts: k,
            } => writeln!(
                s,
                "# SLOW NIC: {host} on rail {rail} (rank {rank}{}): {} of its {} pairs on the rail are slow; {}",
                nic.as_ref().map_or(String::new(), |n| format!(", {n}")),
                k.slow,
                k.of,
                figures(k)
            ),
            Part::RankPair { pair: p } => {
                let dirs: Vec<String> = p.directions.iter().map(|(x, y)| format!("{x}->{y}")).collect();
                let retest = p
                    .retest
                    .map_or("not retested".to_string(), |r| format!("alone {:.2}", val(r)));
                writeln!(
                    s,
                    "# SLOW RANK PAIR: rank {} ({}) <-> rank {} ({}): {:.2} {u} ({retest}), direction {}{}",
                    p.a,
                    p.host_a,
                    p.b,
                    p.host_b,
                    val(p.first),
                    dirs.join(", "),
                    bulk_of(p.host_a == p.host_b)
                )
            }
        };
        if written.is_ok() {
            for line in counters::evidence(&o.counters, &part_ranks(o, part)) {
                let _ = writeln!(s, "#   counters: {line}");
            }
        }
    }
}

/// The ranks whose traffic a blamed part carried, whose NICs' counters are its evidence (none
/// for an uplink: the switches' counters are not the hosts').
fn part_ranks(o: &PairwiseOutcome, part: &Part) -> Vec<usize> {
    let on = |hosts: &[&str]| -> Vec<usize> {
        (0..o.hosts.len())
            .filter(|&r| hosts.contains(&o.hosts[r].as_str()))
            .collect()
    };
    match part {
        Part::Uplink { .. } => Vec::new(),
        Part::Node { host, .. } => on(&[host]),
        Part::HostLink { host_a, host_b, .. } => on(&[host_a, host_b]),
        Part::Nic { rank, .. } | Part::RailNic { rank, .. } => vec![*rank],
        Part::RankPair { pair } => vec![pair.a, pair.b],
    }
}

/// Sources that counted errors though no blamed part involves them: a link that corrects its
/// errors can be fast enough to pass.
fn unblamed_counters(s: &mut String, o: &PairwiseOutcome) {
    let blamed: Vec<usize> = o
        .verdict
        .blamed
        .iter()
        .chain(o.rails.iter().flat_map(|r| &r.verdict.blamed))
        .flat_map(|p| part_ranks(o, p))
        .collect();
    for line in counters::unblamed(&o.counters, &blamed) {
        let _ = writeln!(
            s,
            "# Counters: {line}: errors counted during the run, though no slow pair involves it"
        );
    }
}

/// `-q`: the queue pairs of each test against each other: the bar, what the run could have
/// named, and each slow path with its flow label and the UDP source port RoCE v2 gives it.
fn paths(s: &mut String, o: &PairwiseOutcome) {
    let Some(p) = &o.paths else {
        return;
    };
    let b = &p.bulk;
    let assumed = if b.healthy < MIN_CELLS { " assumed" } else { "" };
    let _ = writeln!(
        s,
        "# Paths: {} queue pairs per test (flow labels 1-{}), each against its test's others: slow below {:.2} of them \
         (bulk median {:.2}, spread +-{:.0}%{assumed}, {} of {} queue pairs)",
        p.qps,
        p.qps,
        b.bar,
        b.median,
        (b.spread.exp() - 1.0) * 100.0,
        b.healthy,
        b.cells
    );
    let _ = writeln!(
        s,
        "# Sensitivity (paths): a queue pair {:.0}% or more below the others of its test would have been named",
        p.sensitivity.clamp(0.0, 1.0) * 100.0
    );
    for (src, dst, k) in &p.cleared {
        let _ = writeln!(
            s,
            "# cleared: queue pair {} of rank {src} ({}) -> rank {dst} ({}) was slow in the pass; fine when retested",
            k + 1,
            o.hosts[*src],
            o.hosts[*dst]
        );
    }
    for x in &p.confirmed {
        let alone = x.ratio_alone.map_or(", not retested".to_string(), |r| {
            format!(", {r:.2} of them when retested")
        });
        let _ = writeln!(
            s,
            "# Slow path: one of the {} paths from {} (rank {}) to {} (rank {}) is slow: queue pair {} (flow label {}, \
             RoCE v2 UDP source port {} = {:#06x}) {} Gb/s against {} for the others ({:.2} of them{alone})",
            x.qps,
            o.hosts[x.src],
            x.src,
            o.hosts[x.dst],
            x.dst,
            x.qp + 1,
            x.flow_label,
            x.udp_source_port(),
            x.udp_source_port(),
            three_figures(x.gbps),
            three_figures(x.others_gbps),
            x.ratio
        );
    }
}

/// A rate with at least two decimals and three significant figures (a path at 0.00114 Gb/s is
/// not "0.00").
fn three_figures(x: f64) -> String {
    let decimals = if x > 0.0 && x.is_finite() {
        (2 - x.log10().floor() as i32).clamp(2, 8) as usize
    } else {
        2
    };
    format!("{x:.decimals$}")
}

/// The run's PASS or FAIL, with what was blamed at each level.
fn pass_line(s: &mut String, o: &PairwiseOutcome, v: &Verdict) {
    let slow_paths = o.paths.as_ref().map_or(0, |p| p.confirmed.len());
    if v.pass && slow_paths > 0 {
        let _ = writeln!(
            s,
            "# FAIL: {slow_paths} slow path(s) (one queue pair of a pair slower than its others), no slow pair"
        );
    } else if v.pass {
        let _ = writeln!(s, "# PASS: no slow pairs");
    } else {
        let count = |level: &str| v.blamed.iter().filter(|p| p.level() == level).count();
        let _ = writeln!(
            s,
            "# FAIL: {} slow rank pair(s): {} uplink(s), {} node(s), {} host link(s), {} NIC(s), {} other rank pair(s)",
            v.confirmed.len(),
            count("uplink"),
            count("node"),
            count("host link"),
            count("NIC"),
            count("rank pair")
        );
        if slow_paths > 0 {
            let _ = writeln!(
                s,
                "# FAIL: and {slow_paths} slow path(s) (one queue pair of a pair slower than its others)"
            );
        }
    }
}
