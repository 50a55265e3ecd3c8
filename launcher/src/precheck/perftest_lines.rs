//! Published perftest command lines (`tests/fixtures/perftest-lines/published.txt`, each with
//! where it was published) pasted after `meshrun pairwise`: each runs with perftest's meaning
//! (the resolved settings are checked), or is refused in one line that says what to do instead,
//! and then, with what that line says to drop, runs with perftest's meaning.

use std::collections::BTreeMap;
use std::path::PathBuf;

use analysis::pairwise::{Amount, OpName, PairwiseConfig, TestKind};
use clap::{CommandFactory, FromArgMatches};

use super::{rank_command, Job};
use crate::cli::Cli;
use crate::settings::{self, Nics, PairwiseSettings, Resolved};

/// One published line and what it must do.
#[derive(Debug, Default)]
struct Record {
    source: String,
    line: String,
    refused: Option<String>,
    drop: Vec<String>,
    expect: BTreeMap<String, String>,
}

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/perftest-lines/published.txt")
}

fn records(text: &str) -> Vec<Record> {
    let mut out = Vec::new();
    let mut cur: Option<Record> = None;
    for l in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((key, rest)) = l.split_once(' ') else {
            out.extend(cur.take());
            continue;
        };
        let r = cur.get_or_insert_with(Record::default);
        match key {
            "source" => r.source = rest.into(),
            "line" => r.line = rest.into(),
            "refused" => r.refused = Some(rest.into()),
            "drop" => r.drop = rest.split_whitespace().map(String::from).collect(),
            "expect" => {
                for kv in rest.split_whitespace() {
                    let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                    r.expect.insert(k.into(), v.into());
                }
            }
            other => panic!("{}: unknown key `{other}` in `{l}`", fixture().display()),
        }
    }
    out.extend(cur);
    out
}

/// The perftest line as `meshrun pairwise` arguments: the program as `--op`/`--test`, the
/// shell's trailing `&` left out, and the `drop` tokens taken out.
fn translated(line: &str, drop: &[String]) -> Vec<String> {
    let mut words: Vec<&str> = line.split_whitespace().collect();
    if words.last() == Some(&"&") {
        words.pop();
    }
    let program = words.remove(0);
    let (op, kind) = program
        .strip_prefix("ib_")
        .and_then(|p| p.split_once('_'))
        .unwrap_or_else(|| panic!("`{program}` is not a perftest program"));
    let mut args = vec!["pairwise".to_string()];
    if kind == "lat" {
        args.extend(["--test".into(), "lat".into()]);
    }
    args.extend(["--op".into(), op.into()]);
    let mut rest: Vec<String> = words.iter().map(|w| w.to_string()).collect();
    for d in drop {
        let at = rest
            .iter()
            .position(|w| w == d)
            .unwrap_or_else(|| panic!("`{d}` (drop) is not in `{line}`"));
        rest.remove(at);
    }
    args.extend(rest);
    args
}

/// The settings and configuration `args` resolve to, as the ranks resolve them over verbs.
fn resolved(args: &[String]) -> (PairwiseSettings, PairwiseConfig) {
    let argv = std::iter::once("meshrun".to_string()).chain(args.iter().cloned());
    let m = Cli::command().try_get_matches_from(argv).expect("parses");
    let cli = Cli::from_arg_matches(&m).expect("parses");
    let Ok(Resolved::Pairwise(s)) = settings::resolve(cli.command, &m, Nics::Flags, &|_| None) else {
        panic!("`{}` does not resolve to pairwise", args.join(" "));
    };
    let cfg = crate::pairwise_cmd::config(&s, ranks::TransportKind::Verbs).expect("a configuration");
    (s, cfg)
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "none".into(), |x| x.to_string())
}

/// The value of `key` in what `s` and `cfg` resolved to, spelled as the fixture spells it.
fn value_of(key: &str, s: &PairwiseSettings, cfg: &PairwiseConfig) -> String {
    match key {
        "op" => match cfg.op {
            OpName::Write => "write",
            OpName::Read => "read",
            OpName::Send => "send",
        }
        .into(),
        "test" => match cfg.test {
            TestKind::Bw => "bw",
            TestKind::Lat => "lat",
        }
        .into(),
        "size" => cfg.sizes.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(","),
        "all" => (cfg.sizes.len() > 1).to_string(),
        "iters" => opt(match cfg.amount {
            Amount::Iterations(n) => Some(n),
            Amount::Duration(_) => None,
        }),
        "duration" => opt(match cfg.amount {
            Amount::Duration(d) => Some(d),
            Amount::Iterations(_) => None,
        }),
        "tclass" => opt(s.rank.tclass),
        "mtu" => opt(s.rank.mtu),
        "qps" => cfg.qps.to_string(),
        "device" => opt(s.rank.ib_dev.clone()),
        "port" => opt(s.rank.ib_port),
        "gid" => opt(s.rank.gid_index),
        "rdma_cm" => s.rank.rdma_cm.to_string(),
        "use_cuda" => opt(s.use_cuda.clone()),
        "dmabuf" => s.args.use_cuda_dmabuf.to_string(),
        other => panic!("unknown expect key `{other}`"),
    }
}

#[test]
fn published_perftest_lines_run_with_perftest_meaning_or_are_refused_in_one_line() {
    let text = std::fs::read_to_string(fixture()).expect("the fixture");
    let all = records(&text);
    assert!(all.len() >= 10, "{} records", all.len());
    let hosts = vec![("a".to_string(), 1), ("b".to_string(), 1)];
    let job = Job { placement: &hosts };
    for r in &all {
        let what = format!("{} ({})", r.line, r.source);
        assert!(
            !r.source.is_empty() && !r.expect.is_empty(),
            "{what}: a source and an expect"
        );
        let args = translated(&r.line, &[]);
        let got = rank_command(&args, &job);
        match &r.refused {
            Some(want) => {
                let e = got.expect_err(&what);
                assert!(!e.contains('\n'), "{what}: more than one line: {e}");
                assert!(
                    e.contains(want.as_str()),
                    "{what}: refused with\n  {e}\nwhich lacks\n  {want}"
                );
            }
            None => assert_eq!(got, Ok(()), "{what}"),
        }
        let runs = translated(&r.line, &r.drop);
        assert_eq!(rank_command(&runs, &job), Ok(()), "{what} without {:?}", r.drop);
        let (s, cfg) = resolved(&runs);
        for (k, v) in &r.expect {
            assert_eq!(&value_of(k, &s, &cfg), v, "{what}: {k}");
        }
    }
}
