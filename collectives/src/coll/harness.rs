//! The one harness every collective runs under: sizes, warm-up, timing, time reduction across
//! ranks, verification, both placements, bandwidth figures.

use std::time::Instant;

use analysis::coll::per_iter::PerIter;
use analysis::coll::{algbw, CollConfig, Placement, Row, TimeAverage};
use ranks::{Transport, World};

use super::device::{DevBufs, DevicePaths, DeviceRun, HostStaging};
use super::{Bufs, CollError, Collective, Counts, Ctx};
use crate::buffers::HostBuffer;
use crate::dtype::{DataType, RedOp};
use crate::gpu::{At, DataPath, Gpu};
use crate::reduce;

fn combine(times: &[f64], how: TimeAverage) -> f64 {
    match how {
        TimeAverage::Rank0 => times.first().copied().unwrap_or(0.0),
        TimeAverage::Mean => times.iter().sum::<f64>() / times.len().max(1) as f64,
        TimeAverage::Min => times.iter().copied().fold(f64::INFINITY, f64::min),
        TimeAverage::Max => times.iter().copied().fold(0.0, f64::max),
    }
}

/// The seconds per operation, combined across ranks.
fn reduce_time(world: &World, secs: f64, how: TimeAverage) -> f64 {
    let all = world.all_gather_bytes(&secs.to_le_bytes(), "combining times");
    let times: Vec<f64> = all
        .chunks(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
        .collect();
    combine(&times, how)
}

/// Every rank's per-iteration times, rank by rank (all ranks time the same number).
fn gather_times(world: &World, mine: &[f64]) -> Vec<Vec<f64>> {
    let bytes: Vec<u8> = mine.iter().flat_map(|t| t.to_le_bytes()).collect();
    let all = world.all_gather_bytes(&bytes, "gathering per-iteration times");
    let per_rank = mine.len() * 8;
    if per_rank == 0 {
        return Vec::new();
    }
    all.chunks(per_rank)
        .map(|r| {
            r.chunks(8)
                .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                .collect()
        })
        .collect()
}

fn sum_over_ranks(world: &World, v: u64) -> u64 {
    world
        .all_gather_bytes(&v.to_le_bytes(), "counting wrong elements")
        .chunks(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
        .sum()
}

/// Which implementation runs: meshrun's over the transport, or the MPI library's.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Impl {
    Mesh,
    Mpi,
}

struct HarnessRun<'a> {
    world: &'a World,
    coll: &'a dyn Collective,
    cfg: &'a CollConfig,
    /// Whether the test-only faults apply: to meshrun's runs, never to the MPI library's.
    injects: bool,
}

impl HarnessRun<'_> {
    fn once(
        &self,
        t: &mut dyn Transport,
        ctx: &Ctx,
        how: Impl,
        in_place: bool,
        send: &mut HostBuffer,
        recv: &mut HostBuffer,
    ) -> Result<(), CollError> {
        match (how, in_place) {
            (Impl::Mesh, false) => self.coll.run(
                t,
                ctx,
                Bufs::OutOfPlace {
                    send: send.as_slice(),
                    recv: recv.as_mut_slice(),
                },
            ),
            (Impl::Mesh, true) => self.coll.run(
                t,
                ctx,
                Bufs::InPlace {
                    buf: recv.as_mut_slice(),
                },
            ),
            (Impl::Mpi, _) => self
                .coll
                .run_mpi(self.world.comm(), ctx, send.as_slice(), recv.as_mut_slice())
                .map_err(|e| CollError::Transport(ranks::TransportError::Setup(e))),
        }
    }

    /// Buffers for one placement: out of place, `send` and `recv`; in place, `recv` is the one
    /// buffer with the send data at its offset (and `send` is empty).
    fn buffers(&self, ctx: &Ctx, in_place: bool) -> Result<(HostBuffer, HostBuffer), CollError> {
        let (c, elt) = (ctx.counts, ctx.elt());
        if in_place {
            let mut buf = HostBuffer::new(c.send.max(c.recv) * elt);
            let off = c.send_inplace_offset * elt;
            self.coll
                .init_send(ctx, &mut buf.as_mut_slice()[off..off + c.send * elt])?;
            Ok((HostBuffer::new(0), buf))
        } else {
            let mut send = HostBuffer::new(c.send * elt);
            self.coll.init_send(ctx, send.as_mut_slice())?;
            Ok((send, HostBuffer::new(c.recv * elt)))
        }
    }

    /// Warm-up and timed runs of `once`: the seconds per operation, combined across ranks, and
    /// with `-I` every iteration's time (an iteration is `-m` operations).
    fn timed(&self, mut once: impl FnMut() -> Result<(), CollError>) -> Result<(f64, Option<PerIter>), CollError> {
        self.world.barrier("before warm-up");
        for _ in 0..self.cfg.warmup {
            once()?;
        }
        self.world.barrier("before timing");
        let agg = self.cfg.agg.max(1);
        let mut iters_us: Vec<f64> = Vec::with_capacity(if self.cfg.per_iter { self.cfg.iters as usize } else { 0 });
        let t0 = Instant::now();
        for _ in 0..self.cfg.iters {
            let ti = self.cfg.per_iter.then(Instant::now);
            for _ in 0..agg {
                once()?;
            }
            if let Some(ti) = ti {
                iters_us.push(ti.elapsed().as_secs_f64() * 1e6 / agg as f64);
            }
        }
        let n_ops = self.cfg.iters * agg;
        let secs = reduce_time(
            self.world,
            t0.elapsed().as_secs_f64() / n_ops.max(1) as f64,
            self.cfg.average,
        );
        let per_iter = if self.cfg.per_iter {
            PerIter::from_ranks(gather_times(self.world, &iters_us), self.cfg.per_iter_skip)
        } else {
            None
        };
        Ok((secs, per_iter))
    }

    /// One placement's figures from its time per operation and wrong-element count.
    fn figures(&self, ctx: &Ctx, secs: f64, per_iter: Option<PerIter>, wrong: Option<u64>) -> Placement {
        let bytes = (ctx.counts.send.max(ctx.counts.recv) * ctx.elt()) as u64;
        let alg = algbw(bytes, secs);
        Placement {
            time_us: secs * 1e6,
            algbw: alg,
            busbw: alg * self.coll.bus_factor(ctx.nranks),
            wrong,
            per_iter,
        }
    }

    fn placement(&self, t: &mut dyn Transport, ctx: &Ctx, how: Impl, in_place: bool) -> Result<Placement, CollError> {
        let (mut send, mut recv) = self.buffers(ctx, in_place)?;
        let (secs, per_iter) = self.timed(|| self.once(t, ctx, how, in_place, &mut send, &mut recv))?;
        let wrong = if self.cfg.check {
            Some(self.verify(t, ctx, how, in_place)?)
        } else {
            None
        };
        Ok(self.figures(ctx, secs, per_iter, wrong))
    }

    /// Fresh data, one run, compare with the expected result bit for bit; wrong elements summed
    /// over ranks.
    fn verify(&self, t: &mut dyn Transport, ctx: &Ctx, how: Impl, in_place: bool) -> Result<u64, CollError> {
        let (mut send, mut recv) = self.verify_buffers(ctx, in_place)?;
        self.world.barrier("before validation");
        self.once(t, ctx, how, in_place, &mut send, &mut recv)?;
        self.check(ctx, in_place, recv.as_slice())
    }

    /// Fresh buffers for a validation run, with the test-only fault applied.
    fn verify_buffers(&self, ctx: &Ctx, in_place: bool) -> Result<(HostBuffer, HostBuffer), CollError> {
        let (mut send, mut recv) = self.buffers(ctx, in_place)?;
        if self.injects && crate::fault::corrupts(ctx.rank, 0) {
            let b = if in_place {
                &mut recv.as_mut_slice()[ctx.counts.send_inplace_offset * ctx.elt()..]
            } else {
                send.as_mut_slice()
            };
            if let Some(x) = b.first_mut() {
                *x ^= 0x5A;
            }
        }
        Ok((send, recv))
    }

    /// Compare this rank's result (the receive buffer after a run) with the expected one; wrong
    /// elements summed over ranks.
    fn check(&self, ctx: &Ctx, in_place: bool, recv: &[u8]) -> Result<u64, CollError> {
        let (c, elt) = (ctx.counts, ctx.elt());
        let mut want = vec![0u8; c.recv * elt];
        let wrong = if self.coll.expected(ctx, &mut want)? {
            let off = if in_place { c.recv_inplace_offset * elt } else { 0 };
            reduce::count_wrong(ctx.dtype, &recv[off..off + c.recv * elt], &want)
        } else {
            0
        };
        Ok(sum_over_ranks(self.world, wrong))
    }

    /// One placement on GPU buffers (`-g --gpu-staging`): the same data, timing and validation as
    /// the host path, with the buffers in device memory and [`Collective::run_gpu`] running.
    fn placement_gpu(
        &self,
        t: &mut dyn Transport,
        ctx: &Ctx,
        in_place: bool,
        gpu: &mut dyn Gpu,
        paths: &DevicePaths,
        staging: Option<&mut HostStaging>,
    ) -> Result<Placement, CollError> {
        let (c, elt) = (ctx.counts, ctx.elt());
        let (send_h, recv_h) = self.buffers(ctx, in_place)?;
        let dev = if in_place {
            DevBufs::InPlace {
                buf: gpu.alloc(recv_h.len())?,
            }
        } else {
            DevBufs::OutOfPlace {
                send: gpu.alloc(send_h.len())?,
                recv: gpu.alloc(recv_h.len())?,
            }
        };
        let result = match DeviceRun::new(&mut *gpu, t, paths.net, c.send.max(c.recv) * elt, dev, staging) {
            Ok(mut dr) => {
                dr.use_ipc(paths.ipc.clone());
                let r = self.placement_gpu_on(t, ctx, in_place, &mut dr, dev, &send_h, &recv_h);
                if paths.ipc.in_job() && r.is_ok() {
                    // Every rank closes the peers' buffers it opened before any frees its own.
                    dr.close_peers();
                    self.world
                        .barrier("closing the device buffers of this node's other ranks");
                }
                dr.release(t);
                r
            }
            Err(e) => Err(e),
        };
        match dev {
            DevBufs::InPlace { buf } => gpu.free(buf),
            DevBufs::OutOfPlace { send, recv } => {
                gpu.free(send);
                gpu.free(recv);
            }
        }
        result
    }

    #[allow(clippy::too_many_arguments)]
    fn placement_gpu_on(
        &self,
        t: &mut dyn Transport,
        ctx: &Ctx,
        in_place: bool,
        dr: &mut DeviceRun,
        dev: DevBufs,
        send_h: &HostBuffer,
        recv_h: &HostBuffer,
    ) -> Result<Placement, CollError> {
        load(dr, dev, send_h, recv_h)?;
        if self.injects && crate::fault::fails_gpu(ctx.rank, 0) {
            let info = dr.gpu.info();
            return Err(CollError::Gpu(crate::gpu::GpuError::Call {
                ordinal: info.ordinal,
                name: info.name.clone(),
                call: "cuLaunchKernel",
                error: "CUDA_ERROR_ILLEGAL_ADDRESS (injected by MESHRUN_FAULT, tests only)".into(),
                hint: String::new(),
            }));
        }
        let (secs, per_iter) = self.timed(|| self.coll.run_gpu(t, ctx, dr, dev))?;
        let wrong = if self.cfg.check {
            let (send_v, mut recv_v) = self.verify_buffers(ctx, in_place)?;
            load(dr, dev, &send_v, &recv_v)?;
            self.world.barrier("before validation");
            self.coll.run_gpu(t, ctx, dr, dev)?;
            let result = match dev {
                DevBufs::InPlace { buf } => buf,
                DevBufs::OutOfPlace { recv, .. } => recv,
            };
            dr.gpu.download(At::new(result, 0), recv_v.as_mut_slice())?;
            Some(self.check(ctx, in_place, recv_v.as_slice())?)
        } else {
            None
        };
        Ok(self.figures(ctx, secs, per_iter, wrong))
    }
}

/// Put host-initialised buffers into device memory.
fn load(dr: &mut DeviceRun, dev: DevBufs, send: &HostBuffer, recv: &HostBuffer) -> Result<(), CollError> {
    match dev {
        DevBufs::InPlace { buf } => dr.gpu.upload(At::new(buf, 0), recv.as_slice())?,
        DevBufs::OutOfPlace { send: s, recv: r } => {
            dr.gpu.upload(At::new(s, 0), send.as_slice())?;
            dr.gpu.upload(At::new(r, 0), recv.as_slice())?;
        }
    }
    Ok(())
}

/// What one sweep produced.
#[derive(Debug, Clone, Default)]
pub struct Sweep {
    /// meshrun's rows.
    pub rows: Vec<Row>,
    /// With `--baseline mpi`: the MPI library's rows, and notes on cases it cannot run.
    pub baseline: Option<(Vec<Row>, Vec<String>)>,
}

/// Run every size, type and operation of `cfg`; `row` gets each of meshrun's rows as it completes
/// (on rank 0). With a baseline, each case runs through the MPI library right after meshrun's run
/// of it (out of place only), so both see the machine in the same state: on a shared machine
/// whose speed drifts, two sweeps run one after the other compare different moments.
pub fn run(
    world: &World,
    t: &mut dyn Transport,
    coll: &dyn Collective,
    cfg: &CollConfig,
    mut gpu: Option<(&mut dyn Gpu, &DevicePaths)>,
    mut row: impl FnMut(&Row),
) -> Result<Sweep, CollError> {
    let run = HarnessRun {
        world,
        coll,
        cfg,
        injects: true,
    };
    let baseline_run = HarnessRun {
        world,
        coll,
        cfg,
        injects: false,
    };
    let mut sweep = Sweep {
        baseline: cfg.baseline.map(|_| (Vec::new(), Vec::new())),
        ..Sweep::default()
    };
    let cases = cases(world, t, coll, cfg);
    // Staged GPU runs: pinned host staging once, at the largest size of any case.
    let mut staging = match gpu.as_mut() {
        Some((g, p)) if p.net == DataPath::Staged => {
            let largest = cases
                .iter()
                .map(|(_, _, _, ctx)| ctx.counts.send.max(ctx.counts.recv) * ctx.elt())
                .max()
                .unwrap_or(0);
            Some(HostStaging::new(&mut **g, largest)?)
        }
        _ => None,
    };
    for (dtype, op, size, ctx) in cases {
        ranks::postmortem::enter(&format!("{} {size} B", coll.description().name));
        let (out, inp) = match gpu.as_mut() {
            Some((g, path)) => (
                run.placement_gpu(t, &ctx, false, &mut **g, path, staging.as_mut())?,
                run.placement_gpu(t, &ctx, true, &mut **g, path, staging.as_mut())?,
            ),
            None => (
                run.placement(t, &ctx, Impl::Mesh, false)?,
                run.placement(t, &ctx, Impl::Mesh, true)?,
            ),
        };
        let r = make_row(coll, cfg, dtype, op, size, &ctx, out, Some(inp));
        row(&r);
        sweep.rows.push(r);
        if let Some((rows, notes)) = sweep.baseline.as_mut() {
            if matches!(dtype, DataType::Half | DataType::Bfloat16) {
                let note = format!("MPI has no {} type: no baseline for it", dtype.name());
                if !notes.contains(&note) {
                    notes.push(note);
                }
                continue;
            }
            ranks::postmortem::enter(&format!("baseline {} {size} B", coll.description().name));
            let out = baseline_run.placement(t, &ctx, Impl::Mpi, false)?;
            rows.push(make_row(coll, cfg, dtype, op, size, &ctx, out, None));
        }
    }
    Ok(sweep)
}

#[allow(clippy::too_many_arguments)]
fn make_row(
    coll: &dyn Collective,
    cfg: &CollConfig,
    dtype: DataType,
    op: RedOp,
    _size: u64,
    ctx: &Ctx,
    out: Placement,
    inp: Option<Placement>,
) -> Row {
    Row {
        size: (ctx.counts.send.max(ctx.counts.recv) * dtype.size()) as u64,
        count: ctx.counts.param as u64,
        dtype,
        redop: if coll.reduces() {
            op.name().to_string()
        } else {
            "none".to_string()
        },
        root: if coll.rooted() { cfg.root as i64 } else { -1 },
        out_of_place: out,
        in_place: inp,
    }
}

/// Every (type, op, size) to run, with its context; sizes that leave no element are skipped.
fn cases(
    world: &World,
    t: &dyn Transport,
    coll: &dyn Collective,
    cfg: &CollConfig,
) -> Vec<(DataType, RedOp, u64, Ctx)> {
    let ops: Vec<RedOp> = if coll.reduces() {
        cfg.ops.clone()
    } else {
        vec![cfg.ops.first().copied().unwrap_or(RedOp::Sum)]
    };
    let mut v = Vec::new();
    for &dtype in &cfg.dtypes {
        for &op in &ops {
            for size in cfg.sizes() {
                let count = (size / dtype.size() as u64) as usize;
                let counts: Counts = coll.counts(count, world.size(), world.rank());
                if counts.param == 0 {
                    continue;
                }
                let ctx = Ctx {
                    dtype,
                    op,
                    root: cfg.root,
                    rank: t.rank(),
                    nranks: t.size(),
                    counts,
                    step_timeout: cfg.step_timeout,
                };
                v.push((dtype, op, size, ctx));
            }
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coll::{by_name, ALL};

    /// algbw and busbw by hand for every collective at 8 ranks: 1 GB in 0.5 s is 2 GB/s.
    #[test]
    fn bandwidth_factors_by_hand() {
        assert_eq!(algbw(1_000_000_000, 0.5), 2.0);
        let want = [
            ("all_reduce", 2.0 * 7.0 / 8.0),
            ("all_gather", 7.0 / 8.0),
            ("reduce_scatter", 7.0 / 8.0),
            ("broadcast", 1.0),
            ("reduce", 1.0),
            ("alltoall", 7.0 / 8.0),
            ("sendrecv", 1.0),
        ];
        for (name, f) in want {
            assert_eq!(by_name(name).unwrap().bus_factor(8), f, "{name}");
            assert_eq!(by_name(&format!("{name}_perf")).unwrap().name(), name);
        }
        assert_eq!(ALL.len(), want.len());
        // Reference row (nccl-tests, 8 ranks): 1048576 B in 230.7 us -> algbw 4.545, busbw 7.954.
        let a = algbw(1_048_576, 230.7e-6);
        assert!((a - 4.545).abs() < 0.001, "{a}");
        assert!((a * 1.75 - 7.954).abs() < 0.001);
    }

    /// The registry's names are the collectives' own, once each, and `ALL` and `by_name` read them.
    #[test]
    fn the_registry_names_each_collective_once() {
        for (i, (name, c)) in crate::coll::REGISTRY.iter().enumerate() {
            assert_eq!(c.name(), *name);
            assert_eq!(ALL[i], *name);
            assert_eq!(by_name(name).unwrap().name(), *name);
            assert_eq!(ALL.iter().filter(|n| *n == name).count(), 1, "{name}");
        }
        assert!(by_name("nonesuch").is_none());
    }

    #[test]
    fn counts_follow_nccl_tests() {
        let ag = by_name("all_gather").unwrap().counts(1000, 8, 3);
        assert_eq!(
            (ag.send, ag.recv, ag.param, ag.send_inplace_offset),
            (125, 1000, 125, 375)
        );
        let rs = by_name("reduce_scatter").unwrap().counts(1003, 8, 2);
        assert_eq!(
            (rs.send, rs.recv, rs.param, rs.recv_inplace_offset),
            (1000, 125, 125, 250)
        );
        let a2a = by_name("alltoall").unwrap().counts(1003, 8, 0);
        assert_eq!((a2a.send, a2a.recv, a2a.param), (1000, 1000, 125));
    }

    #[test]
    fn time_reduction_modes() {
        let t = [3.0, 1.0, 2.0];
        assert_eq!(combine(&t, TimeAverage::Rank0), 3.0);
        assert_eq!(combine(&t, TimeAverage::Mean), 2.0);
        assert_eq!(combine(&t, TimeAverage::Min), 1.0);
        assert_eq!(combine(&t, TimeAverage::Max), 3.0);
    }
}
