//! The picture drawn with plotters, on any of its backends (the PNG's bitmap, the SVG): the title
//! and the blamed parts, each view's matrix with its labels and marks, and the colour scale with
//! its unit and the bar. [`Layout`] places everything, so the tests find a cell's pixels.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::font::FAMILY;
use super::view::{Picture, View};
use crate::export::ExportError;

const PAD: i32 = 12;
const TITLE_H: i32 = 26;
const KEY_H: i32 = 20;
const HEADING_H: i32 = 24;
const COLUMNS_H: i32 = 18;
const LEGEND_W: i32 = 230;
const LEGEND_BAR_W: i32 = 22;
const LEGEND_H: i32 = 200;
/// About the widest glyph of the 13 px labels, so a label's room is never short.
const CHAR_W: i32 = 8;
/// Cells at least this wide carry their figure.
const NUMBERS_FROM: i32 = 44;

/// The diagonal (a rank with itself), the grid, and the blamed marks' colour (no cell colour is
/// blue: the scale runs red, yellow, green).
pub const DIAGONAL: [u8; 3] = [208, 208, 208];
pub const GRID: [u8; 3] = [136, 136, 136];
pub const BLAMED: [u8; 3] = [20, 60, 230];
const SLOW_MARK: [u8; 3] = [0, 0, 0];

/// Where everything goes, in pixels.
#[derive(Debug, Clone, PartialEq)]
pub struct Layout {
    pub width: i32,
    pub height: i32,
    /// Left edge of every matrix (after the row labels).
    pub left: i32,
    /// Each view's top edge of its first row, and its cell size.
    pub views: Vec<(i32, i32)>,
    /// The legend's colour bar: left, top (the best figure) and height.
    pub legend: (i32, i32, i32),
}

/// A view's cell size: 64 px for a few ranks, down to 10 px for a hundred.
fn cell_size(k: usize) -> i32 {
    (640 / k.max(1) as i32).clamp(10, 64)
}

impl Layout {
    pub fn of(p: &Picture) -> Layout {
        let label_w = p
            .views
            .iter()
            .flat_map(|v| v.labels.iter())
            .map(|l| l.chars().count() as i32 * CHAR_W)
            .max()
            .unwrap_or(0);
        let left = PAD + label_w + PAD;
        let mut y = PAD + TITLE_H + KEY_H;
        let mut views = Vec::new();
        let mut widest = 0;
        for v in &p.views {
            let c = cell_size(v.labels.len());
            y += HEADING_H + COLUMNS_H;
            views.push((y, c));
            y += c * v.labels.len() as i32 + PAD;
            widest = widest.max(c * v.labels.len() as i32);
        }
        let legend_x = left + widest + 3 * PAD;
        let legend_top = views.first().map_or(y, |v| v.0) + KEY_H;
        let text_w = |s: &str| 2 * PAD + s.chars().count() as i32 * CHAR_W;
        let key_w = text_w(&blamed_line(p));
        let width = (legend_x + LEGEND_W).max(text_w(&p.title)).max(key_w);
        let height = y.max(legend_top + LEGEND_H + 3 * KEY_H + PAD) + PAD;
        Layout {
            width,
            height,
            left,
            views,
            legend: (legend_x, legend_top, LEGEND_H),
        }
    }

    /// The pixel rectangle of view `v`'s cell (i, j): left, top, size.
    pub fn cell(&self, v: usize, i: usize, j: usize) -> Option<(i32, i32, i32)> {
        let &(top, c) = self.views.get(v)?;
        Some((self.left + j as i32 * c, top + i as i32 * c, c))
    }
}

fn rgb(c: [u8; 3]) -> RGBColor {
    RGBColor(c[0], c[1], c[2])
}

fn err<E: std::fmt::Display>(e: E) -> ExportError {
    ExportError::Draw(e.to_string())
}

type Area<'a, DB> = DrawingArea<DB, Shift>;

fn fill<DB: DrawingBackend>(a: &Area<DB>, x: i32, y: i32, w: i32, h: i32, c: [u8; 3]) -> Result<(), ExportError> {
    a.draw(&Rectangle::new([(x, y), (x + w, y + h)], rgb(c).filled()))
        .map_err(err)
}

/// A frame `t` pixels thick inside the rectangle, as four filled strips (a stroke's width is
/// drawn differently by each backend).
fn frame<DB: DrawingBackend>(
    a: &Area<DB>,
    (x, y, w, h): (i32, i32, i32, i32),
    t: i32,
    c: [u8; 3],
) -> Result<(), ExportError> {
    fill(a, x, y, w, t, c)?;
    fill(a, x, y + h - t, w, t, c)?;
    fill(a, x, y, t, h, c)?;
    fill(a, x + w - t, y, t, h, c)
}

fn text<DB: DrawingBackend>(
    a: &Area<DB>,
    s: &str,
    (x, y): (i32, i32),
    size: u32,
    c: [u8; 3],
    (h, v): (HPos, VPos),
) -> Result<(), ExportError> {
    let colour = rgb(c);
    let style = TextStyle::from((FAMILY, size).into_font())
        .color(&colour)
        .pos(Pos::new(h, v));
    a.draw(&Text::new(s.to_string(), (x, y), style)).map_err(err)
}

const LEFT_MIDDLE: (HPos, VPos) = (HPos::Left, VPos::Center);
const RIGHT_MIDDLE: (HPos, VPos) = (HPos::Right, VPos::Center);
const CENTRE: (HPos, VPos) = (HPos::Center, VPos::Center);
const BLACK_: [u8; 3] = [0, 0, 0];

fn blamed_line(p: &Picture) -> String {
    if p.blamed.is_empty() {
        "blamed: nothing".to_string()
    } else {
        format!("blamed: {}", p.blamed.join(", "))
    }
}

/// The figure a cell shows.
fn cell_text(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// The whole picture onto `a`, laid out as `l`.
pub fn draw<DB: DrawingBackend>(a: &Area<DB>, p: &Picture, l: &Layout) -> Result<(), ExportError> {
    a.fill(&WHITE).map_err(err)?;
    text(a, &p.title, (PAD, PAD + TITLE_H / 2), 16, BLACK_, LEFT_MIDDLE)?;
    let key_colour = if p.blamed.is_empty() { BLACK_ } else { BLAMED };
    text(
        a,
        &blamed_line(p),
        (PAD, PAD + TITLE_H + KEY_H / 2),
        13,
        key_colour,
        LEFT_MIDDLE,
    )?;
    for (k, v) in p.views.iter().enumerate() {
        view(a, p, l, k, v)?;
    }
    legend(a, p, l)
}

fn view<DB: DrawingBackend>(a: &Area<DB>, p: &Picture, l: &Layout, k: usize, v: &View) -> Result<(), ExportError> {
    let Some(&(top, c)) = l.views.get(k) else {
        return Ok(());
    };
    let n = v.labels.len() as i32;
    text(
        a,
        &v.heading,
        (PAD, top - COLUMNS_H - HEADING_H / 2),
        14,
        BLACK_,
        LEFT_MIDDLE,
    )?;
    for (j, col) in v.columns.iter().enumerate() {
        // Every column's index while they fit, else every fifth.
        if c >= 18 || j % 5 == 0 {
            let x = l.left + j as i32 * c + c / 2;
            text(a, col, (x, top - COLUMNS_H / 2), 12, BLACK_, CENTRE)?;
        }
    }
    for (i, row) in v.cells.iter().enumerate() {
        let y = top + i as i32 * c;
        let colour = if v.blamed_lines[i] { BLAMED } else { BLACK_ };
        if c >= 12 || i % 5 == 0 {
            text(a, &v.labels[i], (l.left - PAD / 2, y + c / 2), 13, colour, RIGHT_MIDDLE)?;
        }
        for (j, cell) in row.iter().enumerate() {
            let x = l.left + j as i32 * c;
            let shade = match (i == j && cell.is_none(), cell) {
                (true, _) => DIAGONAL,
                (false, Some(x)) => p.scale.colour(*x),
                (false, None) => [255, 255, 255],
            };
            fill(a, x, y, c, c, GRID)?;
            fill(a, x + 1, y + 1, c - 2, c - 2, shade)?;
            if v.blamed[i][j] {
                frame(a, (x + 1, y + 1, c - 2, c - 2), (c / 12).max(2), BLAMED)?;
            }
            // Over the frame: a blamed cell shows both marks.
            if v.slow[i][j] {
                let t = (c / 3).max(4);
                a.draw(&Polygon::new(
                    vec![(x + 1, y + 1), (x + 1 + t, y + 1), (x + 1, y + 1 + t)],
                    rgb(SLOW_MARK).filled(),
                ))
                .map_err(err)?;
            }
            if let (Some(x_), true) = (cell, c >= NUMBERS_FROM) {
                text(a, &cell_text(*x_), (x + c / 2, y + c / 2), 12, BLACK_, CENTRE)?;
            }
        }
    }
    // A blamed node's or NIC's row and column, framed whole.
    for (i, _) in v.blamed_lines.iter().enumerate().filter(|(_, b)| **b) {
        let at = i as i32 * c;
        frame(a, (l.left - 2, top + at - 2, n * c + 4, c + 4), 2, BLAMED)?;
        frame(a, (l.left + at - 2, top - 2, c + 4, n * c + 4), 2, BLAMED)?;
    }
    Ok(())
}

/// The colour scale: best at the top, the unit above, five figures beside it, the bar marked; and
/// the key of the two marks below it.
fn legend<DB: DrawingBackend>(a: &Area<DB>, p: &Picture, l: &Layout) -> Result<(), ExportError> {
    let (x, top, h) = l.legend;
    let s = p.scale;
    let (best, worst) = if s.higher_better { (s.hi, s.lo) } else { (s.lo, s.hi) };
    let at = |v: f64| -> i32 {
        let q = s.quality(v);
        top + ((1.0 - q) * f64::from(h - 1)).round() as i32
    };
    text(
        a,
        &format!("colour scale [{}]", p.unit),
        (x, top - KEY_H / 2),
        13,
        BLACK_,
        LEFT_MIDDLE,
    )?;
    for dy in 0..h {
        let q = 1.0 - f64::from(dy) / f64::from(h - 1);
        fill(a, x, top + dy, LEGEND_BAR_W, 1, super::view::colour(q))?;
    }
    frame(a, (x - 1, top - 1, LEGEND_BAR_W + 2, h + 2), 1, GRID)?;
    for k in 0..5 {
        let v = best + (worst - best) * f64::from(k) / 4.0;
        let y = at(v);
        fill(a, x + LEGEND_BAR_W, y, 5, 1, BLACK_)?;
        text(
            a,
            &format!("{v:.2} {}", p.unit),
            (x + LEGEND_BAR_W + 8, y),
            12,
            BLACK_,
            LEFT_MIDDLE,
        )?;
    }
    if let Some(bar) = p.bar {
        let y = at(bar);
        fill(a, x - 6, y - 1, LEGEND_BAR_W + 12, 3, BLACK_)?;
        text(
            a,
            &format!("bar {bar:.2}"),
            (x + LEGEND_BAR_W + 112, y),
            12,
            BLACK_,
            LEFT_MIDDLE,
        )?;
    }
    // The marks' key.
    let y = top + h + KEY_H;
    let t = 12;
    fill(a, x, y - t / 2, t, t, [255, 255, 255])?;
    frame(a, (x, y - t / 2, t, t), 1, GRID)?;
    a.draw(&Polygon::new(
        vec![(x, y - t / 2), (x + t, y - t / 2), (x, y + t / 2)],
        rgb(SLOW_MARK).filled(),
    ))
    .map_err(err)?;
    text(a, "slow: past the bar", (x + t + 8, y), 12, BLACK_, LEFT_MIDDLE)?;
    let y = y + KEY_H;
    frame(a, (x, y - t / 2, t, t), 3, BLAMED)?;
    text(a, "blamed by the verdict", (x + t + 8, y), 12, BLACK_, LEFT_MIDDLE)
}
