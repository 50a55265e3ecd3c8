//! What the commands use, resolved once from the command line before any command runs. clap's
//! types ([`crate::cli`]) hold the flags as given; here they become the values a command reads:
//! NCCL's NIC variables where neither a flag nor `MESHRUN_<FLAG>` chose ([`rank`]), perftest's
//! `-d/-i/-x/-R` spellings, `-q` and `NCCL_IB_QPS_PER_CONNECTION` ([`qps`]), a collective's bus
//! bandwidth bar ([`busbw`]), a GPU run's path within nodes (`--p2p`, `NCCL_P2P_DISABLE`:
//! [`p2p`]), each with where it came from for the run header ([`source`]).
//! Precedence everywhere: the flag, then `MESHRUN_<FLAG>`, then NCCL's (or nccl-tests') variable,
//! NCCL's from the environment, else from NCCL's configuration files ([`nccl_conf`]).

pub mod busbw;
pub mod nccl;
pub mod nccl_conf;
pub mod p2p;
pub mod qps;
pub mod rank;
pub mod source;

use analysis::coll::BusbwBar;

use crate::cli::{
    self, CollArgs, CompareArgs, CompletionsArgs, DevicesArgs, LaunchArgs, MeshCheckArgs, PairwiseArgs, PreflightArgs,
    TopologyArgs, VerdictArgs,
};

pub use qps::Qps;
pub use rank::{Here, Rank};

/// A subcommand with its settings resolved: what `main` dispatches.
// One per process, read once: pairwise's many flags make its variant the largest, and
// boxing it would save nothing worth the indirection.
#[allow(clippy::large_enum_variant)]
pub enum Resolved {
    Launch(LaunchArgs),
    MeshCheck(MeshCheckSettings),
    Devices(DevicesArgs),
    Preflight(PreflightSettings),
    Pairwise(PairwiseSettings),
    Coll(CollSettings),
    Verdict(VerdictArgs),
    Topology(TopologyArgs),
    Compare(CompareArgs),
    Completions(CompletionsArgs),
    Manpage,
}

/// `meshrun mesh-check`: its flags and the rank options resolved.
pub struct MeshCheckSettings {
    pub args: MeshCheckArgs,
    pub rank: Rank,
}

/// `meshrun preflight`: its flags and the rank options resolved.
pub struct PreflightSettings {
    pub args: PreflightArgs,
    pub rank: Rank,
}

/// `meshrun pairwise`: its flags, and what they resolve to (read these, not `args.rank`,
/// `args.use_cuda` or `args.qps`).
pub struct PairwiseSettings {
    pub args: PairwiseArgs,
    /// The rank options, perftest's `-d/-i/-x/-R` folded in.
    pub rank: Rank,
    /// `--use-cuda`, or `auto` where `--use-cuda-dmabuf` implies it (perftest's own rule).
    pub use_cuda: Option<String>,
    /// Queue pairs per test.
    pub qps: Qps,
    /// With `--use-cuda`: the path of pairs within a node (`--p2p`, `NCCL_P2P_DISABLE`).
    pub p2p: p2p::P2p,
}

impl PairwiseSettings {
    /// The flags with `rank` (their rank options resolved) and `qps`; perftest's -d/-i/-x are
    /// the same as --ib-dev/--ib-port/--gid-index (and win, as those flags do, over a choice
    /// made from NCCL's variables), -R as --rdma-cm, -m the queue pairs' path MTU (-T/--tos is
    /// --tclass itself, in `rank`).
    pub fn new(args: PairwiseArgs, mut rank: Rank, qps: Qps) -> PairwiseSettings {
        let mut use_cuda = args.use_cuda.clone();
        if args.use_cuda_dmabuf && use_cuda.is_none() {
            use_cuda = Some("auto".into());
        }
        if args.d.is_some() {
            rank.ib_dev = args.d.clone();
        }
        if args.i.is_some() {
            rank.ib_port = args.i;
        }
        if args.x.is_some() {
            rank.gid_index = args.x;
        }
        if args.perftest_rdma_cm {
            rank.rdma_cm = true;
        }
        rank.mtu = args.mtu;
        rank.rails_auto = args.rails_auto();
        PairwiseSettings {
            args,
            rank,
            use_cuda,
            qps,
            p2p: p2p::P2p {
                choice: p2p::P2pChoice::Auto,
                source: None,
            },
        }
    }

    /// A timed run's (`-D`) deadline for any one wait, which must outlast a round: a round
    /// runs both directions of a pair for `-D` seconds each at every size while a rank without
    /// a partner (an odd rank count, the retests) waits in MPI. Where `--timeout` (or
    /// `MESHRUN_TIMEOUT`) was not `chosen`, the default grows to cover it; a chosen one too short
    /// is one line.
    pub fn fit_timeout(mut self, chosen: bool) -> Result<PairwiseSettings, String> {
        let Some(d) = self.args.duration else {
            return Ok(self);
        };
        let sizes = if self.args.all_sizes {
            analysis::pairwise::defaults::sweep_sizes().len()
        } else {
            1
        };
        let round = 2.0 * d * sizes as f64;
        let t = self.rank.timeout;
        if !chosen {
            self.rank.timeout = t.max(round + t);
        } else if t <= round {
            return Err(format!(
                "-D {d} with --timeout {t}: a round runs each pair's two directions for {d} s at {sizes} size(s), \
                 about {round} s, while a rank without a partner waits in MPI; give --timeout {} or more, \
                 or leave it out (a -D run's default covers its rounds)",
                (round + 1.0).ceil()
            ));
        }
        Ok(self)
    }
}

/// A collective's subcommand: which one, its flags and what they resolve to (read `rank`,
/// `busbw_bar` and `qps`, not `args.rank` or `args.qps`).
pub struct CollSettings {
    /// Its name in `collectives::coll::REGISTRY`.
    pub name: &'static str,
    pub args: CollArgs,
    pub rank: Rank,
    /// The average bus bandwidth bar and where it came from.
    pub busbw_bar: Option<BusbwBar>,
    /// Queue pairs per peer.
    pub qps: Qps,
    /// `-g`: the path between ranks of one node, and where it came from.
    pub p2p: p2p::P2p,
}

/// Where the rank options' NIC choices come from.
#[derive(Clone, Copy)]
pub enum Nics<'a> {
    /// The flags, then NCCL's variables matched against this host (the ranks).
    Here(&'a Here),
    /// The flags alone (`meshrun launch`'s check of the rank command: NCCL's NICs are the
    /// ranks' to judge on their own hosts).
    Flags,
}

/// Resolve `cmd`, parsed by clap into `m`, reading variables through `env`.
pub fn resolve(
    cmd: cli::Command,
    m: &clap::ArgMatches,
    nics: Nics<'_>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Resolved, String> {
    let empty = clap::ArgMatches::default();
    let sub = m.subcommand().map_or(&empty, |(_, s)| s);
    let rank = |a: &cli::RankArgs| match nics {
        Nics::Here(here) => Rank::resolve(a, sub, env, here),
        Nics::Flags => Ok(Rank::from_flags(a)),
    };
    let qps = |given: Option<u32>| match nics {
        Nics::Here(here) => Qps::from_matches(given, sub, env, &here.nccl_conf),
        Nics::Flags => Qps::from_flag(given),
    };
    Ok(match cmd {
        cli::Command::Launch(a) => Resolved::Launch(a),
        cli::Command::MeshCheck(args) => Resolved::MeshCheck(MeshCheckSettings {
            rank: rank(&args.rank)?,
            args,
        }),
        cli::Command::Devices(a) => Resolved::Devices(a),
        cli::Command::Preflight(args) => Resolved::Preflight(PreflightSettings {
            rank: rank(&args.rank)?,
            args,
        }),
        cli::Command::Pairwise(args) => {
            let (r, q) = (rank(&args.rank)?, qps(args.qps));
            let chosen = sub
                .value_source("timeout")
                .is_some_and(|s| s != clap::parser::ValueSource::DefaultValue);
            let p2p = p2p::from_matches(args.p2p, sub, env)?;
            let s = PairwiseSettings::new(args, r, q).fit_timeout(chosen)?;
            Resolved::Pairwise(PairwiseSettings { p2p, ..s })
        }
        cli::Command::Coll(c) => {
            let (r, q) = (rank(&c.args.rank)?, qps(c.args.qps));
            let busbw_bar = busbw::from_matches(c.args.expect_busbw, sub, env)?;
            let p2p = p2p::from_matches(c.args.p2p, sub, env)?;
            Resolved::Coll(CollSettings {
                name: c.name,
                args: c.args,
                rank: r,
                busbw_bar,
                qps: q,
                p2p,
            })
        }
        cli::Command::Verdict(a) => Resolved::Verdict(a),
        cli::Command::Topology(a) => Resolved::Topology(a),
        cli::Command::Compare(a) => Resolved::Compare(a),
        cli::Command::Completions(a) => Resolved::Completions(a),
        cli::Command::Manpage => Resolved::Manpage,
    })
}
