//! One loop for every rank command (mesh-check, pairwise, the collectives): join the job and
//! build the mesh ([`run_rank`]), check the flags against the job, run, render on rank 0, and
//! leave with the status rank 0 decided. A command says only what is its own.

use ranks::{Transport, World};

use crate::cli::RankArgs;
use crate::exit::{RankFailure, Status};
use crate::rank::run_rank;

/// What one rank command does between the mesh coming up and the exit status.
pub trait RankCommand {
    /// What rank 0 gets back from the run, to render.
    type Outcome;

    /// The options every rank command shares (transport, timeouts, NIC choice).
    fn rank_args(&self) -> &RankArgs;

    /// Problems with the flags that need the job to be seen (its size, the transport chosen);
    /// every rank gets the same answer.
    fn check(&mut self, _world: &World, _t: &dyn Transport) -> Result<(), String> {
        Ok(())
    }

    /// Problems only rank 0 can see (output files to write, input files to read), after
    /// [`RankCommand::check`] passed there.
    fn check_root(&mut self, _world: &World) -> Result<(), String> {
        Ok(())
    }

    /// The JSON report's path and `--force`, if one was asked for: where a stall's root cause
    /// goes when a deadline ends the job before the report.
    fn json_out(&self) -> Option<(&std::path::Path, bool)> {
        None
    }

    /// The test itself, on every rank; rank 0 gets the outcome to render (the others None).
    /// [`RankFailure::Stopped`] ends the job with a status every rank agreed on.
    fn run(&mut self, world: &World, t: &mut dyn Transport) -> Result<Option<Self::Outcome>, RankFailure>;

    /// On rank 0: print the report, write the files; the job's exit status.
    fn render(&self, outcome: Self::Outcome) -> Status;
}

/// Drive `cmd` on this rank; returns the process exit status, the same on every rank.
pub fn drive<C: RankCommand>(mut cmd: C) -> i32 {
    let args = cmd.rank_args().clone();
    run_rank(&args, |world, t| {
        let mut problem = cmd.check(world, t).err();
        if problem.is_none() && world.rank() == 0 {
            problem = cmd.check_root(world).err();
        }
        if !world.all_ok(problem.is_none(), "checking options") {
            return Err(RankFailure::Usage(problem.unwrap_or_default()));
        }
        if let Some((path, force)) = cmd.json_out() {
            crate::stall_json::keep_in(path, force);
        }
        let code = match cmd.run(world, t)? {
            Some(outcome) => cmd.render(outcome).code(),
            None => Status::Ok.code(),
        };
        // Rank 0 decides the exit status and shares it, so every rank leaves with the same one.
        let shared = world.broadcast_vec(&[code as u8], "sharing the exit status");
        Ok(i32::from(shared.first().copied().unwrap_or(0)))
    })
}
