//! `--heatmap FILE.png|FILE.svg`: the matrix as a picture, host names on the axes, so the bad row,
//! column or cell shows at a glance. Colour runs from red (worst) through yellow to green (best).

use std::fmt::Write as _;

use super::font::glyph;
use super::matrix;
use crate::export::{ExportError, Exporter};
use crate::pairwise::{PairwiseOutcome, TestKind};

const CELL_W: usize = 72;
const CELL_H: usize = 28;
const SCALE: usize = 2;
const CH_W: usize = 6 * SCALE;
const MARGIN: usize = 12;

struct Geometry {
    labels: Vec<String>,
    cells: Vec<Vec<Option<f64>>>,
    /// 0 worst .. 1 best, per cell.
    quality: Vec<Vec<Option<f64>>>,
    left: usize,
    top: usize,
    width: usize,
    height: usize,
    title: String,
}

fn layout(o: &PairwiseOutcome) -> Geometry {
    let cells = matrix(o);
    let n = cells.len();
    let labels: Vec<String> = (0..n).map(|i| format!("{i} {}", o.hosts[i])).collect();
    let vals: Vec<f64> = cells.iter().flatten().flatten().copied().collect();
    let best = match o.config.test {
        TestKind::Bw => vals.iter().copied().fold(0.0, f64::max),
        TestKind::Lat => vals.iter().copied().fold(f64::INFINITY, f64::min),
    };
    let quality = cells
        .iter()
        .map(|row| {
            row.iter()
                .map(|v| {
                    v.map(|v| match o.config.test {
                        TestKind::Bw if best > 0.0 => (v / best).clamp(0.0, 1.0),
                        TestKind::Lat if v > 0.0 => (best / v).clamp(0.0, 1.0),
                        _ => 0.0,
                    })
                })
                .collect()
        })
        .collect();
    let left = MARGIN + labels.iter().map(String::len).max().unwrap_or(1) * CH_W + MARGIN;
    let top = MARGIN + 2 * (7 * SCALE + 8) + MARGIN;
    let title = format!(
        "meshrun pairwise {} at {} bytes, row = source",
        if o.config.test == TestKind::Bw {
            "bandwidth [Gbit/s]"
        } else {
            "latency [usec]"
        },
        o.config.matrix_size()
    );
    let width = (left + n * CELL_W + MARGIN).max(MARGIN * 2 + title.len() * CH_W);
    let height = top + n * CELL_H + MARGIN;
    Geometry {
        labels,
        cells,
        quality,
        left,
        top,
        width,
        height,
        title,
    }
}

/// Red (0) -> yellow (0.5) -> green (1).
fn colour(q: f64) -> [u8; 3] {
    let q = q.clamp(0.0, 1.0);
    if q < 0.5 {
        [220, (60.0 + 340.0 * q) as u8, 60]
    } else {
        [(220.0 - 340.0 * (q - 0.5)) as u8, 200, 60]
    }
}

fn cell_text(v: Option<f64>, diag: bool) -> String {
    if diag {
        return "-".into();
    }
    match v {
        Some(v) if v >= 100.0 => format!("{v:.0}"),
        Some(v) => format!("{v:.2}"),
        None => String::new(),
    }
}

/// SVG text.
pub fn svg(o: &PairwiseOutcome) -> String {
    let l = layout(o);
    let n = l.labels.len();
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" font-family="monospace" font-size="13">"#,
        l.width, l.height
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(s, r#"<text x="{MARGIN}" y="{}">{}</text>"#, MARGIN + 12, xml(&l.title));
    for (j, lab) in l.labels.iter().enumerate() {
        let x = l.left + j * CELL_W + CELL_W / 2;
        let _ = writeln!(
            s,
            r#"<text x="{x}" y="{}" text-anchor="middle">{}</text>"#,
            l.top - 8,
            xml(lab)
        );
    }
    for i in 0..n {
        let y = l.top + i * CELL_H;
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
            l.left - 6,
            y + CELL_H / 2 + 5,
            xml(&l.labels[i])
        );
        for j in 0..n {
            let x = l.left + j * CELL_W;
            let fill = match (i == j, l.quality[i][j]) {
                (true, _) => "#d0d0d0".to_string(),
                (false, Some(q)) => {
                    let [r, g, b] = colour(q);
                    format!("#{r:02x}{g:02x}{b:02x}")
                }
                (false, None) => "#ffffff".to_string(),
            };
            let _ = writeln!(
                s,
                r##"<rect x="{x}" y="{y}" width="{CELL_W}" height="{CELL_H}" fill="{fill}" stroke="#888"/><text x="{}" y="{}" text-anchor="middle">{}</text>"##,
                x + CELL_W / 2,
                y + CELL_H / 2 + 5,
                cell_text(l.cells[i][j], i == j)
            );
        }
    }
    s.push_str("</svg>\n");
    s
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

struct Canvas {
    w: usize,
    h: usize,
    px: Vec<u8>,
}

impl Canvas {
    fn rect(&mut self, x: usize, y: usize, w: usize, h: usize, c: [u8; 3]) {
        for yy in y..(y + h).min(self.h) {
            for xx in x..(x + w).min(self.w) {
                let i = (yy * self.w + xx) * 3;
                self.px[i..i + 3].copy_from_slice(&c);
            }
        }
    }
    fn text(&mut self, x: usize, y: usize, s: &str) {
        for (k, ch) in s.chars().enumerate() {
            let g = glyph(ch);
            for (row, bits) in g.iter().enumerate() {
                for col in 0..5 {
                    if bits & (0x10 >> col) != 0 {
                        self.rect(x + k * CH_W + col * SCALE, y + row * SCALE, SCALE, SCALE, [0, 0, 0]);
                    }
                }
            }
        }
    }
}

/// PNG bytes.
pub fn png(o: &PairwiseOutcome) -> Result<Vec<u8>, ExportError> {
    let l = layout(o);
    let n = l.labels.len();
    let mut c = Canvas {
        w: l.width,
        h: l.height,
        px: vec![255u8; l.width * l.height * 3],
    };
    c.text(MARGIN, MARGIN, &l.title);
    let text_h = 7 * SCALE;
    for (j, lab) in l.labels.iter().enumerate() {
        let x = (l.left + j * CELL_W + CELL_W / 2).saturating_sub(lab.len() * CH_W / 2);
        c.text(x, l.top - text_h - 6, lab);
    }
    for i in 0..n {
        let y = l.top + i * CELL_H;
        c.text(
            l.left - MARGIN - l.labels[i].len() * CH_W + 4,
            y + (CELL_H - text_h) / 2,
            &l.labels[i],
        );
        for j in 0..n {
            let x = l.left + j * CELL_W;
            let fill = match (i == j, l.quality[i][j]) {
                (true, _) => [208, 208, 208],
                (false, Some(q)) => colour(q),
                (false, None) => [255, 255, 255],
            };
            c.rect(x, y, CELL_W, CELL_H, [136, 136, 136]);
            c.rect(x + 1, y + 1, CELL_W - 2, CELL_H - 2, fill);
            let t = cell_text(l.cells[i][j], i == j);
            c.text(x + (CELL_W - t.len() * CH_W) / 2, y + (CELL_H - text_h) / 2, &t);
        }
    }
    let mut out = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut out, l.width as u32, l.height as u32);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut w = enc.write_header()?;
        w.write_image_data(&c.px)?;
    }
    Ok(out)
}

/// `--heatmap FILE`: PNG or SVG, by the file's extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heatmap {
    Png,
    Svg,
}

impl Heatmap {
    /// The image format a file name asks for.
    pub fn for_path(path: &std::path::Path) -> Result<Heatmap, String> {
        match path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            Some("png") => Ok(Heatmap::Png),
            Some("svg") => Ok(Heatmap::Svg),
            _ => Err(format!(
                "--heatmap {}: expected a .png or .svg file name",
                path.display()
            )),
        }
    }
}

impl Exporter<PairwiseOutcome> for Heatmap {
    fn render(&self, o: &PairwiseOutcome) -> Result<Vec<u8>, ExportError> {
        match self {
            Heatmap::Png => png(o),
            Heatmap::Svg => Ok(svg(o).into_bytes()),
        }
    }
}

/// By file extension: `.png` or `.svg`.
pub fn render(o: &PairwiseOutcome, path: &std::path::Path) -> Result<Vec<u8>, String> {
    Heatmap::for_path(path)?.render(o).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_run_red_to_green() {
        assert_eq!(colour(0.0), [220, 60, 60]);
        assert_eq!(colour(1.0), [50, 200, 60]);
        assert_eq!(colour(0.5)[0], 220);
    }
}
