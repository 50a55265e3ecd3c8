//! The heatmap checked by its pixels and its SVG on known matrices: a fabric of `hosts` hosts with
//! `per_host` ranks each, every direction between hosts near 10 Gb/s and within a host near 20,
//! but host h2's at 3 Gb/s in the pass and in every retest, judged as a run would be.

use std::path::Path;

use super::view::{picture, RANK_VIEW_MAX};
use super::*;
use crate::pairwise::blame::Part;
use crate::pairwise::rails::RailOutcome;
use crate::pairwise::verdict::{judge_pairs, plan_retests};
use crate::pairwise::{Measurement, OpName, PairwiseConfig};

const SIZE: usize = 65536;

/// The slow-node fabric, judged. Host `h2` may be renamed (to test escaping).
pub(crate) fn slow_node(hosts: usize, per_host: usize, slow_name: &str) -> PairwiseOutcome {
    let n = hosts * per_host;
    let names: Vec<String> = (0..n)
        .map(|r| match r / per_host {
            2 => slow_name.to_string(),
            h => format!("h{h}"),
        })
        .collect();
    let host = |r: usize| r / per_host;
    let figure = |a: usize, b: usize| {
        let noise = ((a * 7 + b * 3) % 5) as f64 * 0.1;
        if host(a) == host(b) {
            20.0 + noise
        } else if host(a) == 2 || host(b) == 2 {
            3.0 + noise
        } else {
            10.0 + noise
        }
    };
    let config = PairwiseConfig::synthetic(OpName::Send, SIZE, 1000);
    let first: Vec<Measurement> = (0..n)
        .flat_map(|a| (0..n).filter(move |&b| b != a).map(move |b| (a, b)))
        .map(|(a, b)| Measurement::bandwidth(a, b, SIZE as u64, 1000, figure(a, b), false))
        .collect();
    let plan = plan_retests(&first, &config, &names);
    let retests: Vec<Measurement> = (0..3)
        .flat_map(|_| plan.pairs())
        .flat_map(|(a, b)| [(a, b), (b, a)])
        .map(|(a, b)| Measurement::bandwidth(a, b, SIZE as u64, 1000, figure(a, b), true))
        .collect();
    let verdict = judge_pairs(&first, &retests, &config, &names, &plan, None);
    PairwiseOutcome::synthetic(config, "tcp", names, n - 1, first, retests, verdict)
}

fn at(px: &[u8], w: u32, x: i32, y: i32) -> [u8; 3] {
    let i = (y as usize * w as usize + x as usize) * 3;
    [px[i], px[i + 1], px[i + 2]]
}

/// The fixture the HTML browser test renders (`analysis/tests/data/html/`), kept equal to the
/// fabric built here; `MESHRUN_BLESS=1` writes it again.
#[test]
fn the_html_tests_fixture_is_the_slow_node_fabric() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/html/slow-node.outcome.json");
    let want = serde_json::to_string_pretty(&slow_node(4, 2, "h2")).expect("json") + "\n";
    if std::env::var_os("MESHRUN_BLESS").is_some() {
        std::fs::write(&path, &want).expect("writing the fixture");
    }
    let got = std::fs::read_to_string(&path).expect("the fixture (bless with MESHRUN_BLESS=1)");
    assert!(got == want, "{} differs from the fabric built here", path.display());
}

#[test]
fn the_verdict_blames_the_slow_node() {
    let o = slow_node(4, 2, "h2");
    assert!(
        o.verdict
            .blamed
            .iter()
            .any(|p| matches!(p, Part::Node { host, .. } if host == "h2")),
        "{:?}",
        o.verdict.blamed
    );
}

/// A slow cell is red with a black corner, a healthy one green without; the blamed node's row is
/// framed in blue; the colour scale runs green (top) to red (bottom); the key is drawn.
#[test]
fn the_png_marks_slow_cells_and_the_blamed_node() {
    let o = slow_node(4, 2, "h2");
    let (px, w, h) = pixels(&o).expect("pixels");
    let p = picture(&o);
    let l = Layout::of(&p);
    assert_eq!((w, h), (l.width as u32, l.height as u32));
    // Rank 0 (h0) -> rank 4 (h2): slow. Rank 0 -> rank 2 (h1): healthy.
    let (x, y, c) = l.cell(0, 0, 4).expect("cell 0,4");
    let slow = at(&px, w, x + c / 2, y + c * 3 / 4);
    assert!(slow[0] > 180 && slow[1] < 120 && slow[2] < 100, "slow cell {slow:?}");
    assert_eq!(at(&px, w, x + 3, y + 3), [0, 0, 0], "the slow corner mark");
    let (x, y, c) = l.cell(0, 0, 2).expect("cell 0,2");
    let fine = at(&px, w, x + c / 2, y + c * 3 / 4);
    assert!(fine[1] > 150 && fine[1] > fine[0], "healthy cell {fine:?}");
    assert_ne!(at(&px, w, x + 3, y + 3), [0, 0, 0], "no mark on a healthy cell");
    // h2's ranks' rows are framed: the frame runs along the left of row 4.
    let (x, y, c) = l.cell(0, 4, 0).expect("cell 4,0");
    assert_eq!(at(&px, w, x - 1, y + c / 2), BLAMED, "the blamed row's frame");
    // The legend: its colour bar green at the top, red at the bottom.
    let (lx, top, lh) = l.legend;
    let best = at(&px, w, lx + 5, top + 1);
    let worst = at(&px, w, lx + 5, top + lh - 2);
    assert!(best[1] > 180 && best[0] < 100, "legend top {best:?}");
    assert!(worst[0] > 200 && worst[1] < 90, "legend bottom {worst:?}");
    // Some text was drawn left of the rows (the host labels, blue for h2's) and above the
    // legend (its unit).
    let dark = |x0: i32, y0: i32, x1: i32, y1: i32| {
        (y0..y1).any(|yy| (x0..x1).any(|xx| at(&px, w, xx, yy)[..2].iter().all(|&v| v < 100)))
    };
    let (_, y, c) = l.cell(0, 4, 0).expect("cell 4,0");
    assert!(dark(0, y, l.left - 4, y + c), "row label of rank 4");
    assert!(dark(lx, top - 20, lx + 150, top - 2), "the scale's title");
    // And the PNG holds these pixels.
    let png = png(&o).expect("png");
    if let Some(dir) = std::env::var_os("MESHRUN_HEATMAP_DUMP") {
        let _ = std::fs::write(Path::new(&dir).join("slow-node.png"), &png);
    }
    assert_eq!(&png[1..4], b"PNG");
}

#[test]
fn the_svg_has_the_scale_with_its_unit_the_marks_and_escaped_hosts() {
    let o = slow_node(4, 2, "<b>&h2");
    let s = svg(&o).expect("svg");
    assert!(s.starts_with("<svg"), "{}", &s[..80.min(s.len())]);
    assert!(s.contains("colour scale [Gb/sec]"), "unit on the scale");
    assert!(s.contains("bar "), "the bar on the scale");
    assert!(s.contains("blamed: node &lt;b&gt;&amp;h2"), "the blamed key, escaped");
    assert!(s.contains("4 &lt;b&gt;&amp;h2"), "host label, escaped");
    assert!(!s.contains("<b>"), "no host name unescaped");
    let slow_cells: usize = picture(&o).views[0].slow.iter().flatten().filter(|b| **b).count();
    // One corner mark per slow cell and one in the key.
    assert_eq!(s.matches("<polygon").count(), slow_cells + 1);
    assert!(slow_cells >= 24, "h2's 2 ranks x 6 others, both ways: {slow_cells}");
    let blue = format!("#{:02X}{:02X}{:02X}", BLAMED[0], BLAMED[1], BLAMED[2]);
    assert!(s.to_uppercase().contains(&blue), "blamed frames in {blue}");
}

#[test]
fn a_rank_matrix_too_large_to_read_is_drawn_per_host() {
    let o = slow_node(5, 8, "h2");
    assert!(o.hosts.len() > RANK_VIEW_MAX);
    let p = picture(&o);
    assert_eq!(p.views.len(), 1);
    let v = &p.views[0];
    assert!(v.heading.starts_with("hosts"), "{}", v.heading);
    assert_eq!(v.labels, ["0 h0", "1 h1", "2 h2", "3 h3", "4 h4"]);
    // h0 -> h1: the median of its 64 rank cells; h0 -> h2 slow; h2 blamed.
    let c01 = v.cells[0][1].expect("h0 -> h1");
    assert!((10.0..=10.5).contains(&c01), "{c01}");
    assert!(v.slow[0][2] && !v.slow[0][1]);
    assert!(v.blamed_lines[2] && !v.blamed_lines[0]);
    // Within a host: its ranks' own cells.
    assert!(v.cells[1][1].is_some_and(|x| x > 19.0));
    let (_, w, h) = pixels(&o).expect("pixels");
    assert!(w < 1200 && h < 900, "{w}x{h}");
    if let Some(dir) = std::env::var_os("MESHRUN_HEATMAP_DUMP") {
        let _ = std::fs::write(Path::new(&dir).join("hosts.png"), png(&o).expect("png"));
    }
}

#[test]
fn a_rails_run_adds_a_matrix_per_rail() {
    let mut o = slow_node(4, 2, "h2");
    o.rails = (0..2)
        .map(|rail| RailOutcome {
            rail,
            ranks: (0..4).map(|h| h * 2 + rail).collect(),
            nics: vec![None; 4],
            verdict: o.verdict.clone(),
        })
        .collect();
    let p = picture(&o);
    assert_eq!(p.views.len(), 3);
    assert_eq!(p.views[2].labels, ["1 h0", "3 h1", "5 h2", "7 h3"]);
    assert!(p.views[2].heading.starts_with("rail 1"));
    assert!(p.views[2].slow[0][2], "h0 -> h2 on rail 1");
    assert!(svg(&o).expect("svg").contains("rail 1 (local rank 1"));
}
