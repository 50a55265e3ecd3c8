//! [`config`] on perftest's flags: the operation, `-D`, what TCP refuses and `--use-cuda`'s `--p2p`.

use clap::{CommandFactory, FromArgMatches};

use super::*;
use crate::cli::Cli;
use crate::settings::{Here, Nics, Resolved};

/// `meshrun pairwise ARGS` resolved as a rank on a host with RDMA devices resolves it, with the
/// NCCL variables `env` sets.
fn settings(args: &[&str], env: &'static [(&'static str, &'static str)]) -> settings::PairwiseSettings {
    let argv = ["meshrun", "pairwise"].into_iter().chain(args.iter().copied());
    let m = Cli::command().try_get_matches_from(argv).expect("parses");
    let cli = Cli::from_arg_matches(&m).expect("parses");
    let here = Here {
        interfaces: Box::new(|| Ok(vec!["lo".into(), "eth0".into()])),
        rdma_devices: Box::new(|_| Ok(vec!["mlx5_0".into()])),
        nccl_conf: Default::default(),
    };
    let env = move |k: &str| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string());
    match settings::resolve(cli.command, &m, Nics::Here(&here), &env) {
        Ok(Resolved::Pairwise(s)) => s,
        _ => panic!("pairwise {args:?} does not resolve"),
    }
}

#[test]
fn without_op_bandwidth_is_rdma_write_with_b_and_d_too_as_ib_write_bw() {
    for args in [&["-s", "64K"][..], &["-b"], &["-D", "5"], &["-b", "-D", "5", "-q", "2"]] {
        let cfg = config(&settings(args, &[]), TransportKind::Verbs).expect("a configuration");
        assert_eq!(cfg.op, OpName::Write, "{args:?}");
        let cfg = config(&settings(args, &[]), TransportKind::Tcp);
        if args.contains(&"-b") && args.contains(&"-D") {
            let e = cfg.err().unwrap_or_default();
            assert!(e.starts_with("-b with -D: over tcp"), "{e}");
        } else if args.contains(&"-q") {
            assert!(cfg.is_err(), "{args:?}: -q needs RDMA");
        } else {
            assert_eq!(cfg.map(|c| c.op).ok(), Some(OpName::Send), "{args:?}");
        }
    }
    let cfg = config(
        &settings(&["-D", "5", "--op", "read", "-q", "4"], &[]),
        TransportKind::Verbs,
    )
    .expect("read -D -q");
    assert_eq!((cfg.op, cfg.amount, cfg.qps), (OpName::Read, Amount::Duration(5.0), 4));
}

#[test]
fn tcp_refuses_a_traffic_class_flag_but_not_nccls_variable() {
    let tcp = TransportKind::Tcp;
    let e = config(&settings(&["-T", "41"], &[]), tcp).unwrap_err();
    assert!(
        e.starts_with("-T/--tclass 41 sets the RDMA queue pairs' traffic class"),
        "{e}"
    );
    // NCCL ignores NCCL_IB_TC where it falls back to sockets, and so does meshrun.
    let s = settings(&[], &[("NCCL_IB_TC", "106")]);
    assert_eq!(s.rank.tclass, Some(106), "read under --transport auto");
    assert!(config(&s, tcp).is_ok());
    // --use-cuda over TCP: its pairs within a node go GPU to GPU by IPC, the others on host
    // memory; --p2p needs it, and IPC measures no latency.
    assert!(config(&settings(&["--use_cuda=0"], &[]), tcp).is_ok());
    let e = config(&settings(&["--p2p", "net"], &[]), tcp).unwrap_err();
    assert!(e.starts_with("--p2p net chooses how the GPU pairs of one node"), "{e}");
    let lat = ["--use-cuda", "--p2p", "ipc", "--test", "lat", "--op", "send"];
    let e = config(&settings(&lat, &[]), tcp).unwrap_err();
    assert!(e.contains("not latency; drop --test lat, or use --p2p net"), "{e}");
    let s = settings(&["--use-cuda"], &[("NCCL_P2P_DISABLE", "1")]);
    assert_eq!(s.p2p.source.as_deref(), Some("NCCL_P2P_DISABLE=1"));
    let e = config(&settings(&["-m", "2048"], &[]), tcp).unwrap_err();
    assert!(e.starts_with("-m 2048 sets an RDMA queue pair's path MTU"), "{e}");
}

#[test]
fn a_timed_runs_default_timeout_covers_its_rounds() {
    // 60 s plus both directions of -D 10 at one size.
    assert_eq!(settings(&["-D", "10"], &[]).rank.timeout, 80.0);
    // -a: 23 sizes.
    assert_eq!(settings(&["-D", "2", "-a"], &[]).rank.timeout, 60.0 + 2.0 * 2.0 * 23.0);
    assert_eq!(settings(&["-n", "10"], &[]).rank.timeout, 60.0);
    assert_eq!(settings(&["-D", "1", "--timeout", "5"], &[]).rank.timeout, 5.0);
}
