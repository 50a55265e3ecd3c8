//! `meshrun preflight`: every rank reads its node's setup and its own limits and variables
//! (`ranks::inventory`), rank 0 gathers them over MPI and names each node or rank that differs
//! from the job's majority or from an `--expect` file (`analysis::preflight`). No mesh is built
//! and no test traffic moves: it takes as long as MPI's start and one gather. `--local` reads
//! one node without MPI, for a scheduler's health check.

use std::path::Path;

use analysis::preflight::{self, expect::Expectations, report, Inventory};
use ranks::inventory::{self, Needs};
use ranks::World;

use crate::cli::{PreflightArgs, RankArgs, TransportChoice};
use crate::exit::Status;

/// This binary's version and git revision, compared between ranks.
fn version() -> String {
    format!("{} ({})", env!("CARGO_PKG_VERSION"), env!("MESHRUN_GIT_REV"))
}

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

/// What this rank reads: its node's facts when `node` (the host's first rank), its own always;
/// its memlock is held to `needs` when `memlock_bar` and the run may use RDMA here.
pub fn read_inventory(
    a: &RankArgs,
    rank: usize,
    host: &str,
    needs: &Needs,
    node: bool,
    memlock_bar: bool,
) -> Inventory {
    let root = &a.sysfs_root;
    let proc_root = Path::new("/proc");
    let rdma = memlock_bar
        && a.transport != TransportChoice::Tcp
        && ranks::devices::discover(root).is_ok_and(|d| !d.is_empty());
    let mut inv = Inventory {
        rank,
        host: host.to_string(),
        ..Inventory::default()
    };
    if node {
        let (facts, local) = inventory::node(root, proc_root, host, needs);
        inv.node = facts;
        inv.local = local;
    }
    let vars = inventory::job_variables(std::env::vars());
    let (facts, local) = inventory::process(&inv.rank_label(), &version(), needs, rdma, &vars);
    inv.process = facts;
    inv.local.extend(local);
    inv
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
        if let Err(s) = crate::exit::write_json_doc(p, &report::json(&run), a.force, "meshrun") {
            return s;
        }
    }
    crate::exit::of_pass(run.pass())
}

/// `meshrun preflight`; the process exit status.
pub fn run(a: &PreflightArgs) -> i32 {
    if a.local {
        return run_local(a);
    }
    let timeout = std::time::Duration::from_secs_f64(a.rank.timeout);
    let world = match World::init(timeout) {
        Ok(w) => w,
        Err(e) => {
            ranks::eline!("meshrun: {e}");
            return Status::Usage.code();
        }
    };
    // The expectation file and the JSON output are rank 0's; every rank learns the outcome.
    let mut expect = None;
    let mut problem = None;
    if world.rank() == 0 {
        match expectations(a) {
            Ok(e) => expect = e,
            Err(m) => problem = Some(m),
        }
        if let (None, Some(p)) = (&problem, &a.json) {
            problem = collectives::output::check_writable(p, a.force)
                .err()
                .map(|e| e.to_string());
        }
    }
    if !world.all_ok(problem.is_none(), "checking options") {
        if let Some(m) = problem {
            ranks::eline!("meshrun: {m}");
        }
        return Status::Usage.code();
    }
    let needs = Needs {
        ranks: world.size(),
        memlock: memlock_need(world.size(), a.max_bytes),
        device: a.rank.ib_dev.clone(),
    };
    let mine = read_inventory(
        &a.rank,
        world.rank(),
        world.host(),
        &needs,
        world.local_rank() == 0,
        true,
    );
    let code = match collectives::gather_json(&world, &[mine], "gathering preflight facts") {
        Ok(Some(all)) => {
            let all: Vec<Inventory> = all.into_iter().flatten().collect();
            render(a, &all, expect.as_ref(), false).code()
        }
        Ok(None) => Status::Ok.code(),
        Err(e) => {
            ranks::eline!("meshrun: {e}");
            crate::rank::leave_now(Status::PeerOrDeadline.code());
        }
    };
    let shared = world.broadcast_vec(&[code as u8], "sharing the exit status");
    i32::from(shared.first().copied().unwrap_or(0))
}

/// `--local`: this node alone, no MPI: its own problems and the expectation file.
fn run_local(a: &PreflightArgs) -> i32 {
    let expect = match expectations(a) {
        Ok(e) => e,
        Err(m) => {
            ranks::eline!("meshrun: {m}");
            return Status::Usage.code();
        }
    };
    if let Some(p) = &a.json {
        if let Err(e) = collectives::output::check_writable(p, a.force) {
            ranks::eline!("meshrun: {e}");
            return Status::Usage.code();
        }
    }
    let host = ranks::world::this_host();
    let needs = Needs {
        ranks: 2,
        memlock: memlock_need(2, a.max_bytes),
        device: a.rank.ib_dev.clone(),
    };
    let inv = read_inventory(&a.rank, 0, &host, &needs, true, true);
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
