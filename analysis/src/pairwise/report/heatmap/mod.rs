//! `--heatmap FILE.png|FILE.svg`: the matrix as a picture drawn with plotters, so the bad row,
//! column or cell shows at a glance: colour from red (worst) through yellow to green (best) on a
//! scale with its unit and the verdict's bar, a black corner on each cell past the bar, blue
//! frames on the cells, rows and columns the verdict blamed, hosts on the rows. Above
//! [`view::RANK_VIEW_MAX`] ranks the picture shows hosts instead of ranks; a `--rails` run adds a
//! matrix per rail. `view` decides what is shown, `draw` draws it, `font` is the embedded font.

mod draw;
mod font;
pub mod view;

use plotters::prelude::*;

pub use draw::{Layout, BLAMED, DIAGONAL, GRID};

use crate::export::{ExportError, Exporter};
use crate::pairwise::PairwiseOutcome;

/// The picture's size in pixels.
fn size(l: &Layout) -> (u32, u32) {
    (l.width.max(1).unsigned_abs(), l.height.max(1).unsigned_abs())
}

/// SVG text.
pub fn svg(o: &PairwiseOutcome) -> Result<String, ExportError> {
    font::ensure()?;
    let p = view::picture(o);
    let l = Layout::of(&p);
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, size(&l)).into_drawing_area();
        draw::draw(&root, &p, &l)?;
        root.present().map_err(|e| ExportError::Draw(e.to_string()))?;
    }
    if !out.ends_with('\n') {
        out.push('\n');
    }
    Ok(out)
}

/// The picture's RGB pixels, width and height (what the PNG holds).
pub fn pixels(o: &PairwiseOutcome) -> Result<(Vec<u8>, u32, u32), ExportError> {
    font::ensure()?;
    let p = view::picture(o);
    let l = Layout::of(&p);
    let (w, h) = size(&l);
    let mut px = vec![255u8; w as usize * h as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut px, (w, h)).into_drawing_area();
        draw::draw(&root, &p, &l)?;
        root.present().map_err(|e| ExportError::Draw(e.to_string()))?;
    }
    Ok((px, w, h))
}

/// PNG bytes.
pub fn png(o: &PairwiseOutcome) -> Result<Vec<u8>, ExportError> {
    let (px, w, h) = pixels(o)?;
    let mut out = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut out, w, h);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut wr = enc.write_header()?;
        wr.write_image_data(&px)?;
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
            Heatmap::Svg => Ok(svg(o)?.into_bytes()),
        }
    }
}

/// By file extension: `.png` or `.svg`.
pub fn render(o: &PairwiseOutcome, path: &std::path::Path) -> Result<Vec<u8>, String> {
    Heatmap::for_path(path)?.render(o).map_err(|e| e.to_string())
}

#[cfg(test)]
pub(crate) mod tests;
