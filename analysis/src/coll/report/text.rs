//! The text report on stdout, as nccl-tests prints it: streamed row by row while the run goes
//! ([`Stream`]), or rendered whole ([`CollText`]) from the same pieces.

use std::io::Write;

use super::{device_line, footer, header, row_line, table_header, BaselineRun, CollConfig, CollRun, DeviceInfo, Row};
use crate::export::{ExportError, Exporter};

/// The lines before the first row: the header, one `# Using devices` line per rank, the columns.
pub fn preamble(cfg: &CollConfig, devices: &[DeviceInfo]) -> String {
    let mut s = header(cfg);
    for d in devices {
        s.push_str(&device_line(d.rank, d.pid, &d.host, d.device, &d.bus_id, &d.name));
    }
    if let Some(nc) = &cfg.nic_choice {
        s.push_str(&format!("#  NIC choice: {nc}\n"));
    }
    if let Some(p) = &cfg.p2p {
        s.push_str(&format!("#  P2P: {}\n", p.line()));
    }
    s.push_str(&table_header(cfg.per_iter));
    s
}

/// The baseline's own table, after meshrun's.
pub fn baseline_section(name: &str, b: &BaselineRun<'_>) -> String {
    let mut s = format!(
        "# Baseline: the MPI library's own {name} ({}) in the same harness, out-of-place only, each size run right after meshrun's\n",
        b.library
    );
    let per_iter = b.rows.first().is_some_and(|r| r.out_of_place.per_iter.is_some());
    s.push_str(&table_header(per_iter));
    for r in b.rows {
        s.push_str(&row_line(r));
    }
    for n in b.notes {
        s.push_str(&format!("# {n}\n"));
    }
    s.push_str(&footer(b.rows, None));
    s
}

/// The whole text report.
pub struct CollText;

impl Exporter<CollRun<'_>> for CollText {
    fn render(&self, run: &CollRun<'_>) -> Result<Vec<u8>, ExportError> {
        let mut s = preamble(run.cfg, run.devices);
        for r in run.rows {
            s.push_str(&row_line(r));
        }
        s.push_str(&footer(run.rows, run.cfg.busbw_bar.as_ref()));
        if let Some(b) = &run.baseline {
            s.push_str(&baseline_section(run.name, b));
        }
        Ok(s.into_bytes())
    }
}

/// The text report printed as the run goes, on rank 0 only (`on`), each piece flushed at once
/// so a long sweep shows its rows as they are measured.
pub struct Stream {
    pub on: bool,
}

impl Stream {
    fn put(&self, s: &str) {
        if self.on {
            let mut o = std::io::stdout();
            let _ = o.write_all(s.as_bytes());
            let _ = o.flush();
        }
    }
    pub fn preamble(&self, cfg: &CollConfig, devices: &[DeviceInfo]) {
        self.put(&preamble(cfg, devices));
    }
    pub fn row(&self, r: &Row) {
        self.put(&row_line(r));
    }
    pub fn footer(&self, rows: &[Row], cfg: &CollConfig) {
        self.put(&footer(rows, cfg.busbw_bar.as_ref()));
    }
    pub fn baseline(&self, name: &str, b: &BaselineRun<'_>) {
        self.put(&baseline_section(name, b));
    }
}
