//! Output in nccl-tests' format, column for column, and its `-J` JSON shape.
//!
//! Widths follow the DESIGN reference lines (nccl-tests 2.18/2.19 layout): row prefix
//! `%12li  %12li  %8s  %6s  %6s`, then per placement `  %7s  %6.2f  %6.2f  %5g`, the time with
//! 2 decimals below 100 us, 1 below 10 ms, none above. (The newest nccl-tests widened `#wrong` to
//! `%6g`; scripts split on whitespace either way.)

mod json;
mod metrics;
mod text;

use std::fmt::Write as _;

use super::{avg_busbw, total_wrong, BusbwBar, CollConfig, Placement, Row, Step};

pub use json::{env_block, json_report, now_string, CollJson, DeviceInfo};
pub use metrics::CollMetrics;
pub use text::{baseline_section, preamble, CollText, Stream};

/// Everything one collective run's reports show, once the run is over.
pub struct CollRun<'a> {
    pub cfg: &'a CollConfig,
    /// The collective's name (`all_reduce`).
    pub name: &'a str,
    /// The command line, as the JSON records it.
    pub args: &'a [String],
    /// The environment, as the JSON records it ([`env_block`]).
    pub env: &'a [String],
    pub devices: &'a [DeviceInfo],
    pub rows: &'a [Row],
    pub baseline: Option<BaselineRun<'a>>,
    /// When the run started, as nccl-tests writes it.
    pub start_time: &'a str,
}

/// The MPI library's own collective, run in the same harness (`--baseline mpi`).
pub struct BaselineRun<'a> {
    /// The JSON's `implementation`: `mpi`.
    pub implementation: &'a str,
    /// The library's version line.
    pub library: &'a str,
    pub rows: &'a [Row],
    /// Sizes or types the library could not run, one line each.
    pub notes: &'a [String],
}

/// nccl-tests' time column.
pub fn fmt_time(us: f64) -> String {
    if us >= 10000.0 {
        format!("{us:7.0}")
    } else if us >= 100.0 {
        format!("{us:7.1}")
    } else {
        format!("{us:7.2}")
    }
}

/// C's `%g` (6 significant digits, trailing zeros removed, exponent form outside 1e-4..1e6).
pub fn fmt_g(x: f64) -> String {
    if x == 0.0 {
        return "0".into();
    }
    if !x.is_finite() {
        return if x.is_nan() {
            "nan".into()
        } else if x > 0.0 {
            "inf".into()
        } else {
            "-inf".into()
        };
    }
    let sci = format!("{x:.5e}");
    let (mant, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let strip = |s: &str| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s.to_string()
        }
    };
    if !(-4..6).contains(&exp) {
        format!("{}e{}{:02}", strip(mant), if exp < 0 { '-' } else { '+' }, exp.abs())
    } else {
        let decimals = (5 - exp).max(0) as usize;
        strip(&format!("{x:.decimals$}"))
    }
}

/// The first header line and the `# Using devices` title.
pub fn header(cfg: &CollConfig) -> String {
    let (step, kind) = match cfg.step {
        Step::Factor(f) => (f, "factor"),
        Step::Bytes(b) => (b, "bytes"),
    };
    let mut s = format!(
        "# nThread 1 nGpus 1 minBytes {} maxBytes {} step: {step}({kind}) warmup iters: {} iters: {} agg iters: {} validation: {} graph: 0\n",
        cfg.min_bytes,
        cfg.max_bytes,
        cfg.warmup,
        cfg.iters,
        cfg.agg,
        u8::from(cfg.check)
    );
    if cfg.per_iter {
        // nccl-tests' line, with meshrun's clock: wall time on every rank, not CUDA events.
        s.push_str("# Per-Iteration Report: wall-clock timing on every rank; i_* uses max over ranks");
        if cfg.per_iter_skip > 0 {
            let _ = write!(s, "; summary skips first {} iterations", cfg.per_iter_skip);
        }
        s.push_str(" \n");
    }
    s.push_str("#\n# Using devices\n");
    s
}

/// One `# Using devices` line.
pub fn device_line(rank: usize, pid: u32, host: &str, device: i32, bus_id: &str, name: &str) -> String {
    format!(
        "#  Rank {rank:2} Group {:2} Pid {pid:6} on {host:>10} device {device:2} [{bus_id}] {name}\n",
        0
    )
}

/// The column header block; with `-I` (`per_iter`) nccl-tests' per-iteration layout, four more
/// columns per placement.
pub fn table_header(per_iter: bool) -> String {
    if per_iter {
        return per_iter_table_header();
    }
    let mut s = String::from("#\n");
    let _ = writeln!(
        s,
        "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}           out-of-place                       in-place          ",
        "", "", "", "", ""
    );
    let _ = writeln!(
        s,
        "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6} {:>6}  {:>7}  {:>6}  {:>6} {:>6}",
        "size",
        "count",
        "type",
        "redop",
        "root",
        "time",
        "algbw",
        "busbw",
        "#wrong",
        "time",
        "algbw",
        "busbw",
        "#wrong"
    );
    let _ = writeln!(
        s,
        "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>5}  {:>7}  {:>6}  {:>6}  {:>5}",
        "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", ""
    );
    s
}

/// nccl-tests' (2.19 and later) header block for `-I`, with its trailing space where its
/// format leaves one.
fn per_iter_table_header() -> String {
    let mut s = String::from("#\n");
    let _ = writeln!(
        s,
        "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}              out-of-place (+ per-iteration)                                in-place (+ per-iteration)",
        "", "", "", "", ""
    );
    let cols = |a: [&str; 5], p: [&str; 8]| -> String {
        let mut l = format!("# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}", a[0], a[1], a[2], a[3], a[4]);
        for _ in 0..2 {
            let _ = write!(
                l,
                "  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>7}  {:>7}  {:>7}",
                p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]
            );
        }
        l.push(' ');
        l
    };
    let _ = writeln!(
        s,
        "{}",
        cols(
            ["size", "count", "type", "redop", "root"],
            ["time", "algbw", "busbw", "#wrong", "i_min", "i_max", "i_p99", "i_cv%"]
        )
    );
    let _ = writeln!(
        s,
        "{}",
        cols(
            ["(B)", "(elements)", "", "", ""],
            ["(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(us)", "(%)"]
        )
    );
    s
}

/// nccl-tests' `getFloatStr` (2.19 and later): the value in `width` characters with 2 decimals,
/// else 1, else none, else C's `%.1e` (`%.0e` below width 7).
pub fn float_str(v: f64, width: usize) -> String {
    for d in [2, 1, 0] {
        let s = format!("{v:>width$.d$}");
        if s.len() <= width {
            return s;
        }
    }
    let digits = if width >= 7 { 1 } else { 0 };
    let sci = format!("{v:.digits$e}");
    let (mant, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let c = format!("{mant}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
    format!("{c:>width$}")
}

fn placement(p: &Placement) -> String {
    // `#wrong` is 5 wide in the 2.18 layout, 6 in the per-iteration one (as nccl-tests 2.19+).
    let w = if p.per_iter.is_some() { 6 } else { 5 };
    let wrong = p
        .wrong
        .map_or_else(|| format!("{:>w$}", "N/A"), |x| format!("{:>w$}", fmt_g(x as f64)));
    let mut s = format!("  {}  {:6.2}  {:6.2}  {wrong}", fmt_time(p.time_us), p.algbw, p.busbw);
    if let Some(it) = &p.per_iter {
        for v in [it.min_us, it.max_us, it.p99_us, it.cv_pct] {
            let _ = write!(s, "  {}", float_str(v, 7));
        }
    }
    s
}

/// One row.
pub fn row_line(r: &Row) -> String {
    let mut s = format!(
        "{:12}  {:12}  {:>8}  {:>6}  {:>6}",
        r.size,
        r.count,
        r.dtype.name(),
        r.redop,
        r.root
    );
    s.push_str(&placement(&r.out_of_place));
    if let Some(p) = &r.in_place {
        s.push_str(&placement(p));
    }
    s.push('\n');
    s
}

/// The closing lines. With a bar (`--expect-busbw`, `NCCL_TESTS_MIN_BW`) the average says OK or
/// FAILED as nccl-tests' does, and one more line says what the bar was and where it came from.
pub fn footer(rows: &[Row], bar: Option<&BusbwBar>) -> String {
    let wrong = total_wrong(rows);
    let avg = avg_busbw(rows);
    let mut s = format!(
        "# {:<20} : {} {}\n# {:<20} : {}",
        "Out of bounds values",
        wrong,
        if wrong == 0 { "OK" } else { "FAILED" },
        "Avg bus bandwidth",
        fmt_g(avg)
    );
    match bar {
        Some(b) => {
            let verdict = if b.passes(avg) { "OK" } else { "FAILED" };
            let _ = write!(
                s,
                " {verdict}\n# {:<20} : {} GB/s from {}; the average fails below {} (90%, as nccl-tests)\n",
                "Expected busbw",
                fmt_g(b.gbps),
                b.source,
                fmt_g(b.floor())
            );
        }
        None => s.push('\n'),
    }
    s.push_str("#\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DataType;

    /// The reference lines of ../shared/DESIGN.md section 3, byte for byte.
    const DESIGN_HEADER: &str = "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong";
    const DESIGN_UNITS: &str =
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)";
    const DESIGN_ROW: &str = "     1048576        262144     float     sum      -1    230.7    4.54    7.95      0    229.7    4.56    7.99      0";

    fn p(time_us: f64, algbw: f64, busbw: f64) -> Placement {
        Placement {
            time_us,
            algbw,
            busbw,
            wrong: Some(0),
            per_iter: None,
        }
    }

    #[test]
    fn header_and_row_match_the_reference_lines() {
        let h = table_header(false);
        let lines: Vec<&str> = h.lines().collect();
        assert_eq!(lines[2], DESIGN_HEADER);
        assert_eq!(lines[3].trim_end(), DESIGN_UNITS);
        let r = Row {
            size: 1048576,
            count: 262144,
            dtype: DataType::Float,
            redop: "sum".into(),
            root: -1,
            out_of_place: p(230.7, 4.54, 7.95),
            in_place: Some(p(229.7, 4.56, 7.99)),
        };
        assert_eq!(row_line(&r).trim_end_matches('\n'), DESIGN_ROW);
    }

    #[test]
    fn time_column_decimals() {
        assert_eq!(fmt_time(19.72), "  19.72");
        assert_eq!(fmt_time(119.1), "  119.1");
        assert_eq!(fmt_time(19668.0), "  19668");
        assert_eq!(fmt_time(1283.8), " 1283.8");
    }

    #[test]
    fn c_style_g() {
        assert_eq!(fmt_g(4.105016), "4.10502");
        assert_eq!(fmt_g(0.0), "0");
        assert_eq!(fmt_g(3.0), "3");
        assert_eq!(fmt_g(123456789.0), "1.23457e+08");
        assert_eq!(fmt_g(0.0001234), "0.0001234");
        assert_eq!(fmt_g(0.00001), "1e-05");
        assert_eq!(fmt_g(999999.5), "1e+06");
        assert_eq!(fmt_g(100000.0), "100000");
        assert_eq!(fmt_g(11.94), "11.94");
    }

    #[test]
    fn device_line_layout() {
        assert_eq!(
            device_line(0, 1234, "node01", 0, "0000:1b:00", "NVIDIA H100"),
            "#  Rank  0 Group  0 Pid   1234 on     node01 device  0 [0000:1b:00] NVIDIA H100\n"
        );
    }

    /// The published 8-GPU all_reduce_perf output: busbw = algbw x 2(n-1)/n on every row, and the
    /// average is the mean of all 50 busbw values (both placements).
    #[test]
    fn reference_output_is_reproduced_by_our_formulas() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/nccl-tests-all_reduce_perf-2.18-2x4xA40.txt"
        ))
        .unwrap();
        let mut busbws = Vec::new();
        let mut recomputed = Vec::new();
        // all_reduce's bus-bandwidth factor at 8 ranks, 2(n-1)/n (`collectives::coll::BusFactor`).
        let factor = 2.0 * 7.0 / 8.0;
        for l in text
            .lines()
            .filter(|l| !l.starts_with('#') && l.split_whitespace().count() == 13)
        {
            let f: Vec<&str> = l.split_whitespace().collect();
            let size: u64 = f[0].parse().unwrap();
            for k in [5, 9] {
                let (time, alg, bus): (f64, f64, f64) = (
                    f[k].parse().unwrap(),
                    f[k + 1].parse().unwrap(),
                    f[k + 2].parse().unwrap(),
                );
                let a = crate::coll::algbw(size, time * 1e-6);
                // Printed values are rounded to 2 decimals (and the time to 4-5 digits).
                assert!((a - alg).abs() <= 0.005 + alg * 0.001, "{l}: algbw {a} vs {alg}");
                assert!(
                    (a * factor - bus).abs() <= 0.005 + bus * 0.001,
                    "{l}: busbw {} vs {bus}",
                    a * factor
                );
                busbws.push(bus);
                recomputed.push(a * factor);
            }
        }
        assert_eq!(busbws.len(), 50);
        // The printed busbw are rounded to 0.005 and the times to 4-5 digits, so the means agree with
        // the reported 4.10502 (nccl-tests averages its unrounded values) within that rounding.
        let avg = busbws.iter().sum::<f64>() / 50.0;
        assert!((avg - 4.10502).abs() <= 0.005, "{avg}");
        let avg = recomputed.iter().sum::<f64>() / 50.0;
        assert!((avg - 4.10502).abs() <= 0.001, "{avg}");
        assert!(text.contains("# Avg bus bandwidth : 4.10502"));
    }

    #[test]
    fn footer_says_ok_or_failed() {
        let mut r = Row {
            size: 8,
            count: 2,
            dtype: DataType::Float,
            redop: "sum".into(),
            root: -1,
            out_of_place: p(10.0, 1.0, 2.0),
            in_place: Some(p(10.0, 1.0, 4.0)),
        };
        assert_eq!(
            footer(std::slice::from_ref(&r), None),
            "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 3\n#\n"
        );
        // Average 3 GB/s. A bar of 3.3 fails below 2.97: OK; a bar of 3.4 fails below 3.06.
        let bar = |gbps: f64| BusbwBar {
            gbps,
            source: "NCCL_TESTS_MIN_BW".into(),
        };
        assert_eq!(
            footer(std::slice::from_ref(&r), Some(&bar(3.3))),
            "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 3 OK\n\
             # Expected busbw       : 3.3 GB/s from NCCL_TESTS_MIN_BW; the average fails below 2.97 (90%, as nccl-tests)\n#\n"
        );
        assert!(footer(std::slice::from_ref(&r), Some(&bar(3.4))).contains("# Avg bus bandwidth    : 3 FAILED\n"));
        r.in_place = Some(Placement {
            wrong: Some(3),
            ..p(10.0, 1.0, 4.0)
        });
        assert!(footer(&[r], None).starts_with("# Out of bounds values : 3 FAILED\n"));
    }

    #[test]
    fn float_str_as_nccl_tests_get_float_str() {
        assert_eq!(float_str(3.0, 7), "   3.00");
        assert_eq!(float_str(1234.567, 7), "1234.57");
        assert_eq!(float_str(12345.67, 7), "12345.7");
        assert_eq!(float_str(1234567.0, 7), "1234567");
        assert_eq!(float_str(12345678.0, 7), "1.2e+07");
        assert_eq!(float_str(0.004, 7), "   0.00");
    }

    #[test]
    fn per_iteration_columns() {
        let it = crate::coll::per_iter::PerIter::from_ranks(vec![vec![10.0, 9.0, 11.0, 12.5]], 1).unwrap();
        let mut pl = p(10.6, 1.0, 2.0);
        pl.per_iter = Some(it);
        let r = Row {
            size: 8,
            count: 2,
            dtype: DataType::Float,
            redop: "sum".into(),
            root: -1,
            out_of_place: pl.clone(),
            in_place: Some(pl),
        };
        // min 9, max 12.5, p99 12.5, cv: mean 10.833, population sd 1.4337 -> 13.23%.
        let line = row_line(&r);
        assert_eq!(
            line,
            "           8             2     float     sum      -1    10.60    1.00    2.00       0     9.00    12.50    12.50    13.23    10.60    1.00    2.00       0     9.00    12.50    12.50    13.23\n"
        );
        let h = table_header(true);
        let cols: Vec<&str> = h.lines().nth(2).unwrap().split_whitespace().collect();
        assert_eq!(cols.len(), 1 + 5 + 2 * 8);
        assert!(h.lines().nth(2).unwrap().ends_with("i_cv% "));
    }

    #[test]
    fn civil_time_format() {
        let s = now_string();
        assert_eq!(s.len(), 19);
        assert!(s.starts_with("20"));
    }
}
