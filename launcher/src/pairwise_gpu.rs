//! `pairwise --use-cuda` on each rank: the network's pairs in GPU memory over RDMA (the
//! one-sided windows registered for GPUDirect RDMA, as perftest's `--use_cuda`), and the pairs
//! of one node GPU to GPU over IPC (nvbandwidth's way), the path chosen as the collectives
//! choose theirs (`--p2p ipc|net`, `MESHRUN_P2P`, `NCCL_P2P_DISABLE`: [`crate::p2p::choose`]).
//! Over TCP the network's pairs move host memory, as the header's P2P line says: TCP cannot
//! reach GPU memory.

use analysis::coll::p2p::P2p;
use analysis::pairwise::{PairwiseConfig, TestKind};
use collectives::pairwise::GpuPairs;

use crate::exit::{RankFailure, Status};
use crate::settings::p2p::P2pChoice;
use crate::settings::{PairwiseSettings, Rank};

/// `--p2p` checked: with `--use-cuda` only, and IPC measures copy bandwidth only.
pub fn check(s: &PairwiseSettings, test: TestKind) -> Result<(), String> {
    let flag = s.p2p.source.as_deref().filter(|w| w.starts_with("--p2p"));
    if let (None, Some(f)) = (&s.use_cuda, flag) {
        return Err(format!(
            "{f} chooses how the GPU pairs of one node are measured: add --use-cuda"
        ));
    }
    if test == TestKind::Lat && s.p2p.choice == P2pChoice::Ipc {
        return Err(format!(
            "{}: pairs over IPC measure GPU-to-GPU copy bandwidth, not latency; drop --test lat, or use --p2p net",
            s.p2p.source.as_deref().unwrap_or("--p2p ipc")
        ));
    }
    Ok(())
}

/// The GPU ids `--use-cuda SEL` names (`auto`: local rank modulo the GPUs, or under `--rails
/// auto` the GPU nearest this rank's NIC).
fn ids(world: &ranks::World, sel: &str) -> Result<Option<Vec<usize>>, String> {
    Ok(match (sel, crate::rails_auto::gpu()) {
        ("auto", Some(bus)) => {
            let ordinal =
                collectives::gpu::cuda::ordinal_of(bus, world.local_rank(), world.host()).map_err(|e| e.to_string())?;
            Some(vec![ordinal; world.local_rank() + 1])
        }
        ("auto", None) => None,
        (s, _) => Some(collectives::gpu::parse_ids(s).map_err(|e| e.replace("--gpu-ids", "--use-cuda"))?),
    })
}

/// Every rank's GPU pairs and the path within nodes, for the header's P2P line: the network's windows moved into GPU
/// memory over RDMA, then the path within nodes chosen (every rank the same), and this rank's
/// buffers for its pairs over IPC. A failure is said by the rank it happened on, and every rank
/// stops.
pub fn setup(
    world: &ranks::World,
    t: &mut dyn ranks::Transport,
    s: &PairwiseSettings,
    cfg: &PairwiseConfig,
    sel: &str,
) -> Result<(GpuPairs, P2p), RankFailure> {
    let said = |p: &str| crate::rank::say(&format!("rank {} ({}): {p}", world.rank(), world.host()));
    let windows = match t.kind().has_rdma() {
        true => windows(world, t, &s.rank, sel).err(),
        false => None,
    };
    if let Some(p) = &windows {
        said(p);
    }
    if !world.all_ok(windows.is_none(), "setting up GPU memory") {
        return Err(RankFailure::Stopped(Status::Usage));
    }
    let nodes = world.node_count();
    let (pairs, p2p) = if cfg.test == TestKind::Lat || s.p2p.choice == P2pChoice::Net {
        let why = match cfg.test {
            TestKind::Lat => Some("IPC measures bandwidth only".to_string()),
            TestKind::Bw => s.p2p.source.clone(),
        };
        (GpuPairs::net(), P2p::net(nodes, why))
    } else {
        let opened = ids(world, sel).and_then(|ids| {
            collectives::gpu::open(ids.as_deref(), world.local_rank(), world.host()).map_err(|e| e.to_string())
        });
        if let Err(p) = &opened {
            said(p);
        }
        if !world.all_ok(opened.is_ok(), "opening the GPU for pairs within nodes") {
            return Err(RankFailure::Stopped(Status::Usage));
        }
        let Ok(mut gpu) = opened else {
            return Err(RankFailure::Stopped(Status::Usage));
        };
        gpu.set_call_limit(std::time::Duration::from_secs_f64(s.rank.timeout));
        let (peers, p2p) =
            crate::p2p::choose(world, &mut *gpu, &s.p2p).map_err(|()| RankFailure::Stopped(Status::Usage))?;
        let pairs = match peers.in_job() {
            true => GpuPairs::ipc(gpu, peers, world.rank(), cfg.matrix_size()).map_err(|e| e.to_string()),
            false => Ok(GpuPairs::net()),
        };
        if let Err(p) = &pairs {
            said(p);
        }
        if !world.all_ok(pairs.is_ok(), "allocating GPU buffers for pairs within nodes") {
            return Err(RankFailure::Stopped(Status::LocalFault));
        }
        let Ok(pairs) = pairs else {
            return Err(RankFailure::Stopped(Status::LocalFault));
        };
        (pairs, p2p)
    };
    Ok((pairs, p2p))
}

/// `--use-cuda` over RDMA: move the one-sided windows into this rank's GPU, registered for
/// GPUDirect RDMA, and print (rank 0) which GPU and registration path every rank uses.
fn windows(world: &ranks::World, t: &mut dyn ranks::Transport, rank: &Rank, sel: &str) -> Result<(), String> {
    let ids = ids(world, sel)?;
    let mut window = collectives::gpu::cuda::GpuWindow::open(ids.as_deref(), world.local_rank(), world.host())
        .map_err(|e| e.to_string())?;
    window.set_call_limit(std::time::Duration::from_secs_f64(rank.timeout));
    let info = window.info().clone();
    let path = t
        .require_rdma("cannot reach GPU memory: --use-cuda needs RDMA (--transport verbs)")
        .and_then(|r| r.use_window_memory(Box::new(window)))
        .map_err(|e| e.to_string())?;
    // Under --rails auto the pairing's own warning has said it, with a closer GPU, not a NIC.
    let paired = crate::rails_auto::gpu().is_some();
    if let Some(w) = crate::rank::affinity_warning(rank, t, &info.pci_bus_id).filter(|_| !paired) {
        crate::rank::say(&format!("warning: rank {} ({}): {w}", world.rank(), world.host()));
    }
    let line = format!(
        "# GPU memory: rank {} ({}): GPU {} {} [{}], {}",
        world.rank(),
        world.host(),
        info.ordinal,
        info.name,
        info.pci_bus_id,
        path.describe()
    );
    if let Some(all) = world.gather_bytes(line.as_bytes(), "gathering GPU lines") {
        for l in all {
            println!("{}", String::from_utf8_lossy(&l));
        }
    }
    Ok(())
}
