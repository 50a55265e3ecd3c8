//! The verdict judged on fabrics drawn at random (issue 67): a fabric drawn from a seed with its
//! truth recorded ([`draw`]), built on the namespace beds and run once with default verdict
//! options ([`bed`]), its report read ([`findings`]) and scored against the truth ([`score`]),
//! and the draws counted per fault kind and against the targets ([`table`]). Driven by
//! `bench/verdict-campaign`; a few fixed seeds run in CI (`tests/tests/campaign.rs`).

pub mod bed;
pub mod draw;
pub mod findings;
pub mod score;
pub mod table;

use std::path::Path;

use draw::{Fabric, Timing};
use score::Outcome;

/// One draw, run and scored.
pub struct Scored {
    pub fabric: Fabric,
    pub trial: bed::Trial,
    pub found: Vec<findings::Finding>,
    pub outcome: Outcome,
    pub row: table::Row,
}

/// Draw the fabric of `seed`, run it, and score it; its report goes to `out/seed-N.txt`.
pub fn run_seed(seed: u64, out: &Path) -> Scored {
    let fabric = draw::draw(seed);
    let trial = bed::run(&fabric, out);
    let _ = std::fs::write(
        out.join(format!("seed-{seed}.txt")),
        format!("{}\n{}", trial.run.stdout, trial.run.stderr),
    );
    let found = findings::findings(&trial.run.stdout, trial.run.code);
    let mut outcome = score::outcome(&fabric, trial.run.code, &found);
    if trial.json.is_none() && outcome != Outcome::RunFailed {
        outcome = Outcome::RunFailed;
    }
    let json = trial.json.clone().unwrap_or_default();
    let row = table::Row {
        seed,
        kind: fabric.fault.map_or("clean", |f| f.part.kind().name()).to_string(),
        timing: match fabric.fault.map(|f| f.timing) {
            None => "-",
            Some(Timing::Steady) => "steady",
            Some(Timing::Intermittent { .. }) => "intermittent",
        }
        .to_string(),
        family: fabric.family.name().to_string(),
        shaping: fabric.shaping.name().to_string(),
        outcome,
        level: fabric.effective_level(),
        low_share: trial.low_share(&fabric),
        depth: score::depth(&fabric, &json),
        sensitivity: score::sensitivity(&json),
        host_blamed: found.iter().any(score::blames_a_host),
    };
    Scored {
        fabric,
        trial,
        found,
        outcome,
        row,
    }
}

impl Scored {
    /// The draw in a few lines: the truth, how to build it by hand, the run, the outcome and
    /// what the report named.
    pub fn describe(&self) -> String {
        let r = &self.row;
        let mut s = format!("# {}\n", self.fabric.describe());
        for l in &self.trial.setup {
            s.push_str(&format!("#   {l}\n"));
        }
        s.push_str(&format!(
            "#   meshrun launch ... -- {}\n#   replay: bench/verdict-campaign 1 {}\n",
            self.trial.args.join(" "),
            self.fabric.seed
        ));
        let fig = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{:.0}%", 100.0 * v));
        s.push_str(&format!(
            "#   exit {}, {:.0} s; low for {} of the run; measured drop {}, sensitivity {}: {}\n",
            self.trial.run.code.map_or("none".into(), |c| c.to_string()),
            self.trial.run.elapsed.as_secs_f64(),
            fig(r.low_share),
            fig(r.depth),
            fig(r.sensitivity),
            self.outcome.name()
        ));
        for f in &self.found {
            s.push_str(&format!("#   {}\n", f.line.chars().take(160).collect::<String>()));
        }
        s
    }

    /// The draw as one JSON line of the campaign's record.
    pub fn record(&self) -> serde_json::Value {
        let r = &self.row;
        serde_json::json!({
            "seed": r.seed,
            "fabric": self.fabric.describe(),
            "kind": r.kind,
            "timing": r.timing,
            "family": r.family,
            "shaping": r.shaping,
            "level": r.level,
            "outcome": self.outcome.name(),
            "low_share": r.low_share,
            "depth": r.depth,
            "sensitivity": r.sensitivity,
            "host_blamed": r.host_blamed,
            "exit": self.trial.run.code,
            "seconds": self.trial.run.elapsed.as_secs_f64(),
            "setup": self.trial.setup,
            "args": self.trial.args,
            "findings": self.found.iter().map(|f| f.line.clone()).collect::<Vec<_>>(),
        })
    }
}
