//! Prometheus/OpenMetrics text exposition, as node exporter's textfile collector reads it: the
//! writer both formats share (families with `# HELP` and `# TYPE`, label values escaped, one
//! sample per line), so each format's exporter only says what its samples are.

use std::fmt::Write as _;

/// One metric family: its samples, written together under one HELP and TYPE.
pub struct Family {
    name: &'static str,
    help: &'static str,
    samples: Vec<(Vec<(&'static str, String)>, f64)>,
}

impl Family {
    /// A gauge family (every meshrun figure is a gauge: a value measured by one run).
    pub fn gauge(name: &'static str, help: &'static str) -> Family {
        Family {
            name,
            help,
            samples: Vec::new(),
        }
    }

    pub fn sample(&mut self, labels: Vec<(&'static str, String)>, value: f64) {
        if value.is_finite() {
            self.samples.push((labels, value));
        }
    }
}

/// A label value as the text format takes it: backslash, double quote and newline escaped.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// The families that have samples, in the text format, ending with a newline.
pub fn render(families: &[Family]) -> String {
    let mut s = String::new();
    for f in families.iter().filter(|f| !f.samples.is_empty()) {
        let _ = writeln!(s, "# HELP {} {}", f.name, f.help);
        let _ = writeln!(s, "# TYPE {} gauge", f.name);
        for (labels, v) in &f.samples {
            let l: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{}\"", escape(v))).collect();
            if l.is_empty() {
                let _ = writeln!(s, "{} {v}", f.name);
            } else {
                let _ = writeln!(s, "{}{{{}}} {v}", f.name, l.join(","));
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_with_escaped_labels() {
        let mut a = Family::gauge("meshrun_x", "An x.");
        a.sample(vec![("host", "a\"b\\c".into())], 1.5);
        a.sample(vec![], f64::NAN);
        let empty = Family::gauge("meshrun_y", "Never written.");
        let mut b = Family::gauge("meshrun_z", "A z.");
        b.sample(vec![], 2.0);
        assert_eq!(
            render(&[a, empty, b]),
            "# HELP meshrun_x An x.\n# TYPE meshrun_x gauge\nmeshrun_x{host=\"a\\\"b\\\\c\"} 1.5\n\
             # HELP meshrun_z A z.\n# TYPE meshrun_z gauge\nmeshrun_z 2\n"
        );
    }
}
