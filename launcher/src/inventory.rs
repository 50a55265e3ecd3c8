//! What preflight reads on this rank (`ranks::inventory`): its node's facts on the host's
//! first rank, its own limits and variables always. `meshrun preflight` gathers it, and so do
//! the tests' `# Config:` lines (`crate::rank::config_findings`).

use std::path::Path;

use analysis::preflight::Inventory;
use ranks::inventory::{self, Needs};

use crate::cli::TransportChoice;
use crate::settings::Rank;

/// This binary's version and git revision, compared between ranks.
fn version() -> String {
    format!("{} ({})", env!("CARGO_PKG_VERSION"), env!("MESHRUN_GIT_REV"))
}

/// What this rank reads: its node's facts when `node` (the host's first rank), its own always;
/// its memlock is held to `needs` when `memlock_bar` and the run may use RDMA here.
pub fn read(a: &Rank, rank: usize, host: &str, needs: &Needs, node: bool, memlock_bar: bool) -> Inventory {
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
        let (facts, local) = inventory::node(root, proc_root, inventory::probe::for_root(root), host, needs);
        inv.node = facts;
        inv.local = local;
    }
    let vars = inventory::job_variables(std::env::vars());
    let (facts, local) = inventory::process(&inv.rank_label(), &version(), needs, rdma, &vars);
    inv.process = facts;
    inv.local.extend(local);
    inv
}
