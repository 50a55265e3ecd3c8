//! What the heatmap shows, before any drawing: the matrices it draws (the ranks', or the hosts'
//! where the rank matrix is too large to read, and one per rail), each cell's figure, whether it
//! is below the verdict's bar, and which cells and rows the verdict blamed. The HTML report reads
//! the same views for its tables, so the page and the picture mark the same cells.

use crate::pairwise::blame::Part;
use crate::pairwise::report::{matrix, score_to_value, unit};
use crate::pairwise::verdict::{judged_for, Verdict};
use crate::pairwise::{PairwiseOutcome, TestKind};
use crate::stats::median;

/// Up to this many ranks the picture draws the rank matrix; above it, where several ranks share a
/// host, the host matrix (a 33 x 33 rank matrix already needs cells too small to carry a figure,
/// and 8 GPUs a node reach it at 5 nodes).
pub const RANK_VIEW_MAX: usize = 32;

/// One matrix of the picture.
#[derive(Debug, Clone, PartialEq)]
pub struct View {
    /// What it shows: `ranks`, `hosts (...)`, `rail 1 (...)`.
    pub heading: String,
    /// Row labels (`0 node01`); columns carry the index alone.
    pub labels: Vec<String>,
    /// Column labels: the index of each row's part (a rank, or a host's place).
    pub columns: Vec<String>,
    /// Figures in the run's unit, row = source; None where nothing was measured.
    pub cells: Vec<Vec<Option<f64>>>,
    /// Below the verdict's bar (for latency: above it).
    pub slow: Vec<Vec<bool>>,
    /// Cells of a blamed pair, or between two blamed hosts.
    pub blamed: Vec<Vec<bool>>,
    /// Rows (and the same columns) of a blamed node or NIC.
    pub blamed_lines: Vec<bool>,
}

/// The whole picture: its title, the colour scale, and its views.
#[derive(Debug, Clone, PartialEq)]
pub struct Picture {
    pub title: String,
    pub unit: &'static str,
    pub scale: Scale,
    /// The bar between hosts (or the one bar), in the unit shown: marked on the legend.
    pub bar: Option<f64>,
    /// The blamed parts, named short for the picture's key.
    pub blamed: Vec<String>,
    pub views: Vec<View>,
}

/// The colour scale: `lo` and `hi` in the unit shown; `higher_better` for bandwidth.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scale {
    pub lo: f64,
    pub hi: f64,
    pub higher_better: bool,
}

impl Scale {
    /// 0 (worst) .. 1 (best) for a figure.
    pub fn quality(&self, v: f64) -> f64 {
        let span = self.hi - self.lo;
        if span <= 0.0 {
            return 1.0;
        }
        let q = (v - self.lo) / span;
        let q = if self.higher_better { q } else { 1.0 - q };
        q.clamp(0.0, 1.0)
    }

    /// The colour of a figure: red (worst) through yellow to green (best).
    pub fn colour(&self, v: f64) -> [u8; 3] {
        colour(self.quality(v))
    }
}

/// Red (0) -> yellow (0.5) -> green (1).
pub fn colour(q: f64) -> [u8; 3] {
    let q = q.clamp(0.0, 1.0);
    if q < 0.5 {
        [220, (60.0 + 340.0 * q) as u8, 60]
    } else {
        [(220.0 - 340.0 * (q - 0.5)) as u8, 200, 60]
    }
}

/// The picture of a run.
pub fn picture(o: &PairwiseOutcome) -> Picture {
    let mx = matrix(o);
    let test = o.config.test;
    let n = o.hosts.len();
    let mut views = Vec::new();
    let hosts = distinct_hosts(&o.hosts);
    if n > RANK_VIEW_MAX && hosts.len() < n {
        views.push(host_view(o, &mx, &hosts));
    } else {
        let all: Vec<usize> = (0..n).collect();
        views.push(rank_view(o, &mx, &all, &o.verdict, "ranks".to_string()));
    }
    for r in &o.rails {
        let heading = format!("rail {} (local rank {}, one rank per host)", r.rail, r.rail);
        views.push(rank_view(o, &mx, &r.ranks, &r.verdict, heading));
    }
    let what = match test {
        TestKind::Bw => "bandwidth",
        TestKind::Lat => "latency",
    };
    let title = format!(
        "meshrun pairwise {} {what} [{}] at {} bytes, row = source",
        o.config.op.as_str(),
        unit(test),
        o.config.matrix_size()
    );
    let bar = o
        .verdict
        .judged
        .first()
        .map(|j| score_to_value(test, j.bulk.bar))
        .filter(|b| b.is_finite());
    let mut blamed: Vec<String> = o.verdict.blamed.iter().map(short_name).collect();
    for r in &o.rails {
        blamed.extend(r.verdict.blamed.iter().map(short_name));
    }
    blamed.dedup();
    Picture {
        title,
        unit: unit(test),
        scale: scale(test, &between_hosts(&o.hosts, &mx), bar),
        bar,
        blamed,
        views,
    }
}

/// The cells between two hosts, where there are any (else all): pairs within a host run over
/// another path (shared memory, NVLink) at figures of their own, which would squeeze the fabric's
/// into one colour; past the scale they take its end colour.
fn between_hosts(hosts: &[String], mx: &[Vec<Option<f64>>]) -> Vec<Vec<Option<f64>>> {
    let between: Vec<Vec<Option<f64>>> = mx
        .iter()
        .enumerate()
        .map(|(a, row)| {
            row.iter()
                .enumerate()
                .map(|(b, x)| x.filter(|_| hosts.get(a) != hosts.get(b)))
                .collect()
        })
        .collect();
    if between.iter().flatten().any(Option::is_some) {
        between
    } else {
        mx.to_vec()
    }
}

/// Up to this many ranks the HTML report shows the rank matrix as a table even where the
/// picture shows hosts (a page scrolls; 128 ranks are 16384 cells, about 1 MB of HTML).
pub const RANK_TABLE_MAX: usize = 128;

/// The matrices the HTML report shows as tables: the ranks' (up to [`RANK_TABLE_MAX`]), the
/// hosts' where the picture shows them, and one per rail.
pub fn tables(o: &PairwiseOutcome) -> Vec<View> {
    let mx = matrix(o);
    let n = o.hosts.len();
    let hosts = distinct_hosts(&o.hosts);
    let mut views = Vec::new();
    if n <= RANK_TABLE_MAX {
        let all: Vec<usize> = (0..n).collect();
        views.push(rank_view(o, &mx, &all, &o.verdict, "ranks".to_string()));
    }
    if n > RANK_VIEW_MAX && hosts.len() < n {
        views.push(host_view(o, &mx, &hosts));
    }
    for r in &o.rails {
        let heading = format!("rail {} (local rank {}, one rank per host)", r.rail, r.rail);
        views.push(rank_view(o, &mx, &r.ranks, &r.verdict, heading));
    }
    views
}

/// The scale spans the figures and the bar; a healthy run's small spread is widened to 30% of the
/// best figure so noise does not look red.
fn scale(test: TestKind, mx: &[Vec<Option<f64>>], bar: Option<f64>) -> Scale {
    let vals: Vec<f64> = mx
        .iter()
        .flatten()
        .flatten()
        .copied()
        .filter(|v| v.is_finite())
        .collect();
    let min = vals.iter().copied().fold(f64::INFINITY, f64::min);
    let max = vals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if vals.is_empty() {
        return Scale {
            lo: 0.0,
            hi: 1.0,
            higher_better: test == TestKind::Bw,
        };
    }
    match test {
        TestKind::Bw => Scale {
            lo: min.min(bar.unwrap_or(min)).min(max * 0.7).max(0.0),
            hi: max,
            higher_better: true,
        },
        TestKind::Lat => Scale {
            lo: min,
            hi: max.max(bar.unwrap_or(max)).max(min / 0.7),
            higher_better: false,
        },
    }
}

/// A blamed part as the picture's key names it.
fn short_name(p: &Part) -> String {
    match p {
        Part::Uplink { switch_a, switch_b, .. } => format!("uplink {switch_a}-{switch_b}"),
        Part::Node { host, .. } => format!("node {host}"),
        Part::HostLink { host_a, host_b, .. } => format!("host link {host_a}-{host_b}"),
        Part::Nic { rank, host, .. } => format!("NIC of rank {rank} ({host})"),
        Part::RailNic { rail, rank, host, .. } => format!("rail {rail} NIC of rank {rank} ({host})"),
        Part::RankPair { pair } => format!("pair {}-{}", pair.a, pair.b),
    }
}

fn distinct_hosts(hosts: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for h in hosts {
        if !out.contains(h) {
            out.push(h.clone());
        }
    }
    out
}

/// Whether rank `r`'s row is blamed: its node or its NIC.
fn rank_blamed(o: &PairwiseOutcome, v: &Verdict, r: usize) -> bool {
    v.blamed.iter().any(|p| match p {
        Part::Node { host, .. } => o.hosts.get(r) == Some(host),
        Part::Nic { rank, .. } | Part::RailNic { rank, .. } => *rank == r,
        _ => false,
    })
}

/// Whether the cell (a, b) is a blamed pair's or between the hosts of a blamed host link.
fn pair_blamed(o: &PairwiseOutcome, v: &Verdict, a: usize, b: usize) -> bool {
    let same = |x: usize, y: usize, p: usize, q: usize| (x, y) == (p, q) || (x, y) == (q, p);
    v.confirmed.iter().chain(&v.fabric).any(|p| same(a, b, p.a, p.b))
        || v.blamed.iter().any(|p| match p {
            Part::RankPair { pair } => same(a, b, pair.a, pair.b),
            Part::HostLink { host_a, host_b, .. } => {
                let (ha, hb) = (&o.hosts[a], &o.hosts[b]);
                (ha == host_a && hb == host_b) || (ha == host_b && hb == host_a)
            }
            _ => false,
        })
}

/// Whether a figure is worse than the bar of its pair's population.
fn below_bar(o: &PairwiseOutcome, v: &Verdict, a: usize, b: usize, value: f64) -> bool {
    let Some(j) = judged_for(&v.judged, v.rule, &o.hosts, (a, b)) else {
        return false;
    };
    let bar = score_to_value(o.config.test, j.bulk.bar);
    match o.config.test {
        TestKind::Bw => value < bar,
        TestKind::Lat => value > bar,
    }
}

/// The matrix of the ranks `ranks`, judged by `v`.
fn rank_view(o: &PairwiseOutcome, mx: &[Vec<Option<f64>>], ranks: &[usize], v: &Verdict, heading: String) -> View {
    let k = ranks.len();
    let mut view = View {
        heading,
        labels: ranks.iter().map(|&r| format!("{r} {}", o.hosts[r])).collect(),
        columns: ranks.iter().map(usize::to_string).collect(),
        cells: vec![vec![None; k]; k],
        slow: vec![vec![false; k]; k],
        blamed: vec![vec![false; k]; k],
        blamed_lines: ranks.iter().map(|&r| rank_blamed(o, v, r)).collect(),
    };
    for (i, &a) in ranks.iter().enumerate() {
        for (j, &b) in ranks.iter().enumerate() {
            if a == b {
                continue;
            }
            let cell = mx.get(a).and_then(|row| row.get(b)).copied().flatten();
            view.cells[i][j] = cell;
            view.slow[i][j] = cell.is_some_and(|x| below_bar(o, v, a, b, x));
            view.blamed[i][j] = pair_blamed(o, v, a, b);
        }
    }
    view
}

/// The host x host matrix: each cell the median of the rank cells from one host to the other (on
/// the diagonal, between ranks of one host); slow or blamed where any of those rank cells is.
fn host_view(o: &PairwiseOutcome, mx: &[Vec<Option<f64>>], hosts: &[String]) -> View {
    let k = hosts.len();
    let place = |r: usize| hosts.iter().position(|h| *h == o.hosts[r]).unwrap_or(0);
    let mut figures = vec![vec![Vec::new(); k]; k];
    let mut view = View {
        heading: format!(
            "hosts: the median of the rank cells between two hosts ({} ranks are too many to read)",
            o.hosts.len()
        ),
        labels: hosts.iter().enumerate().map(|(i, h)| format!("{i} {h}")).collect(),
        columns: (0..k).map(|i| i.to_string()).collect(),
        cells: vec![vec![None; k]; k],
        slow: vec![vec![false; k]; k],
        blamed: vec![vec![false; k]; k],
        blamed_lines: vec![false; k],
    };
    let v = &o.verdict;
    for (a, row) in mx.iter().enumerate() {
        let i = place(a);
        view.blamed_lines[i] |= rank_blamed(o, v, a);
        for (b, cell) in row.iter().enumerate() {
            let Some(x) = *cell else { continue };
            if a == b {
                continue;
            }
            let j = place(b);
            figures[i][j].push(x);
            view.slow[i][j] |= below_bar(o, v, a, b, x);
            view.blamed[i][j] |= pair_blamed(o, v, a, b);
        }
    }
    for (i, row) in figures.iter_mut().enumerate() {
        for (j, xs) in row.iter_mut().enumerate() {
            if !xs.is_empty() {
                view.cells[i][j] = Some(median(xs));
            }
        }
    }
    view
}
