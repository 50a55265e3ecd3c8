//! `--baseline mpi`: the MPI library's own collectives (MPI_Allreduce, ...) on the same buffers,
//! timed by the same harness. MPI has no half or bfloat16 type and no `avg` (done as sum then /n).

use mpi::collective::SystemOperation;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;

use super::Ctx;
use crate::dtype::RedOp;
use crate::reduce;

/// The Rust type of `$dt` as `$T` in `$body`; MPI has no 16-bit float type.
macro_rules! mpi_typed {
    ($dt:expr, $T:ident => $body:expr) => {
        $crate::with_type!($dt, $T => $body, halves => return Err(format!("MPI has no {} type", $dt.name())))
    };
}

fn op(op: RedOp) -> SystemOperation {
    match op {
        RedOp::Sum | RedOp::Avg => SystemOperation::sum(),
        RedOp::Prod => SystemOperation::product(),
        RedOp::Min => SystemOperation::min(),
        RedOp::Max => SystemOperation::max(),
    }
}

fn cast<T: bytemuck::Pod>(b: &[u8]) -> Result<&[T], String> {
    bytemuck::try_cast_slice(b).map_err(|e| format!("buffer layout: {e}"))
}

fn cast_mut<T: bytemuck::Pod>(b: &mut [u8]) -> Result<&mut [T], String> {
    bytemuck::try_cast_slice_mut(b).map_err(|e| format!("buffer layout: {e}"))
}

fn finalize(ctx: &Ctx, recv: &mut [u8]) -> Result<(), String> {
    reduce::finalize(ctx.dtype, ctx.op, recv, ctx.nranks).map_err(|e| e.to_string())
}

pub fn all_reduce(comm: &SimpleCommunicator, ctx: &Ctx, send: &[u8], recv: &mut [u8]) -> Result<(), String> {
    mpi_typed!(ctx.dtype, T => comm.all_reduce_into(cast::<T>(send)?, cast_mut::<T>(recv)?, op(ctx.op)));
    finalize(ctx, recv)
}

pub fn all_gather(comm: &SimpleCommunicator, ctx: &Ctx, send: &[u8], recv: &mut [u8]) -> Result<(), String> {
    mpi_typed!(ctx.dtype, T => comm.all_gather_into(cast::<T>(send)?, cast_mut::<T>(recv)?));
    Ok(())
}

pub fn reduce_scatter(comm: &SimpleCommunicator, ctx: &Ctx, send: &[u8], recv: &mut [u8]) -> Result<(), String> {
    mpi_typed!(ctx.dtype, T => comm.reduce_scatter_block_into(cast::<T>(send)?, cast_mut::<T>(recv)?, op(ctx.op)));
    finalize(ctx, recv)
}

pub fn broadcast(comm: &SimpleCommunicator, ctx: &Ctx, send: &[u8], recv: &mut [u8]) -> Result<(), String> {
    if ctx.rank == ctx.root {
        recv.copy_from_slice(send);
    }
    mpi_typed!(ctx.dtype, T => comm.process_at_rank(ctx.root as i32).broadcast_into(cast_mut::<T>(recv)?));
    Ok(())
}

pub fn reduce(comm: &SimpleCommunicator, ctx: &Ctx, send: &[u8], recv: &mut [u8]) -> Result<(), String> {
    let root = comm.process_at_rank(ctx.root as i32);
    if ctx.rank == ctx.root {
        mpi_typed!(ctx.dtype, T => root.reduce_into_root(cast::<T>(send)?, cast_mut::<T>(recv)?, op(ctx.op)));
        finalize(ctx, recv)
    } else {
        mpi_typed!(ctx.dtype, T => root.reduce_into(cast::<T>(send)?, op(ctx.op)));
        Ok(())
    }
}

pub fn alltoall(comm: &SimpleCommunicator, ctx: &Ctx, send: &[u8], recv: &mut [u8]) -> Result<(), String> {
    mpi_typed!(ctx.dtype, T => comm.all_to_all_into(cast::<T>(send)?, cast_mut::<T>(recv)?));
    Ok(())
}

pub fn sendrecv(comm: &SimpleCommunicator, ctx: &Ctx, send: &[u8], recv: &mut [u8]) -> Result<(), String> {
    let n = ctx.nranks as i32;
    let (right, left) = ((ctx.rank as i32 + 1) % n, (ctx.rank as i32 + n - 1) % n);
    mpi_typed!(ctx.dtype, T => mpi::point_to_point::send_receive_into(
        cast::<T>(send)?,
        &comm.process_at_rank(right),
        cast_mut::<T>(recv)?,
        &comm.process_at_rank(left)
    ));
    Ok(())
}
