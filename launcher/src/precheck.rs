//! The rank command checked where `meshrun launch` runs, before mpirun starts a single rank: the
//! same parser and the same argument checks the ranks use, so a typo costs one line, not an ssh
//! fan-out to every node and a rank count of clap errors between mpirun's abort banners.
//!
//! Only what does not depend on the ranks' own hosts is checked here (flags, sizes, factors,
//! data types, ops, flag combinations, rank numbers against the job's size, whether the job has
//! any pair to test). A NIC named by NCCL's variables, files rank 0 writes and the transport
//! `auto` chooses are the ranks' to judge: the launcher may run on a machine without them (an
//! MPIJob launcher pod has no RDMA device).

use clap::{CommandFactory, FromArgMatches};

use crate::cli::{Cli, TransportChoice};
use crate::settings::{self, Nics, Resolved};

/// The job as the launcher placed it: ranks per host, in rank order.
pub struct Job<'a> {
    pub placement: &'a [(String, u64)],
}

impl Job<'_> {
    fn size(&self) -> usize {
        self.placement.iter().map(|(_, n)| *n as usize).sum()
    }

    /// Each rank's host index, ranks filled host by host (mpirun's default mapping by slot).
    fn node_of(&self) -> Vec<usize> {
        self.placement
            .iter()
            .enumerate()
            .flat_map(|(i, (_, n))| std::iter::repeat_n(i, *n as usize))
            .collect()
    }
}

/// Check the rank command `args` (after `--`) for `job`; the error is one line saying what is
/// wrong and what would be right.
pub fn rank_command(args: &[String], job: &Job<'_>) -> Result<(), String> {
    checked(args, job).map_err(|e| format!("the rank command `{}`: {e}", args.join(" ")))
}

/// [`rank_command`]'s checks, each error without the command in front.
fn checked(args: &[String], job: &Job<'_>) -> Result<(), String> {
    let argv = std::iter::once("meshrun".to_string()).chain(args.iter().cloned());
    let matches = crate::settings::source::with_env(Cli::command())
        .try_get_matches_from(argv)
        .map_err(|e| clap_line(&e))?;
    let cli = Cli::from_arg_matches(&matches).map_err(|e| clap_line(&e))?;
    let env = |k: &str| std::env::var(k).ok();
    let cmd = settings::resolve(cli.command, &matches, Nics::Flags, &env)?;
    rank_checks(&cmd, job)
}

/// The checks of each rank command that need only the job's shape.
fn rank_checks(cmd: &Resolved, job: &Job<'_>) -> Result<(), String> {
    let size = job.size();
    match cmd {
        Resolved::Launch(_) => {
            Err("`launch` cannot be a rank command; give the test to run, e.g. `-- pairwise`".into())
        }
        Resolved::MeshCheck(a) => {
            crate::mesh_check_cmd::check_args(&a.args)?;
            if size < 2 {
                return Err(format!(
                    "mesh-check needs at least 2 ranks to have a pair to check; this job has {size}"
                ));
            }
            Ok(())
        }
        Resolved::Pairwise(a) => {
            // `auto` may end on either; RDMA is assumed, so only what no transport could do is
            // refused here (the ranks refuse --op write if auto ends on TCP).
            let kind = match a.rank.transport {
                TransportChoice::Tcp => ranks::TransportKind::Tcp,
                TransportChoice::Verbs | TransportChoice::Auto => ranks::TransportKind::Verbs,
            };
            let cfg = crate::pairwise_cmd::config(a, kind)?;
            if let Some((x, y)) = a.args.pair {
                if x.max(y) >= size {
                    return Err(format!(
                        "--pair {x},{y}: this job has ranks 0 to {}",
                        size.saturating_sub(1)
                    ));
                }
            }
            let node_of = job.node_of();
            if analysis::pairwise::rounds_for(size, cfg.selection, cfg.pattern, &node_of).is_empty() {
                return Err(format!(
                    "no pairs to test: {size} rank(s) on {} host(s) with this selection",
                    job.placement.len()
                ));
            }
            Ok(())
        }
        Resolved::Coll(c) => {
            let cfg = crate::coll_cmd::config(c)?;
            if cfg.root >= size {
                return Err(format!(
                    "-r {}: this job has ranks 0 to {}",
                    cfg.root,
                    size.saturating_sub(1)
                ));
            }
            Ok(())
        }
        // Commands that are not tests (devices, compare, ...) run as they are on every host.
        _ => Ok(()),
    }
}

/// clap's message on one line: its first line without the `error: ` prefix, and where it has a
/// tip (`tip: a similar argument exists: '--iters'`), the tip.
pub fn clap_line(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines.next().unwrap_or("invalid arguments");
    let first = first.strip_prefix("error: ").unwrap_or(first);
    let tip = lines.find(|l| l.starts_with("tip: ")).map(|t| format!(" ({t})"));
    format!("{first}{}", tip.unwrap_or_default())
}

#[cfg(test)]
mod perftest_lines;

#[cfg(test)]
mod tests {
    use super::*;

    fn job(hosts: &[(&str, u64)]) -> Vec<(String, u64)> {
        hosts.iter().map(|(h, n)| (h.to_string(), *n)).collect()
    }

    fn check(args: &str, hosts: &[(&str, u64)]) -> Result<(), String> {
        let p = job(hosts);
        let v: Vec<String> = args.split_whitespace().map(String::from).collect();
        rank_command(&v, &Job { placement: &p })
    }

    #[test]
    fn good_commands_pass() {
        for c in [
            "mesh-check",
            "pairwise -s 1M -n 60",
            "pairwise --inter-node",
            "all_reduce -b 8 -e 64M -f 2",
            "broadcast -r 3",
            "devices",
        ] {
            assert_eq!(check(c, &[("a", 2), ("b", 2)]), Ok(()), "{c}");
        }
    }

    /// perftest command lines as operators paste them after `pairwise`: the flags meshrun has
    /// run; the others are refused in one line saying what to do instead.
    #[test]
    fn pasted_perftest_lines_run_or_say_why_not() {
        let hosts = [("a", 1), ("b", 1)];
        for ok in [
            "pairwise -d mlx5_0 -i 1 -x 3 -s 65536 -n 5000 -F --report_gbits",
            "pairwise -d mlx5_0 -a -F --report_gbits -q 1",
            "pairwise -S 3 --tclass 106 -s 1M -D 5 -t 64",
            "pairwise -b -s 1M -n 100",
            "pairwise --test lat --op send -s 2 -n 1000",
            "pairwise --use_cuda_dmabuf -s 1M",
            "pairwise -q 4 -s 1M -n 100 --report_gbits",
            "pairwise --qp 8 -b -s 64K",
            "pairwise -q 4 --transport tcp -s 64K -n 16 --no-trace",
            "pairwise -q 2 -D 5",
            "pairwise -T 41 -m 1024",
            "pairwise --tos 41 -c RC -Q 100 -u 14 -l 1",
            "pairwise --op read -D 3 -q 4 --use_cuda=0",
            "pairwise --op send -D 3 --use-cuda",
            "pairwise --use_cuda=0 --transport tcp --p2p ipc",
            "pairwise -b -D 5 -q 2",
        ] {
            assert_eq!(check(ok, &hosts), Ok(()), "{ok}");
        }
        for (bad, want) in [
            (
                "pairwise -q 4 --test lat",
                "-q 4: several queue pairs are for bandwidth tests, as in perftest; drop -q for --test lat",
            ),
            (
                "pairwise -q 4 --transport tcp -b",
                "-q 4 over tcp: a test's connections carry one direction at a time; drop -b, or drop -q",
            ),
            (
                "pairwise -T 41 --transport tcp",
                "-T/--tclass 41 sets the RDMA queue pairs' traffic class, and this job's mesh is tcp",
            ),
            (
                "pairwise -m 4096 --transport tcp",
                "-m 4096 sets an RDMA queue pair's path MTU, and this job's mesh is tcp",
            ),
            (
                "pairwise --p2p net --transport tcp",
                "--p2p net chooses how the GPU pairs of one node are measured: add --use-cuda",
            ),
            (
                "pairwise --use-cuda --p2p ipc --test lat --op send",
                "--p2p ipc: pairs over IPC measure GPU-to-GPU copy bandwidth, not latency",
            ),
            ("pairwise -c UD", "-c/--connection UD (perftest's connection type)"),
            ("pairwise --run_infinitely", "use --repeat-for DURATION"),
            ("pairwise -e", "meshrun polls completions"),
            ("pairwise -D 60 --timeout 30", "give --timeout 121 or more"),
            (
                "pairwise -b -D 5 --transport tcp",
                "-b with -D: over tcp both directions run a count",
            ),
            ("pairwise -q 129", "-q 129: expected 1 to 128 queue pairs per test"),
            (
                "pairwise -R --transport tcp",
                "-R/--rdma-cm connects RDMA queue pairs, and this job's mesh is tcp",
            ),
            (
                "pairwise -p 18515",
                "-p 18515 (perftest's TCP port for exchanging endpoints): meshrun exchanges them over MPI; drop -p",
            ),
            (
                "pairwise --use_cuda_bus_id 0000:18:00.0",
                "choose the GPU by its CUDA ordinal instead",
            ),
            (
                "pairwise --test lat -D 5",
                "--test lat takes -n iterations, not -D or -b",
            ),
        ] {
            let e = check(bad, &hosts).unwrap_err();
            assert!(e.contains(want) && !e.contains('\n'), "{bad}: {e}");
        }
    }

    #[test]
    fn bad_flags_are_one_line_naming_the_command() {
        let e = check("pairwise --bogus", &[("a", 2)]).unwrap_err();
        assert!(
            e.starts_with("the rank command `pairwise --bogus`: unexpected argument '--bogus' found"),
            "{e}"
        );
        assert!(!e.contains('\n'), "{e}");
        let e = check("all_reduce -b 64M -e 8", &[("a", 4)]).unwrap_err();
        assert_eq!(
            e,
            "the rank command `all_reduce -b 64M -e 8`: -b 67108864 is larger than -e 8; expected -b <= -e"
        );
        let e = check("pairwise -s 0", &[("a", 4)]).unwrap_err();
        assert!(
            e.starts_with("the rank command `pairwise -s 0`: invalid value '0' for"),
            "{e}"
        );
        let e = check("all_reduce -d float99", &[("a", 2)]).unwrap_err();
        assert!(e.contains("-d: "), "{e}");
        let e = check("all_reduce -f 1", &[("a", 2)]).unwrap_err();
        assert!(e.contains("-f 1 would never grow the size"), "{e}");
    }

    #[test]
    fn rank_numbers_and_pairs_are_checked_against_the_job() {
        let e = check("broadcast -r 4", &[("a", 2), ("b", 2)]).unwrap_err();
        assert!(e.ends_with("-r 4: this job has ranks 0 to 3"), "{e}");
        let e = check("pairwise --pair 0,5", &[("a", 2), ("b", 2)]).unwrap_err();
        assert!(e.ends_with("--pair 0,5: this job has ranks 0 to 3"), "{e}");
        let e = check("pairwise --inter-node", &[("a", 4)]).unwrap_err();
        assert!(
            e.ends_with("no pairs to test: 4 rank(s) on 1 host(s) with this selection"),
            "{e}"
        );
        let e = check("pairwise", &[("a", 1)]).unwrap_err();
        assert!(e.contains("no pairs to test: 1 rank(s)"), "{e}");
        let e = check("mesh-check", &[("a", 1)]).unwrap_err();
        assert!(
            e.ends_with("mesh-check needs at least 2 ranks to have a pair to check; this job has 1"),
            "{e}"
        );
        let e = check("launch --np 2 -- mesh-check", &[("a", 2)]).unwrap_err();
        assert!(e.contains("`launch` cannot be a rank command"), "{e}");
    }

    #[test]
    fn an_explicit_tcp_transport_refuses_one_sided_ops_and_auto_leaves_it_to_the_ranks() {
        let e = check("pairwise --transport tcp --op write", &[("a", 2)]).unwrap_err();
        assert!(e.contains("the tcp transport cannot do RDMA write"), "{e}");
        assert_eq!(check("pairwise --op write", &[("a", 2)]), Ok(()));
    }
}
