//! A drawn fabric built on this machine's namespace beds, one `meshrun pairwise` run on it with
//! default verdict options, and what that run left: its report, its JSON, its exit status and,
//! for an intermittent fault, when the part was low.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::draw::{Fabric, Family, Part, Shaping, Timing};
use crate::{LeafSpine, NetnsCluster, Run};

/// The rate of an unshaped fabric's classes: never the limit here (the CPU is, at a few Gb/s).
pub const UNSHAPED_RATE: &str = "40gbit";

/// How long one run may take before it is counted as a failed run.
const RUN_LIMIT: Duration = Duration::from_secs(600);

/// One run on a drawn fabric.
pub struct Trial {
    pub run: Run,
    /// The `--json` report, where the run wrote one.
    pub json: Option<serde_json::Value>,
    /// The run's arguments after `meshrun launch ... --`.
    pub args: Vec<String>,
    /// The shaper's commands that built the fabric and its fault, as a shell would run them.
    pub setup: Vec<String>,
    /// An intermittent fault: each switch of its flapper (seconds since the epoch, low or not).
    pub phases: Vec<(f64, bool)>,
    /// The run's start and end, seconds since the epoch.
    pub window: (f64, f64),
}

impl Trial {
    /// The share of the run the faulty part spent low: 1 for a steady fault, None without one.
    pub fn low_share(&self, fabric: &Fabric) -> Option<f64> {
        let fault = fabric.fault?;
        match fault.timing {
            Timing::Steady => Some(1.0),
            Timing::Intermittent { .. } => Some(low_share(&self.phases, self.window)),
        }
    }
}

/// The share of `window` spent low, from the switches `phases` (time, low after it) in order.
pub fn low_share(phases: &[(f64, bool)], window: (f64, f64)) -> f64 {
    let (start, end) = window;
    if end <= start {
        return 0.0;
    }
    let mut low = 0.0;
    for (i, &(t, is_low)) in phases.iter().enumerate() {
        let next = phases.get(i + 1).map_or(f64::INFINITY, |p| p.0);
        let (a, b) = (t.max(start), next.min(end));
        if is_low && b > a {
            low += b - a;
        }
    }
    low / (end - start)
}

/// A flapper's `.phases` file: `MICROSECONDS a|b|fabric` lines; `a` is the low rate.
pub fn read_phases(path: &Path) -> Vec<(f64, bool)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (t, what) = l.split_once(' ')?;
            Some((t.parse::<f64>().ok()? / 1e6, what.trim() == "a"))
        })
        .collect()
}

/// Messages a direction sends: 1 MiB each, about two seconds' worth at the host rate (at least
/// 8), so a run of a dozen hosts lasts about a minute and an intermittent fault's period fits.
pub fn iterations(fabric: &Fabric) -> u64 {
    ((fabric.host_mbit as f64 * 2.0 / 8.39).round() as u64).max(8)
}

/// `meshrun pairwise` with default verdict options: the message size and count, the JSON file,
/// and what an operator tells it about the fabric (the rails' interfaces, the topology file).
pub fn pairwise_args(fabric: &Fabric, json: &Path, topology: Option<&Path>) -> Vec<String> {
    let mut a: Vec<String> = ["pairwise", "-s", "1M", "-n"].map(String::from).to_vec();
    a.push(iterations(fabric).to_string());
    a.push("--json".into());
    a.push(json.display().to_string());
    if let Family::Rails { .. } = fabric.family {
        a.extend(["--rails", "--tcp-if", "eth0,eth1"].map(String::from));
    }
    if let Some(t) = topology {
        a.push("--topology".into());
        a.push(t.display().to_string());
    }
    a
}

fn mbit(v: f64) -> String {
    format!("{}kbit", (v * 1000.0).round() as u64)
}

/// The fabric's normal rate for a part: its shaped rate, or none (unshaped).
fn normal_rate(fabric: &Fabric, part: &Part) -> String {
    match (fabric.shaping, part) {
        (Shaping::Unshaped, Part::Uplink) => "none".into(),
        (Shaping::Unshaped, _) => UNSHAPED_RATE.into(),
        (Shaping::Quiet, Part::Cable { .. } | Part::Uplink) => format!("{}mbit", fabric.cable_mbit),
        (Shaping::Quiet, _) => format!("{}mbit", fabric.host_mbit),
    }
}

/// The shaper's commands for the fault (after the fabric is shaped): `shape-*` for a steady one,
/// `flap-*` for an intermittent one (low first, bounded by the run's limit), with the files
/// where the flappers log their switches, relative to the bed's directory.
fn fault_commands(fabric: &Fabric) -> (Vec<Vec<String>>, Vec<String>) {
    let Some(f) = fabric.fault else {
        return (Vec::new(), Vec::new());
    };
    let low = mbit(f.low_mbit);
    let normal = normal_rate(fabric, &f.part);
    let h = |i: usize| fabric.family.host(i);
    // (the part's words after shape-/flap-, the name its phases file has)
    let parts: Vec<(Vec<String>, &str, String)> = match (f.part, fabric.family) {
        (Part::Node { host }, Family::LeafSpine { .. }) => vec![(vec![h(host)], "host", h(host))],
        (Part::Node { host }, Family::Rails { .. }) => (0..2)
            .map(|r| (vec![h(host), r.to_string()], "nic", format!("nic:{}:{r}", h(host))))
            .collect(),
        (Part::Node { host }, _) => vec![(vec![h(host)], "node", format!("node:{}", h(host)))],
        (Part::Nic { host, rail }, _) => {
            vec![(
                vec![h(host), rail.to_string()],
                "nic",
                format!("nic:{}:{rail}", h(host)),
            )]
        }
        (Part::HostLink { a, b }, _) => vec![(vec![h(a), h(b)], "link", format!("link:{}:{}", h(a), h(b)))],
        (Part::Cable { leaf, spine }, _) => vec![(
            vec![format!("leaf{leaf}"), format!("spine{spine}")],
            "cable",
            format!("leaf{leaf}-spine{spine}"),
        )],
        (Part::Uplink, _) => vec![(Vec::new(), "uplink", "uplink".to_string())],
    };
    let mut cmds = Vec::new();
    let mut logs = Vec::new();
    for (words, verb, log) in parts {
        let mut c = Vec::new();
        match f.timing {
            Timing::Steady => {
                c.push(format!("shape-{verb}"));
                c.extend(words);
                c.push(low.clone());
            }
            Timing::Intermittent { low_s, high_s } => {
                c.push(format!("flap-{verb}"));
                c.extend(words);
                c.push(low.clone());
                c.push(normal.clone());
                c.push(format!("{low_s:.2}/{high_s:.2}"));
                c.push(RUN_LIMIT.as_secs().to_string());
                logs.push(format!("flap/{log}.phases"));
            }
        }
        cmds.push(c);
    }
    (cmds, logs)
}

fn epoch(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

fn line(script: &str, args: &[String]) -> String {
    format!("{script} {}", args.join(" "))
}

/// Build `fabric`, run pairwise on it once, take it down. `out` holds the run's JSON.
pub fn run(fabric: &Fabric, out: &Path) -> Trial {
    let json = out.join(format!("seed-{}.json", fabric.seed));
    let _ = std::fs::remove_file(&json);
    let mut setup = Vec::new();
    let (run, args, phases) = match fabric.family {
        Family::LeafSpine { leaves, hosts, spines } => on_leafspine(fabric, (leaves, hosts, spines), &json, &mut setup),
        Family::Flat { hosts, leaves } => on_netns(fabric, hosts, leaves, false, &json, &mut setup),
        Family::Rails { hosts } => on_netns(fabric, hosts, 1, true, &json, &mut setup),
    };
    let window = (epoch(run.ended) - run.elapsed.as_secs_f64(), epoch(run.ended));
    let json = std::fs::read(&json).ok().and_then(|b| serde_json::from_slice(&b).ok());
    Trial {
        run,
        json,
        args,
        setup,
        phases,
        window,
    }
}

type Ran = (Run, Vec<String>, Vec<(f64, bool)>);

/// A namespace bed as the campaign drives it: its shaper script, and a pairwise run from its
/// first host.
trait Bed {
    /// The script's path as a shell line names it (`scripts/leafspine`).
    const SCRIPT: &'static str;
    fn shaper(&self, args: &[&str]) -> Run;
    fn run(&self, rank_args: &[&str]) -> Run;
    fn files(&self) -> &Path;
}

impl Bed for LeafSpine {
    const SCRIPT: &'static str = "scripts/leafspine";
    fn shaper(&self, args: &[&str]) -> Run {
        self.script(args)
    }
    fn run(&self, rank_args: &[&str]) -> Run {
        self.launch(&[], rank_args, RUN_LIMIT)
    }
    fn files(&self) -> &Path {
        &self.dir
    }
}

impl Bed for NetnsCluster {
    const SCRIPT: &'static str = "scripts/netns-cluster";
    fn shaper(&self, args: &[&str]) -> Run {
        self.script(args)
    }
    fn run(&self, rank_args: &[&str]) -> Run {
        self.launch(&[], rank_args, RUN_LIMIT)
    }
    fn files(&self) -> &Path {
        &self.dir
    }
}

/// On a bed that is up: the fabric's shaper commands `base`, then its fault's (each recorded in
/// `setup`), one pairwise run (with the bed's topology file where `topology`), and the fault's
/// phase log read from the bed's files.
fn shape_and_run<B: Bed>(
    bed: &B,
    fabric: &Fabric,
    base: &[Vec<String>],
    topology: bool,
    json: &Path,
    setup: &mut Vec<String>,
) -> Ran {
    let (faults, logs) = fault_commands(fabric);
    for c in base.iter().chain(&faults) {
        setup.push(line(B::SCRIPT, c));
        let c: Vec<&str> = c.iter().map(String::as_str).collect();
        bed.shaper(&c).expect_code(0);
    }
    let topology = topology.then(|| bed.files().join("topology"));
    let args = pairwise_args(fabric, json, topology.as_deref());
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = bed.run(&a);
    let phases = logs
        .first()
        .map(|l| read_phases(&bed.files().join(l)))
        .unwrap_or_default();
    (run, args, phases)
}

fn on_leafspine(
    fabric: &Fabric,
    (leaves, hosts, spines): (usize, usize, usize),
    json: &Path,
    setup: &mut Vec<String>,
) -> Ran {
    let hr = normal_rate(fabric, &Part::Node { host: 0 });
    let cr = normal_rate(fabric, &Part::Cable { leaf: 0, spine: 0 });
    setup.push(format!(
        "MR_LS_HOST_RATE={hr} MR_LS_CABLE_RATE={cr} scripts/leafspine up {leaves} {hosts} {spines}"
    ));
    let bed = LeafSpine::up_rated(leaves, hosts, spines, &hr, &cr);
    shape_and_run(&bed, fabric, &[], true, json, setup)
}

fn on_netns(fabric: &Fabric, hosts: usize, leaves: usize, rails: bool, json: &Path, setup: &mut Vec<String>) -> Ran {
    let slots = if rails { 2 } else { 1 };
    setup.push(format!(
        "scripts/netns-cluster up {hosts} {slots} {leaves} {}",
        if rails { 2 } else { 1 }
    ));
    let bed = if rails {
        NetnsCluster::up_with_rails(hosts, slots)
    } else {
        NetnsCluster::up_with(hosts, slots, leaves)
    };
    let mut base = vec![vec![
        "shape-fabric".to_string(),
        normal_rate(fabric, &Part::Node { host: 0 }),
    ]];
    if leaves == 2 {
        base.push(vec!["shape-uplink".to_string(), normal_rate(fabric, &Part::Uplink)]);
    }
    shape_and_run(&bed, fabric, &base, leaves == 2, json, setup)
}

/// Where the campaign keeps its runs.
pub fn out_dir() -> PathBuf {
    crate::root().join("target/bench/verdict-campaign")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_low_share_counts_only_the_run_window() {
        // Low 0-2, high 2-5, low 5-6, back at 6; the run 1-7: low 1-2 and 5-6 = 2 of 6.
        let p = [(0.0, true), (2.0, false), (5.0, true), (6.0, false)];
        assert!((low_share(&p, (1.0, 7.0)) - 2.0 / 6.0).abs() < 1e-9);
        // A flapper that never switched inside the window: all of it low.
        assert_eq!(low_share(&[(0.0, true)], (1.0, 3.0)), 1.0);
        assert_eq!(low_share(&[], (1.0, 3.0)), 0.0);
    }
}
