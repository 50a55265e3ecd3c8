//! A real Slurm cluster whose nodes are namespace hosts (`scripts/slurm-cluster`): bringing it
//! up, its client commands, and its logs for a failure message.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::netns::MachineLock;
use crate::{mpi_env, root, run_bounded};

/// A real Slurm (Debian's slurm-wlm and munge) whose nodes are namespace hosts mr-h0..: slurmctld
/// on this machine, one slurmd per node (`scripts/slurm-cluster`). Shares the namespace lock.
pub struct SlurmCluster {
    pub dir: PathBuf,
    _lock: MachineLock,
}

impl SlurmCluster {
    /// `nodes` nodes of `cpus` CPUs each, all idle in partition `debug`.
    pub fn up(nodes: usize, cpus: usize) -> SlurmCluster {
        SlurmCluster::up_with_gpus(nodes, cpus, 0)
    }

    /// As [`SlurmCluster::up`], each node also offering `gpus` GPUs (gres/gpu on stand-in device files: the GPU
    /// job scripts schedule as on a GPU cluster, their ranks on meshrun's host stand-in).
    pub fn up_with_gpus(nodes: usize, cpus: usize, gpus: usize) -> SlurmCluster {
        SlurmCluster::up_full(nodes, cpus, gpus, &[])
    }

    /// As [`SlurmCluster::up`], with `scripts/slurm-cluster`'s optional settings (`MR_SLURM_SYSFS`,
    /// `MR_SLURM_HEALTHCHECK`, ...) in `env`.
    pub fn up_with_env(nodes: usize, cpus: usize, env: &[(&str, &str)]) -> SlurmCluster {
        SlurmCluster::up_full(nodes, cpus, 0, env)
    }

    /// Where this test process's Slurm cluster keeps its files (slurm.conf, logs, `net/`).
    pub fn dir_of_this_process() -> PathBuf {
        std::env::temp_dir().join(format!("meshrun-slurm-{}", std::process::id()))
    }

    fn up_full(nodes: usize, cpus: usize, gpus: usize, env: &[(&str, &str)]) -> SlurmCluster {
        assert!(
            nix::unistd::geteuid().is_root(),
            "the Slurm cluster needs root (munged, slurmd in namespaces); run the tests as root, as CI does"
        );
        let dir = SlurmCluster::dir_of_this_process();
        // Made before it is up, so a failed `up` is taken down again (by Drop) when it panics:
        // a slurmctld left behind holds its port against every later cluster.
        let cluster = SlurmCluster {
            dir,
            _lock: MachineLock::take(),
        };
        let mut cmd = Command::new(root().join("scripts/slurm-cluster"));
        cmd.args(["up", &nodes.to_string(), &cpus.to_string(), &gpus.to_string()])
            .env("MR_SLURM_DIR", &cluster.dir)
            .envs(env.iter().copied());
        let r = run_bounded(&mut cmd, Duration::from_secs(120));
        assert_eq!(r.code, Some(0), "slurm-cluster up failed:\n{}", r.all());
        cluster
    }

    /// The slurm.conf every client command needs (`SLURM_CONF`).
    pub fn conf(&self) -> PathBuf {
        self.dir.join("slurm.conf")
    }

    /// A Slurm client command (`sbatch`, `srun`, ...) with this cluster's `SLURM_CONF`, the MPI
    /// environment of [`mpi_env`], and the working directory `cwd`.
    pub fn command(&self, program: &str, cwd: &Path) -> Command {
        let mut cmd = Command::new(program);
        mpi_env(&mut cmd).env("SLURM_CONF", self.conf()).current_dir(cwd);
        cmd
    }

    /// The last `lines` lines of each of the cluster's logs (slurmctld, every slurmd), headed by
    /// the file's name: for a failure message, since the cluster's files go with it.
    pub fn log_tail(&self, lines: usize) -> String {
        let mut files: Vec<PathBuf> = std::fs::read_dir(self.dir.join("log"))
            .map(|r| r.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        files.sort();
        let mut out = String::new();
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap_or_default();
            let all: Vec<&str> = text.lines().collect();
            out.push_str(&format!("== {} (last {lines} lines)\n", f.display()));
            for l in &all[all.len().saturating_sub(lines)..] {
                out.push_str(l);
                out.push('\n');
            }
        }
        out
    }
}

impl Drop for SlurmCluster {
    fn drop(&mut self) {
        let _ = Command::new(root().join("scripts/slurm-cluster"))
            .arg("down")
            .env("MR_SLURM_DIR", &self.dir)
            .status();
    }
}
