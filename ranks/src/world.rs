//! Joining the MPI job: rank, size, where every rank runs, and the checks that catch a job that
//! started but not as intended (wrong MPI, all ranks on one node).

use std::time::Duration;

use mpi::datatype::PartitionMut;
use mpi::environment::Universe;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use mpi::Count;

use crate::watchdog;
use hostfiles::placement;

/// Host names are exchanged in fixed-size records of this many bytes.
const HOST_LEN: usize = 256;
/// A kernel boot id (`/proc/sys/kernel/random/boot_id`, a UUID: 36 bytes).
const BOOT_ID_LEN: usize = 36;

/// The environment variable the launcher sets to the number of distinct hosts it placed ranks on.
pub const EXPECT_NODES_ENV: &str = "MESHRUN_EXPECT_NODES";

/// A job that started, but not as intended.
#[derive(Debug, thiserror::Error)]
pub enum WorldError {
    #[error("MPI could not be initialised (it was already initialised, or the MPI library failed)")]
    Init,
    #[error(
        "MPI reports a world of 1 rank, but the launcher's environment says {var}={expected}: this binary \
         was built against a different MPI ({library}) than the mpirun that started it. Rebuild meshrun \
         against the MPI of that mpirun, or start it with the matching mpirun"
    )]
    SizeMismatch {
        var: String,
        expected: usize,
        library: String,
    },
    #[error(
        "all {size} ranks run on {nodes} node(s) ({hosts}), but {source_desc} names {expected} hosts: the MPI \
         launcher ignored the host list (Open MPI 5 can do this with an MPIJob hostfile). Pass the hosts \
         explicitly (`meshrun launch --hostfile FILE`, or mpirun --hostfile FILE / --host)"
    )]
    CollapsedPlacement {
        size: usize,
        nodes: usize,
        hosts: String,
        expected: usize,
        source_desc: String,
    },
}

/// This rank's view of the job.
pub struct World {
    // Field order matters: the communicator must go before the universe finalises MPI.
    comm: SimpleCommunicator,
    _universe: Universe,
    rank: usize,
    size: usize,
    my_host: String,
    hosts: Vec<String>,
    /// Every rank's kernel boot id (empty where it could not be read).
    boot_ids: Vec<String>,
    node_of: Vec<usize>,
    node_count: usize,
    local_rank: usize,
    local_size: usize,
    mpi_timeout: Duration,
}

/// How long a rank waiting in [`World::barrier_idle`] sleeps between checks.
pub const IDLE_POLL: Duration = Duration::from_millis(1);

/// Groups of distinct host names that share one kernel boot id, in rank order; a rank whose boot
/// id is unknown joins none.
pub fn one_machine(hosts: &[String], boot_ids: &[String]) -> Vec<Vec<String>> {
    let mut groups: Vec<(&str, Vec<String>)> = Vec::new();
    for (h, b) in hosts.iter().zip(boot_ids) {
        if b.is_empty() {
            continue;
        }
        match groups.iter_mut().find(|(id, _)| *id == b.as_str()) {
            Some((_, names)) if !names.contains(h) => names.push(h.clone()),
            Some(_) => {}
            None => groups.push((b.as_str(), vec![h.clone()])),
        }
    }
    groups.into_iter().map(|(_, n)| n).filter(|n| n.len() > 1).collect()
}

/// Ranks on `rank`'s machine: those sharing its boot id, at least `local_size` (the ranks on its
/// host); `local_size` where its boot id is unknown.
pub fn ranks_on_machine(boot_ids: &[String], rank: usize, local_size: usize) -> usize {
    match boot_ids.get(rank) {
        Some(me) if !me.is_empty() => boot_ids.iter().filter(|b| *b == me).count().max(local_size),
        _ => local_size,
    }
}

/// The launcher environment's idea of the world size, if it has one: (variable, value).
pub fn launcher_size_from_env(get: impl Fn(&str) -> Option<String>) -> Option<(String, usize)> {
    [
        "OMPI_COMM_WORLD_SIZE",
        "PMI_SIZE",
        "PMIX_SIZE",
        "MPI_LOCALNRANKS_WORLD",
        "SLURM_NTASKS",
    ]
    .iter()
    .find_map(|v| {
        get(v)
            .and_then(|s| s.trim().parse::<usize>().ok())
            .map(|n| (v.to_string(), n))
    })
}

/// How many distinct hosts the job was meant to span, if anything says so: the launcher's
/// variable, or the MPIJob hostfile Open MPI was pointed at.
pub fn expected_nodes(get: impl Fn(&str) -> Option<String>, size: usize) -> Option<(usize, String)> {
    if let Some(n) = get(EXPECT_NODES_ENV).and_then(|s| s.parse::<usize>().ok()) {
        return Some((n, format!("the launcher ({EXPECT_NODES_ENV})")));
    }
    let file = get("OMPI_MCA_orte_default_hostfile").or_else(|| get("OMPI_MCA_rmaps_default_hostfile"))?;
    let hosts = hostfiles::parse_hostfile(std::path::Path::new(&file)).ok()?;
    // The job can only span as many hosts as it has ranks.
    Some((hosts.len().min(size), format!("the MPIJob hostfile {file}")))
}

/// The variables an MPI launcher (Open MPI, PMI, PMIx) sets in every rank it starts: one present
/// means this process is a rank of a job.
pub const MPI_RANK_VARS: [&str; 3] = ["OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"];

/// This process's rank as the MPI launcher's environment gives it (Open MPI, MPICH/Hydra, PMIx,
/// srun), before MPI is initialised; None outside an MPI job.
pub fn rank_from_env() -> Option<usize> {
    MPI_RANK_VARS
        .iter()
        .chain(&["SLURM_PROCID"])
        .find_map(|v| std::env::var(v).ok())
        .and_then(|r| r.trim().parse().ok())
}

impl World {
    /// Initialise MPI and learn where every rank runs. Every MPI step is bounded by `mpi_timeout`.
    pub fn init(mpi_timeout: Duration) -> Result<World, WorldError> {
        let env = |k: &str| std::env::var(k).ok();
        let host = this_host();
        let env_rank = MPI_RANK_VARS.iter().find_map(|v| env(v)).unwrap_or_else(|| "?".into());
        let guard = watchdog::arm(
            mpi_timeout,
            format!(
                "rank {env_rank} ({host}): MPI initialisation did not finish within {mpi_timeout:?}; is every host reachable by the MPI launcher?"
            ),
        );
        let universe = mpi::initialize().ok_or(WorldError::Init)?;
        drop(guard);
        let comm = universe.world();
        let (rank, size) = (comm.rank() as usize, comm.size() as usize);
        if size == 1 {
            if let Some((var, expected)) = launcher_size_from_env(env).filter(|(_, n)| *n > 1) {
                let library = mpi::environment::library_version().unwrap_or_else(|_| "unknown".into());
                let library = library.replace('\0', "");
                let library = library.lines().next().unwrap_or("unknown").trim().to_string();
                return Err(WorldError::SizeMismatch { var, expected, library });
            }
        }
        let mut world = World {
            comm,
            _universe: universe,
            rank,
            size,
            my_host: host.clone(),
            hosts: Vec::new(),
            boot_ids: Vec::new(),
            node_of: Vec::new(),
            node_count: 0,
            local_rank: 0,
            local_size: 0,
            mpi_timeout,
        };
        // Host name and kernel boot id, in one record per rank.
        let mut rec = [0u8; HOST_LEN + BOOT_ID_LEN];
        let hb = host.as_bytes();
        let n = hb.len().min(HOST_LEN);
        rec[..n].copy_from_slice(&hb[..n]);
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
        let bb = boot.trim().as_bytes();
        let m = bb.len().min(BOOT_ID_LEN);
        rec[HOST_LEN..HOST_LEN + m].copy_from_slice(&bb[..m]);
        let all = world.all_gather_bytes(&rec, "exchanging host names");
        let text = |c: &[u8]| {
            let end = c.iter().position(|&b| b == 0).unwrap_or(c.len());
            String::from_utf8_lossy(&c[..end]).into_owned()
        };
        let records: Vec<&[u8]> = all.chunks(HOST_LEN + BOOT_ID_LEN).collect();
        world.hosts = records.iter().map(|c| text(&c[..HOST_LEN.min(c.len())])).collect();
        world.boot_ids = records
            .iter()
            .map(|c| text(c.get(HOST_LEN..).unwrap_or_default()))
            .collect();
        let (node_of, node_count, local_rank, local_size) = placement(&world.hosts);
        world.local_rank = local_rank[rank];
        world.local_size = local_size[rank];
        world.node_of = node_of;
        world.node_count = node_count;
        if let Some((expected, source_desc)) = expected_nodes(env, size) {
            if node_count < expected {
                let mut distinct: Vec<&str> = world.hosts.iter().map(String::as_str).collect();
                distinct.dedup();
                return Err(WorldError::CollapsedPlacement {
                    size,
                    nodes: node_count,
                    hosts: distinct.join(","),
                    expected,
                    source_desc,
                });
            }
        }
        Ok(world)
    }

    pub fn rank(&self) -> usize {
        self.rank
    }
    pub fn size(&self) -> usize {
        self.size
    }
    pub fn host(&self) -> &str {
        &self.my_host
    }
    /// Host name of every rank, indexed by rank.
    pub fn hosts(&self) -> &[String] {
        &self.hosts
    }
    /// Host names that are one machine (one kernel boot id under several names: pods or
    /// namespaces on one node), each group in rank order; empty when every host is its own.
    pub fn one_machine(&self) -> Vec<Vec<String>> {
        one_machine(&self.hosts, &self.boot_ids)
    }
    /// Node index of every rank (nodes numbered in order of first appearance).
    pub fn node_of(&self) -> &[usize] {
        &self.node_of
    }
    pub fn node_count(&self) -> usize {
        self.node_count
    }
    pub fn local_rank(&self) -> usize {
        self.local_rank
    }
    pub fn local_size(&self) -> usize {
        self.local_size
    }
    /// Ranks on this rank's machine: those with its kernel boot id (namespaces or pods on one
    /// node count together), at least those on its host.
    pub fn machine_size(&self) -> usize {
        ranks_on_machine(&self.boot_ids, self.rank, self.local_size)
    }
    pub fn mpi_timeout(&self) -> Duration {
        self.mpi_timeout
    }

    fn arm(&self, step: &str) -> watchdog::DeadlineGuard {
        watchdog::arm(
            self.mpi_timeout,
            format!(
                "rank {} ({}): MPI step `{step}` did not finish within {:?}: another rank died or stalled before reaching it",
                self.rank,
                self.host(),
                self.mpi_timeout
            ),
        )
    }

    /// Every rank contributes `local` (the same length on every rank); all get the concatenation.
    pub fn all_gather_bytes(&self, local: &[u8], step: &str) -> Vec<u8> {
        let _g = self.arm(step);
        let mut out = vec![0u8; local.len() * self.size];
        self.comm.all_gather_into(local, &mut out[..]);
        out
    }

    /// Every rank sends chunk k of `local` (`size` chunks of one length) to rank k and gets
    /// chunk p of the result from rank p: O(N) bytes per rank where an allgather of per-peer
    /// records would be O(N^2).
    pub fn all_to_all_bytes(&self, local: &[u8], step: &str) -> Vec<u8> {
        let _g = self.arm(step);
        let mut out = vec![0u8; local.len()];
        self.comm.all_to_all_into(local, &mut out[..]);
        out
    }

    /// Rank 0's bytes, on every rank.
    pub fn broadcast_bytes(&self, buf: &mut [u8], step: &str) {
        let _g = self.arm(step);
        self.comm.process_at_rank(0).broadcast_into(buf);
    }

    /// Rank 0's `data` (any length), on every rank; other ranks pass anything.
    pub fn broadcast_vec(&self, data: &[u8], step: &str) -> Vec<u8> {
        let mut len = (data.len() as u64).to_le_bytes();
        self.broadcast_bytes(&mut len, step);
        let mut buf = if self.rank == 0 {
            data.to_vec()
        } else {
            vec![0u8; u64::from_le_bytes(len) as usize]
        };
        self.broadcast_bytes(&mut buf, step);
        buf
    }

    /// Every rank contributes any number of bytes; rank 0 gets them all, indexed by rank.
    pub fn gather_bytes(&self, local: &[u8], step: &str) -> Option<Vec<Vec<u8>>> {
        let _g = self.arm(step);
        let root = self.comm.process_at_rank(0);
        let len = local.len() as Count;
        if self.rank == 0 {
            let mut lens = vec![0 as Count; self.size];
            root.gather_into_root(&len, &mut lens[..]);
            let displs: Vec<Count> = lens
                .iter()
                .scan(0, |acc, &l| {
                    let d = *acc;
                    *acc += l;
                    Some(d)
                })
                .collect();
            let total: usize = lens.iter().map(|&l| l as usize).sum();
            let mut all = vec![0u8; total];
            {
                let mut part = PartitionMut::new(&mut all[..], &lens[..], &displs[..]);
                root.gather_varcount_into_root(local, &mut part);
            }
            Some(
                lens.iter()
                    .zip(&displs)
                    .map(|(&l, &d)| all[d as usize..(d + l) as usize].to_vec())
                    .collect(),
            )
        } else {
            root.gather_into(&len);
            root.gather_varcount_into(local);
            None
        }
    }

    /// Element-wise maximum of `local` (the same length on every rank), on every rank.
    pub fn max_f64(&self, local: &[f64], step: &str) -> Vec<f64> {
        let _g = self.arm(step);
        let mut out = vec![0.0; local.len()];
        self.comm
            .all_reduce_into(local, &mut out[..], mpi::collective::SystemOperation::max());
        out
    }

    pub fn barrier(&self, step: &str) {
        let _g = self.arm(step);
        self.comm.barrier();
    }

    /// A barrier whose waiting ranks sleep between checks ([`IDLE_POLL`]) instead of spinning
    /// in MPI: for steps where most ranks sit out while a few measure (the retests, one pair at
    /// a time). Open MPI's waiting ranks poll without pause (yielding, where
    /// `mpi_yield_when_idle` is set), and where ranks share cores (several ranks per node, or
    /// namespace hosts on one machine) the pair being measured then waits for a core: on the
    /// shaped namespace cluster a retest lost about 94 ms, 8% of it, in one pass of two. Leaves
    /// at most about one poll interval per barrier stage after the last rank arrives.
    pub fn barrier_idle(&self, step: &str) {
        let _g = self.arm(step);
        let mut req = self.comm.immediate_barrier();
        loop {
            match req.test() {
                Ok(_) => return,
                Err(pending) => {
                    req = pending;
                    std::thread::sleep(IDLE_POLL);
                }
            }
        }
    }

    /// Logical AND of `ok` over all ranks: lets every rank leave together when any one failed.
    pub fn all_ok(&self, ok: bool, step: &str) -> bool {
        self.all_gather_bytes(&[u8::from(ok)], step).iter().all(|&b| b == 1)
    }

    /// The MPI library's own communicator, for baselines that call MPI collectives.
    pub fn comm(&self) -> &SimpleCommunicator {
        &self.comm
    }
}

/// This host's name as the kernel reports it.
pub fn this_host() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "unknown-host".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_sharing_a_boot_id_are_one_machine() {
        let v = |x: &[&str]| x.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // Two pods on node A (two ranks each), one on node B, one rank whose boot id is unknown.
        let hosts = v(&["w0", "w0", "w1", "w1", "w2", "w3"]);
        let boots = v(&["A", "A", "A", "A", "B", ""]);
        assert_eq!(one_machine(&hosts, &boots), vec![v(&["w0", "w1"])]);
        // Every host its own machine; several ranks of one host are not a finding.
        assert!(one_machine(&v(&["a", "a", "b"]), &v(&["A", "A", "B"])).is_empty());
        assert!(one_machine(&v(&["a", "b"]), &v(&["", ""])).is_empty());
        // What a rank's reduction pool shares the cores with: 4 ranks on machine A (two pods),
        // 1 on B; where the boot id is unknown, the ranks of its host.
        assert_eq!(ranks_on_machine(&boots, 2, 2), 4);
        assert_eq!(ranks_on_machine(&boots, 4, 1), 1);
        assert_eq!(ranks_on_machine(&boots, 5, 1), 1);
    }

    #[test]
    fn launcher_size_prefers_open_mpi_then_pmi() {
        let env = |k: &str| match k {
            "PMI_SIZE" => Some("8".to_string()),
            _ => None,
        };
        assert_eq!(launcher_size_from_env(env), Some(("PMI_SIZE".into(), 8)));
        assert_eq!(launcher_size_from_env(|_| None), None);
    }

    #[test]
    fn expected_nodes_from_launcher_or_mpijob_hostfile() {
        assert_eq!(
            expected_nodes(|k| (k == EXPECT_NODES_ENV).then(|| "3".into()), 8).map(|x| x.0),
            Some(3)
        );
        let dir = std::env::temp_dir().join(format!("meshrun-world-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("hostfile");
        std::fs::write(
            &f,
            "job-worker-0.job.default.svc slots=2\njob-worker-1.job.default.svc slots=2\n",
        )
        .unwrap();
        let fs = f.to_string_lossy().into_owned();
        let got = expected_nodes(|k| (k == "OMPI_MCA_orte_default_hostfile").then(|| fs.clone()), 4).unwrap();
        assert_eq!(got.0, 2);
        // A 1-rank job can only span one host.
        assert_eq!(
            expected_nodes(|k| (k == "OMPI_MCA_orte_default_hostfile").then(|| fs.clone()), 1)
                .unwrap()
                .0,
            1
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
