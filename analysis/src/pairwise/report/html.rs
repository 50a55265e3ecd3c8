//! `--html FILE`: the run as one self-contained page to open from a ticket: inline CSS, the SVG
//! heatmap inlined, no script, no link to fetch. It holds the status, the header's facts, the
//! verdict's lines with their evidence and counters (the text report's own words), each matrix as
//! a table coloured and marked as the heatmap is, and the heatmap. Every name a run carries (host
//! names, NICs, transport facts) is escaped.

use std::fmt::Write as _;

use super::heatmap::{self, view, BLAMED};
use super::text;
use crate::export::{ExportError, Exporter};
use crate::pairwise::PairwiseOutcome;

/// The status banner's colours: a FAIL red, a PASS green (the browser test looks for them).
pub const FAIL_BANNER: [u8; 3] = [198, 40, 40];
pub const PASS_BANNER: [u8; 3] = [46, 125, 50];

/// The HTML report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Html;

impl Exporter<PairwiseOutcome> for Html {
    fn render(&self, o: &PairwiseOutcome) -> Result<Vec<u8>, ExportError> {
        Ok(page(o)?.into_bytes())
    }
}

/// Text made safe for HTML, in an element or in a quoted attribute.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn hex([r, g, b]: [u8; 3]) -> String {
    format!("#{r:02x}{g:02x}{b:02x}")
}

fn style() -> String {
    format!(
        "body{{margin:0;font-family:sans-serif;font-size:14px;color:#111;background:#fff}}\
         .banner{{height:64px;line-height:64px;padding:0 16px;color:#fff;font-size:22px;font-weight:bold;\
         white-space:nowrap;overflow:hidden;text-overflow:ellipsis}}\
         .fail{{background:{fail}}}.pass{{background:{pass}}}\
         main{{padding:0 16px 16px}}h1{{font-size:18px;margin:12px 0}}h2{{font-size:16px;margin:18px 0 6px}}\
         table{{border-collapse:collapse}}th,td{{border:1px solid #888;padding:2px 6px}}\
         table.facts th{{text-align:left;background:#eee}}\
         table.matrix td{{text-align:right;min-width:3.5em}}table.matrix td.diag{{background:#d0d0d0}}\
         table.matrix td.slow{{font-weight:bold;text-decoration:underline}}\
         table.matrix td.blamed{{outline:3px solid {blamed};outline-offset:-3px}}\
         th.blamed{{color:{blamed}}}caption{{text-align:left;padding:4px 0}}\
         pre{{margin:0;white-space:pre-wrap}}pre .bad{{color:{fail};font-weight:bold}}pre .good{{color:{pass}}}\
         .picture{{overflow:auto}}",
        fail = hex(FAIL_BANNER),
        pass = hex(PASS_BANNER),
        blamed = hex(BLAMED),
    )
}

/// The page.
pub fn page(o: &PairwiseOutcome) -> Result<String, ExportError> {
    let svg = heatmap::svg(o)?;
    let verdict = text::verdict_lines(o);
    let status = verdict
        .lines()
        .rev()
        .find(|l| l.starts_with("# PASS") || l.starts_with("# FAIL"))
        .map(|l| l.trim_start_matches("# ").to_string())
        .unwrap_or_else(|| if o.pass() { "PASS" } else { "FAIL" }.to_string());
    let (title, facts) = text::header_facts(o);
    let mut s = String::new();
    let _ = write!(
        s,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>meshrun pairwise: {}</title>\n<style>{}</style>\n</head>\n<body>\n",
        escape(&status),
        style()
    );
    let class = if o.pass() { "pass" } else { "fail" };
    let _ = writeln!(
        s,
        "<div class=\"banner {class}\" id=\"status\">{}</div>",
        escape(&status)
    );
    let _ = writeln!(s, "<main>\n<h1>{}</h1>", escape(&title));
    facts_table(&mut s, &facts);
    if !o.config_findings.is_empty() {
        let _ = writeln!(s, "<h2>Configuration findings</h2>\n<pre>");
        for f in &o.config_findings {
            let _ = writeln!(s, "{}", escape(f));
        }
        s.push_str("</pre>\n");
    }
    let _ = writeln!(s, "<h2>Verdict</h2>\n<pre id=\"verdict\">");
    for line in verdict.lines() {
        let class = if line.starts_with("# FAIL") || line.starts_with("# SLOW") || line.contains(" SLOW ") {
            Some("bad")
        } else if line.starts_with("# PASS") {
            Some("good")
        } else {
            None
        };
        match class {
            Some(c) => {
                let _ = writeln!(s, "<span class=\"{c}\">{}</span>", escape(line));
            }
            None => {
                let _ = writeln!(s, "{}", escape(line));
            }
        }
    }
    s.push_str("</pre>\n<h2>Heatmap</h2>\n<div class=\"picture\" id=\"heatmap\">\n");
    s.push_str(&svg);
    s.push_str("</div>\n");
    let caption = text::matrix_caption(o);
    let pic = view::picture(o);
    for v in view::tables(o) {
        matrix_table(&mut s, &caption, &pic.scale, &v);
    }
    s.push_str("</main>\n</body>\n</html>\n");
    Ok(s)
}

fn facts_table(s: &mut String, facts: &[Vec<(String, String)>]) {
    s.push_str("<table class=\"facts\" id=\"facts\">\n");
    for row in facts {
        s.push_str("<tr>");
        for (k, v) in row {
            let _ = write!(s, "<th>{}</th><td>{}</td>", escape(k), escape(v));
        }
        s.push_str("</tr>\n");
    }
    s.push_str("</table>\n");
}

/// One matrix as a table: each cell in the heatmap's colour, slow cells bold and underlined,
/// blamed cells framed, blamed rows' labels in the frames' colour.
fn matrix_table(s: &mut String, caption: &str, scale: &view::Scale, v: &view::View) {
    let _ = writeln!(
        s,
        "<h2>Matrix: {}</h2>\n<table class=\"matrix\">\n<caption>{}</caption>",
        escape(&v.heading),
        escape(caption)
    );
    s.push_str("<tr><th></th>");
    for c in &v.columns {
        let _ = write!(s, "<th>{}</th>", escape(c));
    }
    s.push_str("</tr>\n");
    for (i, row) in v.cells.iter().enumerate() {
        let th = if v.blamed_lines[i] { " class=\"blamed\"" } else { "" };
        let _ = write!(s, "<tr><th{th}>{}</th>", escape(&v.labels[i]));
        for (j, cell) in row.iter().enumerate() {
            let mut classes = Vec::new();
            if v.slow[i][j] {
                classes.push("slow");
            }
            if v.blamed[i][j] {
                classes.push("blamed");
            }
            let (style, figure) = match cell {
                Some(x) => (
                    format!(" style=\"background:{}\"", hex(scale.colour(*x))),
                    format!("{x:.2}"),
                ),
                None if i == j => {
                    classes.push("diag");
                    (String::new(), "-".to_string())
                }
                None => (String::new(), String::new()),
            };
            let class = if classes.is_empty() {
                String::new()
            } else {
                format!(" class=\"{}\"", classes.join(" "))
            };
            let _ = write!(s, "<td{class}{style}>{figure}</td>");
        }
        s.push_str("</tr>\n");
    }
    s.push_str("</table>\n");
}

#[cfg(test)]
mod tests;
