//! The heatmap's one font, embedded: DejaVu Sans (its licence in `DejaVuSans.LICENSE` beside it),
//! registered once with plotters' ab_glyph text backend, so a PNG looks the same on every machine
//! and needs no system font. An SVG names the family only; the viewer draws it with its own.

use std::sync::OnceLock;

use plotters::style::{register_font, FontStyle};

use crate::export::ExportError;

/// The family the picture asks for: plotters finds the embedded font under it, and a browser
/// showing the SVG falls back to its own sans-serif font.
pub const FAMILY: &str = "sans-serif";

static DEJAVU_SANS: &[u8] = include_bytes!("DejaVuSans.ttf");

/// The font registered (once per process), or why it could not be.
pub fn ensure() -> Result<(), ExportError> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| register_font(FAMILY, FontStyle::Normal, DEJAVU_SANS).is_ok());
    if ok {
        Ok(())
    } else {
        Err(ExportError::Draw(
            "the embedded DejaVu Sans font could not be read".into(),
        ))
    }
}
