//! One loop for every rank command (mesh-check, pairwise, the collectives, preflight): join the
//! job (with the mesh, [`drive`], or MPI alone, [`drive_without_mesh`]), check the flags against
//! the job, run, render on rank 0, and leave with the status rank 0 decided. A command says only
//! what is its own.

use ranks::World;

use crate::exit::{RankFailure, Status};
use crate::rank::{run_rank, run_world, Mesh};
use crate::settings::Rank;

/// What a command runs over when it needs no mesh: MPI alone (preflight's one gather).
pub struct NoMesh;

/// What one rank command does between joining the job and the exit status. `S` is what it runs
/// over: the [`Mesh`] (every test) or [`NoMesh`].
pub trait RankCommand<S: ?Sized = Mesh> {
    /// What rank 0 gets back from the run, to render.
    type Outcome;

    /// The options every rank command shares (transport, timeouts, NIC choice).
    fn rank_args(&self) -> &Rank;

    /// Problems with the flags that need the job to be seen (its size, the transport chosen);
    /// every rank gets the same answer.
    fn check(&mut self, _world: &World, _t: &S) -> Result<(), String> {
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
    fn run(&mut self, world: &World, t: &mut S) -> Result<Option<Self::Outcome>, RankFailure>;

    /// On rank 0: print the report, write the files; the job's exit status.
    fn render(&self, outcome: Self::Outcome) -> Status;
}

/// Drive `cmd` on this rank over the mesh; returns the process exit status, the same on every rank.
pub fn drive<C: RankCommand>(mut cmd: C) -> i32 {
    let args = cmd.rank_args().clone();
    run_rank(&args, |world, t| steps(&mut cmd, world, t))
}

/// Drive `cmd` on this rank with MPI alone, no mesh built; returns the process exit status, the
/// same on every rank.
pub fn drive_without_mesh<C: RankCommand<NoMesh>>(mut cmd: C) -> i32 {
    let args = cmd.rank_args().clone();
    run_world(&args, |world| steps(&mut cmd, world, &mut NoMesh))
}

/// The loop itself, once the rank has joined: check, run, render on rank 0, share the status.
fn steps<S: ?Sized, C: RankCommand<S>>(cmd: &mut C, world: &World, t: &mut S) -> Result<i32, RankFailure> {
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
}
