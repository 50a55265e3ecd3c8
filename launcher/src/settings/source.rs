//! Where a value came from (the command line, `MESHRUN_<FLAG>`, an NCCL variable), the run
//! header's line that says it, and `MESHRUN_<FLAG>` itself: every flag read from its variable
//! by clap, and the variables `meshrun launch` passes on to the ranks.

use clap::parser::ValueSource;

use super::busbw::NCCL_TESTS_MIN_BW;
use super::nccl::NCCL_VARS;
use super::p2p::NCCL_P2P_DISABLE;

/// Where one choice came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The command line.
    Flag,
    /// `MESHRUN_<FLAG>`: the variable and its value.
    Meshrun(String, String),
    /// An NCCL variable and its value, with what it resolved to here, and the NCCL
    /// configuration file that set it (None: the environment).
    Nccl {
        var: String,
        value: String,
        resolved: String,
        file: Option<String>,
    },
}

/// The provenance of the NIC choices that did not come from defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Provenance {
    pub items: Vec<(&'static str, Source)>,
}

impl Provenance {
    /// One line for run headers, or None where every choice is a flag or a default (the header
    /// is then as it always was).
    pub fn line(&self) -> Option<String> {
        if self.items.iter().all(|(_, s)| *s == Source::Flag) {
            return None;
        }
        let parts: Vec<String> = self
            .items
            .iter()
            .map(|(flag, s)| match s {
                Source::Flag => format!("{flag} from the command line"),
                Source::Meshrun(var, value) => format!("{flag} {value} from {var}"),
                Source::Nccl {
                    var,
                    value,
                    resolved,
                    file: None,
                } => format!("{flag} {resolved} from {var}={value}"),
                Source::Nccl {
                    var,
                    value,
                    resolved,
                    file: Some(f),
                } => format!("{flag} {resolved} from {var}={value} in {f}"),
            })
            .collect();
        Some(parts.join("; "))
    }
}

/// The environment variable clap reads for a flag: `--tcp-if` -> `MESHRUN_TCP_IF`.
pub fn env_name(long: &str) -> String {
    format!("MESHRUN_{}", long.to_ascii_uppercase().replace('-', "_"))
}

/// Every flag of every subcommand also read from `MESHRUN_<FLAG>` (the flag wins), except
/// `--help`/`--version` and the arguments after `--`.
pub fn with_env(cmd: clap::Command) -> clap::Command {
    let cmd = cmd.mut_args(|a| {
        match a.get_long().map(str::to_string) {
            // clap keeps a `&'static str`: one small string per flag, once per process.
            Some(long) if long != "help" && long != "version" && !crate::cli::perftest::is_refused(&a) => {
                a.env(&*Box::leak(env_name(&long).into_boxed_str()))
            }
            _ => a,
        }
    });
    let names: Vec<String> = cmd.get_subcommands().map(|s| s.get_name().to_string()).collect();
    names.iter().fold(cmd, |c, n| c.mut_subcommand(n, with_env))
}

/// Sources of the three NIC choices from clap's matches: `Flag` for the command line, `Meshrun`
/// for its variable; None where clap took no value (the default, or absent).
pub fn clap_source(m: &clap::ArgMatches, id: &str, long: &str, value: impl Fn() -> String) -> Option<Source> {
    match m.value_source(id)? {
        ValueSource::CommandLine => Some(Source::Flag),
        ValueSource::EnvVariable => Some(Source::Meshrun(env_name(long), value())),
        _ => None,
    }
}

/// Variables `meshrun launch` passes on to the ranks when they are set here: every
/// `MESHRUN_<FLAG>`, NCCL's NIC variables and `NCCL_CONF_FILE` (the file each rank then reads on
/// its own host, as NCCL would), and nccl-tests' `NCCL_TESTS_MIN_BW` (mpirun forwards nothing
/// to remote hosts by itself), and `NCCL_P2P_DISABLE` (a GPU run's path within nodes).
pub fn forwarded(vars: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut v: Vec<String> = vars
        .into_iter()
        .filter(|k| {
            k.starts_with("MESHRUN_")
                || NCCL_VARS.contains(&k.as_str())
                || k == "NCCL_CONF_FILE"
                || k == NCCL_TESTS_MIN_BW
                || k == NCCL_P2P_DISABLE
        })
        .collect();
    v.sort();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_names_and_header() {
        assert_eq!(env_name("tcp-if"), "MESHRUN_TCP_IF");
        assert_eq!(env_name("gid-index"), "MESHRUN_GID_INDEX");
        let p = Provenance {
            items: vec![("--tcp-if", Source::Flag)],
        };
        assert_eq!(p.line(), None);
        let p = Provenance {
            items: vec![
                ("--tcp-if", Source::Flag),
                (
                    "--devices",
                    Source::Nccl {
                        var: "NCCL_IB_HCA".into(),
                        value: "mlx5".into(),
                        resolved: "mlx5_0,mlx5_1".into(),
                        file: None,
                    },
                ),
                ("--gid-index", Source::Meshrun("MESHRUN_GID_INDEX".into(), "3".into())),
                (
                    "--tclass",
                    Source::Nccl {
                        var: "NCCL_IB_TC".into(),
                        value: "106".into(),
                        resolved: "106".into(),
                        file: Some("/etc/nccl.conf".into()),
                    },
                ),
            ],
        };
        assert_eq!(
            p.line().unwrap(),
            "--tcp-if from the command line; --devices mlx5_0,mlx5_1 from NCCL_IB_HCA=mlx5; --gid-index 3 from \
             MESHRUN_GID_INDEX; --tclass 106 from NCCL_IB_TC=106 in /etc/nccl.conf"
        );
    }

    #[test]
    fn launch_forwards_meshrun_nccl_and_the_busbw_bar() {
        let vars = [
            "PATH",
            "MESHRUN_GID_INDEX",
            "NCCL_IB_HCA",
            "NCCL_TESTS_MIN_BW",
            "NCCL_DEBUG",
            "NCCL_CONF_FILE",
            "HOME",
        ];
        assert_eq!(
            forwarded(vars.iter().map(|s| s.to_string())),
            [
                "MESHRUN_GID_INDEX",
                "NCCL_CONF_FILE",
                "NCCL_IB_HCA",
                "NCCL_TESTS_MIN_BW"
            ]
        );
    }
}
