//! `meshrun preflight`: every rank reads its node's setup and its own limits and variables
//! (`ranks::inventory`), rank 0 gathers them over MPI and names each node or rank that differs
//! from the job's majority or from an `--expect` file (`analysis::preflight`). No mesh is built
//! and no test traffic moves: it takes as long as MPI's start and one gather. `--local` reads
//! one node without MPI, for a scheduler's health check.

use analysis::preflight::{self, expect::Expectations, report, Inventory};
use ranks::inventory::Needs;
use ranks::World;

use crate::cli::PreflightArgs;
use crate::driver::{NoMesh, RankCommand};
use crate::exit::{RankFailure, Status};
use crate::settings::{PreflightSettings, Rank};

/// The expectation file, read and parsed; the error is one line naming the file.
fn expectations(a: &PreflightArgs) -> Result<Option<Expectations>, String> {
    let Some(path) = &a.expect else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(path).map_err(|e| format!("--expect {}: {e}", path.display()))?;
    Expectations::parse(&text, &path.display().to_string())
        .map(Some)
        .map_err(|e| format!("--expect {e}"))
}

/// Locked memory a verbs rank of an `n`-rank job registers: the staging slots (send and inbox,
/// per peer) and a send and a receive buffer of the largest message. (Several queue pairs per
/// peer share the same staging budget, so one lane's figure holds for any.)
fn memlock_need(n: usize, max_bytes: u64) -> u64 {
    let (slots, slot) = ranks::verbs_mesh::staging(n, 1);
    (2 * slots * slot * n.saturating_sub(1).max(1)) as u64 + 2 * max_bytes
}

/// Print the report (and the facts, the JSON) on this rank; the exit status.
fn render(a: &PreflightArgs, all: &[Inventory], expect: Option<&Expectations>, local: bool) -> Status {
    let found = preflight::judge(all, expect);
    let mut hosts: Vec<&str> = all.iter().map(|i| i.host.as_str()).collect();
    hosts.dedup();
    let path = a.expect.as_ref().map(|p| p.display().to_string());
    let scope = report::Scope {
        hosts: hosts.len(),
        ranks: all.len(),
        expect: path.as_deref().map(|p| (p, expect.and_then(|e| e.name.as_deref()))),
        local,
    };
    let run = report::PreflightRun {
        scope,
        inventory: all,
        findings: &found,
    };
    if a.show {
        print!("{}", report::facts(&run));
    }
    print!("{}", report::text(&run));
    if let Some(p) = &a.json {
        if let Err(s) = crate::report_files::write_or_status(p, &report::PreflightJson, &run, a.force, "meshrun") {
            return s;
        }
    }
    crate::exit::of_pass(run.pass())
}

/// `meshrun preflight`; the process exit status. `--local` without MPI; else through the
/// driver, with MPI alone (no mesh).
pub fn run(s: PreflightSettings) -> i32 {
    if s.args.local {
        return run_local(&s);
    }
    crate::driver::drive_without_mesh(Preflight { s, expect: None })
}

/// `meshrun preflight` over MPI: the flags, and the expectation file rank 0 read.
struct Preflight {
    s: PreflightSettings,
    expect: Option<Expectations>,
}

impl RankCommand<NoMesh> for Preflight {
    type Outcome = Vec<Inventory>;

    fn rank_args(&self) -> &Rank {
        &self.s.rank
    }

    /// The expectation file and the JSON output are rank 0's; every rank learns the outcome.
    fn check_root(&mut self, _world: &World) -> Result<(), String> {
        let a = &self.s.args;
        self.expect = expectations(a)?;
        crate::report_files::check_all_writable(a.json.as_deref(), a.force)
    }

    fn run(&mut self, world: &World, _: &mut NoMesh) -> Result<Option<Vec<Inventory>>, RankFailure> {
        let needs = Needs {
            ranks: world.size(),
            memlock: memlock_need(world.size(), self.s.args.max_bytes),
            device: self.s.rank.ib_dev.clone(),
        };
        let mine = crate::inventory::read(
            &self.s.rank,
            world.rank(),
            world.host(),
            &needs,
            world.local_rank() == 0,
            true,
        );
        match collectives::gather_json(world, &[mine], "gathering preflight facts") {
            Ok(all) => Ok(all.map(|all| all.into_iter().flatten().collect())),
            Err(e) => {
                ranks::eline!("meshrun: {e}");
                crate::rank::leave_now(Status::PeerOrDeadline.code());
            }
        }
    }

    fn render(&self, all: Vec<Inventory>) -> Status {
        render(&self.s.args, &all, self.expect.as_ref(), false)
    }
}

/// `--local`: this node alone, no MPI: its own problems and the expectation file.
fn run_local(s: &PreflightSettings) -> i32 {
    let a = &s.args;
    let expect = match expectations(a) {
        Ok(e) => e,
        Err(m) => {
            ranks::eline!("meshrun: {m}");
            return Status::Usage.code();
        }
    };
    if let Err(e) = crate::report_files::check_all_writable(a.json.as_deref(), a.force) {
        ranks::eline!("meshrun: {e}");
        return Status::Usage.code();
    }
    let host = ranks::world::this_host();
    let needs = Needs {
        ranks: 2,
        memlock: memlock_need(2, a.max_bytes),
        device: s.rank.ib_dev.clone(),
    };
    let inv = crate::inventory::read(&s.rank, 0, &host, &needs, true, true);
    render(a, &[inv], expect.as_ref(), true).code()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memlock_need_is_staging_and_two_buffers() {
        // Two ranks: 16 slots of 256 KiB each way to one peer (8 MiB), and two 64 MiB buffers.
        assert_eq!(memlock_need(2, 64 << 20), (8 << 20) + (128 << 20));
    }
}
