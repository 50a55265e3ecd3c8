//! The page's structure on the slow-node fabric of the heatmap's tests: self-contained, every
//! section there, host names escaped, the matrix's cells marked as the picture marks them.

use super::*;
use crate::pairwise::report::heatmap::tests::slow_node;

#[test]
fn the_page_is_self_contained_and_holds_every_section() {
    let o = slow_node(4, 2, "h2");
    let p = page(&o).expect("page");
    assert!(p.starts_with("<!DOCTYPE html>"));
    assert!(p.ends_with("</html>\n"));
    // Nothing to fetch and nothing to run.
    for banned in ["<script", "http://", "https://", "<link", "src=", "@import", "url("] {
        let allowed =
            banned == "http://" && p.matches(banned).count() == p.matches("http://www.w3.org/2000/svg").count();
        assert!(!p.contains(banned) || allowed, "{banned} in the page");
    }
    assert!(
        p.contains("<div class=\"banner fail\" id=\"status\">FAIL"),
        "the FAIL banner"
    );
    assert!(p.contains("<h1>Send BW Test (meshrun pairwise)</h1>"));
    assert!(p.contains("<th>Transport</th><td>tcp</td><th>Ranks</th><td>8 on 4 host(s)</td>"));
    // The verdict's lines, the blamed node's in the FAIL colour, the bar line as text says it.
    assert!(p.contains("<span class=\"bad\"># SLOW NODE: h2:"), "{p}");
    assert!(p.contains("# Slow"), "the bar line");
    // The picture inlined, and the matrix as a table.
    assert_eq!(p.matches("<svg").count(), 1);
    assert!(p.contains("<h2>Matrix: ranks</h2>"));
    assert!(p.contains("<th class=\"blamed\">4 h2</th>"), "h2's row label");
    // Rank 0 -> rank 4: slow and blamed; rank 0 -> rank 2: neither.
    let row0 = p.lines().find(|l| l.starts_with("<tr><th>0 h0</th>")).expect("row 0");
    let cells: Vec<&str> = row0.split("<td").skip(1).collect();
    assert_eq!(cells.len(), 8);
    assert!(cells[0].starts_with(" class=\"diag\">-"), "{}", cells[0]);
    assert!(
        cells[4].starts_with(" class=\"slow blamed\" style=\"background:#"),
        "{}",
        cells[4]
    );
    assert!(cells[2].starts_with(" style=\"background:#"), "{}", cells[2]);
}

#[test]
fn host_names_are_escaped_everywhere() {
    let o = slow_node(4, 2, "<img onerror=x>&\"'");
    let p = page(&o).expect("page");
    assert!(!p.contains("<img"), "a host name unescaped");
    assert!(p.contains("&lt;img onerror=x&gt;&amp;&quot;&#39;"));
}

#[test]
fn a_passing_run_has_the_green_banner() {
    let mut o = slow_node(4, 2, "h2");
    o.verdict.pass = true;
    o.verdict.confirmed.clear();
    o.verdict.blamed.clear();
    let p = page(&o).expect("page");
    assert!(p.contains("<div class=\"banner pass\""), "{}", &p[..600]);
}

/// Above 32 ranks the page shows the rank matrix (up to 128) and the hosts' beside it, as the
/// picture shows hosts.
#[test]
fn a_large_run_has_the_rank_and_the_host_tables() {
    let o = slow_node(5, 8, "h2");
    let p = page(&o).expect("page");
    assert!(p.contains("<h2>Matrix: ranks</h2>"));
    assert!(p.contains("<h2>Matrix: hosts: the median of the rank cells between two hosts"));
    assert!(
        p.contains("<th class=\"blamed\">2 h2</th>"),
        "h2's row in the host table"
    );
    assert_eq!(p.matches("<table class=\"matrix\">").count(), 2);
}
