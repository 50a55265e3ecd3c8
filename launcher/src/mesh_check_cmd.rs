//! `meshrun mesh-check` on each rank: can every rank reach every other?

use std::time::Duration;

use analysis::mesh_check::{MeshCheckConfig, MeshCheckRun, PeerCheck};
use collectives::mesh_check;
use ranks::{Transport, World};

use crate::cli::MeshCheckArgs;
use crate::driver::RankCommand;
use crate::exit::{RankFailure, Status};
use crate::rank::Mesh;
use crate::settings::{self, Rank};

/// The largest payload one pair swaps.
const MAX_BYTES: u64 = 1 << 30;

/// The checks of mesh-check's flags alone (the launcher makes them too, before any rank starts).
pub fn check_args(a: &MeshCheckArgs) -> Result<(), String> {
    if a.bytes > MAX_BYTES {
        return Err(format!("--bytes {} is over the 1 GiB limit of mesh-check", a.bytes));
    }
    Ok(())
}

/// `meshrun mesh-check`: the flags, and the configuration made of them.
pub struct MeshCheck {
    args: MeshCheckArgs,
    rank: Rank,
    cfg: MeshCheckConfig,
}

/// What rank 0 renders: every pair's check, with the job's hosts and transport.
pub struct Checked {
    hosts: Vec<String>,
    transport: &'static str,
    all: Vec<Vec<PeerCheck>>,
}

impl MeshCheck {
    pub fn new(s: settings::MeshCheckSettings) -> MeshCheck {
        let cfg = MeshCheckConfig {
            bytes: s.args.bytes as usize,
            iters: s.args.iters as usize,
            op_timeout: Duration::from_secs_f64(s.rank.timeout),
        };
        MeshCheck {
            args: s.args,
            rank: s.rank,
            cfg,
        }
    }
}

impl RankCommand for MeshCheck {
    type Outcome = Checked;

    fn rank_args(&self) -> &Rank {
        &self.rank
    }

    fn json_out(&self) -> Option<(&std::path::Path, bool)> {
        self.args.json.as_deref().map(|p| (p, self.args.force))
    }

    fn check(&mut self, world: &World, _t: &dyn Transport) -> Result<(), String> {
        check_args(&self.args)?;
        if world.size() < 2 {
            // As pairwise: a check of no pair would pass on nothing.
            return Err(format!(
                "mesh-check needs at least 2 ranks to have a pair to check; this job has {}",
                world.size()
            ));
        }
        Ok(())
    }

    /// The --json file.
    fn check_root(&mut self, _world: &World) -> Result<(), String> {
        crate::report_files::check_all_writable(self.args.json.as_deref(), self.args.force)
    }

    fn run(&mut self, world: &World, t: &mut Mesh) -> Result<Option<Checked>, RankFailure> {
        let mine = mesh_check::run(t, &self.cfg)?;
        Ok(mesh_check::gather(world, &mine)?.map(|all| Checked {
            hosts: world.hosts().to_vec(),
            transport: t.kind().as_str(),
            all,
        }))
    }

    fn render(&self, c: Checked) -> Status {
        let run = MeshCheckRun {
            hosts: &c.hosts,
            transport: c.transport,
            cfg: &self.cfg,
            all: &c.all,
        };
        print!("{}", analysis::mesh_check::text(&run));
        if let Some(p) = &self.args.json {
            let json = &analysis::mesh_check::MeshCheckJson;
            if let Err(s) = crate::report_files::write_or_status(p, json, &run, self.args.force, "meshrun") {
                return s;
            }
        }
        crate::exit::of_pass(run.pass())
    }
}
