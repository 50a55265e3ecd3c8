//! Where the NIC choices of a run come from. Precedence: the flag, then `MESHRUN_<FLAG>` (clap
//! reads it, see [`with_env`]), then NCCL's own variables, so a check run in a training job's
//! environment uses the NICs and GID the job will:
//! - `NCCL_SOCKET_IFNAME` -> `--tcp-if`,
//! - `NCCL_IB_HCA` -> `--devices` (and `--ib-port` where the entries name one),
//! - `NCCL_IB_GID_INDEX` -> `--gid-index`,
//! - `NCCL_IB_SL` -> `--sl`, `NCCL_IB_TC` -> `--tclass` (the service level and traffic class the
//!   training job's queue pairs use: its lossless class on RoCE),
//! - `NCCL_IB_QPS_PER_CONNECTION` -> pairwise's `-q` (queue pairs per connection, so as many
//!   ECMP paths per pair as the job's connections take).
//!
//! NCCL's lists name NICs by prefix (`mlx5` matches `mlx5_0` and `mlx5_1`), `=` first for exact
//! names, `^` first to exclude the listed ones; `NCCL_IB_HCA` entries may end in `:PORT`. They
//! say which NICs may be used; meshrun gives each local rank one (`--devices`/`--tcp-if` lists:
//! local rank i uses match i mod count), and the run header says so.

use clap::parser::ValueSource;

use crate::cli::{RankArgs, TransportChoice};

/// Where one choice came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The command line.
    Flag,
    /// `MESHRUN_<FLAG>`: the variable and its value.
    Meshrun(String, String),
    /// An NCCL variable and its value, with what it resolved to here.
    Nccl {
        var: String,
        value: String,
        resolved: String,
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
    pub fn header(&self) -> Option<String> {
        if self.items.iter().all(|(_, s)| *s == Source::Flag) {
            return None;
        }
        let parts: Vec<String> = self
            .items
            .iter()
            .map(|(flag, s)| match s {
                Source::Flag => format!("{flag} from the command line"),
                Source::Meshrun(var, value) => format!("{flag} {value} from {var}"),
                Source::Nccl { var, value, resolved } => {
                    format!("{flag} {resolved} from {var}={value}")
                }
            })
            .collect();
        Some(parts.join("; "))
    }
}

/// A parsed NCCL NIC list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameFilter {
    pub exclude: bool,
    pub exact: bool,
    pub entries: Vec<(String, Option<u8>)>,
}

impl NameFilter {
    /// Parse `[^][=]name[:port][,name[:port]...]`; ports only where `ports` (NCCL_IB_HCA).
    pub fn parse(var: &str, spec: &str, ports: bool) -> Result<NameFilter, String> {
        let mut s = spec.trim();
        let exclude = s.starts_with('^');
        if exclude {
            s = &s[1..];
        }
        let exact = s.starts_with('=');
        if exact {
            s = &s[1..];
        }
        let mut entries = Vec::new();
        for e in s.split(',').map(str::trim) {
            let (name, port) = match e.split_once(':') {
                Some((n, p)) if ports => {
                    let port = p
                        .parse::<u8>()
                        .ok()
                        .filter(|&p| p > 0)
                        .ok_or_else(|| format!("{var}={spec}: `{p}` is not a port number (1-255) in `{e}`"))?;
                    (n, Some(port))
                }
                Some(_) => return Err(format!("{var}={spec}: `{e}`: no `:` here (interface names only)")),
                None => (e, None),
            };
            if name.is_empty() {
                return Err(format!(
                    "{var}={spec}: an empty name; expected [^][=]name{}[,...]",
                    if ports { "[:port]" } else { "" }
                ));
            }
            entries.push((name.to_string(), port));
        }
        Ok(NameFilter {
            exclude,
            exact,
            entries,
        })
    }

    /// The entry that matches `name` (by prefix, or exactly under `=`).
    fn hit(&self, name: &str) -> Option<&(String, Option<u8>)> {
        self.entries.iter().find(|(e, _)| {
            if self.exact {
                name == e
            } else {
                name.starts_with(e.as_str())
            }
        })
    }

    /// The names of `names` this list allows, in their order, each with the port its entry named.
    pub fn select<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> Vec<(String, Option<u8>)> {
        names
            .into_iter()
            .filter_map(|n| match (self.hit(n), self.exclude) {
                (Some((_, port)), false) => Some((n.to_string(), *port)),
                (None, true) => Some((n.to_string(), None)),
                _ => None,
            })
            .collect()
    }
}

/// `NCCL_IB_HCA` against the RDMA devices here: the devices for `--devices`, and the port for
/// `--ib-port` where the matching entries name one (one port for all: meshrun takes one).
pub fn resolve_ib_hca(spec: &str, devices: &[String]) -> Result<(Vec<String>, Option<u8>), String> {
    let f = NameFilter::parse("NCCL_IB_HCA", spec, true)?;
    let picked = f.select(devices.iter().map(String::as_str));
    if picked.is_empty() {
        return Err(format!(
            "NCCL_IB_HCA={spec} matches none of the RDMA devices here ({}); fix it or pass --devices",
            if devices.is_empty() {
                "none".to_string()
            } else {
                devices.join(", ")
            }
        ));
    }
    let mut ports: Vec<u8> = picked.iter().filter_map(|(_, p)| *p).collect();
    ports.dedup();
    if ports.len() > 1 {
        return Err(format!(
            "NCCL_IB_HCA={spec} names ports {} of its devices; meshrun uses one port on every device: pass --devices and --ib-port",
            ports.iter().map(u8::to_string).collect::<Vec<_>>().join(" and ")
        ));
    }
    Ok((picked.into_iter().map(|(n, _)| n).collect(), ports.first().copied()))
}

/// `NCCL_SOCKET_IFNAME` against the interfaces here that have an address, for `--tcp-if`.
pub fn resolve_socket_ifname(spec: &str, interfaces: &[String]) -> Result<Vec<String>, String> {
    let f = NameFilter::parse("NCCL_SOCKET_IFNAME", spec, false)?;
    let picked: Vec<String> = f
        .select(interfaces.iter().map(String::as_str))
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    if picked.is_empty() {
        return Err(format!(
            "NCCL_SOCKET_IFNAME={spec} matches none of the interfaces with an address here ({}); fix it or pass --tcp-if",
            interfaces.join(", ")
        ));
    }
    Ok(picked)
}

/// `NCCL_IB_GID_INDEX`: a GID table index.
pub fn parse_gid_index(spec: &str) -> Result<u32, String> {
    spec.trim()
        .parse::<u32>()
        .map_err(|_| format!("NCCL_IB_GID_INDEX={spec}: not a GID index (a whole number, 0 or more)"))
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
            Some(long) if long != "help" && long != "version" => a.env(&*Box::leak(env_name(&long).into_boxed_str())),
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

/// The NCCL variables meshrun reads.
pub const NCCL_VARS: [&str; 6] = [
    "NCCL_SOCKET_IFNAME",
    "NCCL_IB_HCA",
    "NCCL_IB_GID_INDEX",
    "NCCL_IB_SL",
    "NCCL_IB_TC",
    "NCCL_IB_QPS_PER_CONNECTION",
];

/// The most queue pairs per test: NCCL's own limit per connection (NCCL_IB_MAX_QPS).
pub const MAX_QPS: u32 = 128;

/// Variables `meshrun launch` passes on to the ranks when they are set here: every
/// `MESHRUN_<FLAG>`, NCCL's three, and nccl-tests' `NCCL_TESTS_MIN_BW` (mpirun forwards nothing
/// to remote hosts by itself).
pub fn forwarded(vars: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut v: Vec<String> = vars
        .into_iter()
        .filter(|k| {
            k.starts_with("MESHRUN_") || NCCL_VARS.contains(&k.as_str()) || k == crate::coll_cmd::NCCL_TESTS_MIN_BW
        })
        .collect();
    v.sort();
    v
}

/// Names of this host's interfaces with an address.
pub type Interfaces = Box<dyn Fn() -> Result<Vec<String>, String>>;
/// Names of this host's RDMA devices under a sysfs root.
pub type RdmaDevices = Box<dyn Fn(&std::path::Path) -> Result<Vec<String>, String>>;

/// What [`apply`] needs to know of this host: interfaces with an address, RDMA device names.
pub struct Here {
    pub interfaces: Interfaces,
    pub rdma_devices: RdmaDevices,
}

impl Here {
    /// This machine: getifaddrs, and the RDMA devices under the sysfs root.
    pub fn this_host() -> Here {
        Here {
            interfaces: Box::new(|| {
                let mut names: Vec<String> = Vec::new();
                for a in ranks::netif::local_addresses().map_err(|e| e.to_string())? {
                    if !names.contains(&a.name) {
                        names.push(a.name);
                    }
                }
                Ok(names)
            }),
            rdma_devices: Box::new(|root| {
                ranks::devices::discover(root)
                    .map(|d| d.into_iter().map(|d| d.name).collect())
                    .map_err(|e| e.to_string())
            }),
        }
    }
}

/// Fill the NIC choices that neither a flag nor `MESHRUN_<FLAG>` made from NCCL's variables,
/// and put where each choice came from in `args.nic_choice`. The RDMA ones only where verbs may
/// be used (not under `--transport tcp`); under `auto` on a host without RDMA devices,
/// `NCCL_IB_HCA` is left alone (the run falls back to TCP as NCCL does).
pub fn apply(
    args: &mut RankArgs,
    m: &clap::ArgMatches,
    env: &dyn Fn(&str) -> Option<String>,
    here: &Here,
) -> Result<(), String> {
    let mut p = Provenance::default();
    let nccl = |k: &str| env(k).filter(|v| !v.trim().is_empty());
    match clap_source(m, "tcp_if", "tcp-if", || args.tcp_if.join(",")) {
        Some(s) => p.items.push(("--tcp-if", s)),
        None => {
            if let Some(v) = nccl("NCCL_SOCKET_IFNAME") {
                let list = resolve_socket_ifname(&v, &(here.interfaces)()?)?;
                p.items.push((
                    "--tcp-if",
                    Source::Nccl {
                        var: "NCCL_SOCKET_IFNAME".into(),
                        value: v,
                        resolved: list.join(","),
                    },
                ));
                args.tcp_if = list;
            }
        }
    }
    let rdma = args.transport != TransportChoice::Tcp;
    let dev = clap_source(m, "devices", "devices", || args.devices.join(","))
        .map(|s| ("--devices", s))
        .or_else(|| {
            clap_source(m, "ib_dev", "ib-dev", || args.ib_dev.clone().unwrap_or_default()).map(|s| ("--ib-dev", s))
        });
    match dev {
        Some(d) => p.items.push(d),
        None => {
            if let (Some(v), true) = (nccl("NCCL_IB_HCA"), rdma) {
                let devs = (here.rdma_devices)(&args.sysfs_root)
                    .map_err(|e| format!("NCCL_IB_HCA={v}: cannot list RDMA devices: {e}"))?;
                if !(devs.is_empty() && args.transport == TransportChoice::Auto) {
                    let (list, port) = resolve_ib_hca(&v, &devs)?;
                    let mut resolved = list.join(",");
                    if let (Some(port), None) = (port, args.ib_port) {
                        args.ib_port = Some(port);
                        resolved.push_str(&format!(" port {port}"));
                    }
                    p.items.push((
                        "--devices",
                        Source::Nccl {
                            var: "NCCL_IB_HCA".into(),
                            value: v,
                            resolved,
                        },
                    ));
                    args.devices = list;
                }
            }
        }
    }
    let gid = args.gid_index;
    match clap_source(m, "gid_index", "gid-index", || {
        gid.map(|g| g.to_string()).unwrap_or_default()
    }) {
        Some(s) => p.items.push(("--gid-index", s)),
        None => {
            if let (Some(v), true) = (nccl("NCCL_IB_GID_INDEX"), rdma) {
                let g = parse_gid_index(&v)?;
                p.items.push((
                    "--gid-index",
                    Source::Nccl {
                        var: "NCCL_IB_GID_INDEX".into(),
                        value: v,
                        resolved: g.to_string(),
                    },
                ));
                args.gid_index = Some(g);
            }
        }
    }
    // Service level and traffic class: NCCL_IB_SL (0-15) and NCCL_IB_TC (0-255).
    let nccl_small = |(flag, id): (&'static str, &str), var: &str, max: u8, given: Option<u8>, p: &mut Provenance| {
        if let Some(s) = clap_source(m, id, id, || given.map(|v| v.to_string()).unwrap_or_default()) {
            p.items.push((flag, s));
            return Ok::<_, String>(given);
        }
        let (Some(v), true) = (nccl(var), rdma) else {
            return Ok(given);
        };
        let n = parse_small(&v, var, max)?;
        p.items.push((
            flag,
            Source::Nccl {
                var: var.into(),
                value: v,
                resolved: n.to_string(),
            },
        ));
        Ok(Some(n))
    };
    args.sl = nccl_small(("--sl", "sl"), "NCCL_IB_SL", 15, args.sl, &mut p)?;
    args.tclass = nccl_small(("--tclass", "tclass"), "NCCL_IB_TC", 255, args.tclass, &mut p)?;
    args.nic_choice = p.header();
    Ok(())
}

/// Pairwise's queue pairs per test: `-q`/`--qp` (or `MESHRUN_QP`, `source` says which), else
/// `NCCL_IB_QPS_PER_CONNECTION` over RDMA, else 1; with where it came from when not the flag,
/// appended to the run's NIC-choice header line `header`. (The flag's range is checked with
/// the other flags, in `pairwise_cmd::config`.)
pub fn qps(
    given: Option<u32>,
    source: Option<Source>,
    rdma: bool,
    env: &dyn Fn(&str) -> Option<String>,
    header: &mut Option<String>,
) -> Result<u32, String> {
    let var = "NCCL_IB_QPS_PER_CONNECTION";
    let (n, from) = match (given, source) {
        (Some(n), s) => (n, s.filter(|s| *s != Source::Flag)),
        (None, _) => match env(var).filter(|v| !v.trim().is_empty() && rdma) {
            Some(v) => {
                let n = v
                    .trim()
                    .parse::<u32>()
                    .ok()
                    .filter(|n| (1..=MAX_QPS).contains(n))
                    .ok_or_else(|| format!("{var}={v}: expected a whole number from 1 to {MAX_QPS}"))?;
                let resolved = n.to_string();
                (
                    n,
                    Some(Source::Nccl {
                        var: var.into(),
                        value: v,
                        resolved,
                    }),
                )
            }
            None => return Ok(1),
        },
    };
    if let Some(s) = from {
        let line = Provenance { items: vec![("-q", s)] }.header().unwrap_or_default();
        *header = Some(match header.take() {
            Some(h) => format!("{h}; {line}"),
            None => line,
        });
    }
    Ok(n)
}

/// `NCCL_IB_SL` / `NCCL_IB_TC`: a whole number from 0 to `max`.
pub fn parse_small(spec: &str, var: &str, max: u8) -> Result<u8, String> {
    spec.trim()
        .parse::<u8>()
        .ok()
        .filter(|&n| n <= max)
        .ok_or_else(|| format!("{var}={spec}: expected a whole number from 0 to {max}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(xs: &[&str]) -> Vec<String> {
        xs.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn queue_pairs_from_the_flag_meshrun_qp_or_nccl() {
        let env = |kv: &'static [(&'static str, &'static str)]| {
            move |k: &str| kv.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
        };
        let nccl = env(&[("NCCL_IB_QPS_PER_CONNECTION", "4")]);
        // Nothing given, nothing set: one.
        let mut h = None;
        assert_eq!(qps(None, None, true, &env(&[]), &mut h), Ok(1));
        assert_eq!(h, None);
        // NCCL's variable over RDMA, said in the header after what is there.
        let mut h = Some("--tclass 106 from NCCL_IB_TC=106".to_string());
        assert_eq!(qps(None, None, true, &nccl, &mut h), Ok(4));
        assert_eq!(
            h.as_deref(),
            Some("--tclass 106 from NCCL_IB_TC=106; -q 4 from NCCL_IB_QPS_PER_CONNECTION=4")
        );
        // The flag wins and says nothing; MESHRUN_QP is named.
        let mut h = None;
        assert_eq!(qps(Some(2), Some(Source::Flag), true, &nccl, &mut h), Ok(2));
        assert_eq!(h, None);
        let m = Some(Source::Meshrun("MESHRUN_QP".into(), "8".into()));
        assert_eq!(qps(Some(8), m, true, &nccl, &mut h), Ok(8));
        assert_eq!(h.as_deref(), Some("-q 8 from MESHRUN_QP"));
        // Over TCP NCCL's IB variable does not apply.
        let mut h = None;
        assert_eq!(qps(None, None, false, &nccl, &mut h), Ok(1));
        assert_eq!(h, None);
        // A bad value is one line naming the variable and the range.
        for bad in ["0", "129", "four"] {
            let e = |k: &str| (k == "NCCL_IB_QPS_PER_CONNECTION").then(|| bad.to_string());
            assert_eq!(
                qps(None, None, true, &e, &mut None),
                Err(format!(
                    "NCCL_IB_QPS_PER_CONNECTION={bad}: expected a whole number from 1 to 128"
                ))
            );
        }
    }

    #[test]
    fn nccl_lists_by_prefix_exact_and_exclude() {
        let devs = v(&["mlx5_0", "mlx5_1", "mlx5_10", "rxe0"]);
        // Prefix: `mlx5_1` matches mlx5_1 and mlx5_10, as NCCL's own matching does.
        assert_eq!(
            resolve_ib_hca("mlx5_1", &devs).unwrap(),
            (v(&["mlx5_1", "mlx5_10"]), None)
        );
        assert_eq!(resolve_ib_hca("=mlx5_1", &devs).unwrap(), (v(&["mlx5_1"]), None));
        assert_eq!(
            resolve_ib_hca("mlx5", &devs).unwrap().0,
            v(&["mlx5_0", "mlx5_1", "mlx5_10"])
        );
        assert_eq!(resolve_ib_hca("^mlx5", &devs).unwrap().0, v(&["rxe0"]));
        assert_eq!(
            resolve_ib_hca("^=mlx5_1", &devs).unwrap().0,
            v(&["mlx5_0", "mlx5_10", "rxe0"])
        );
        // Ports: one for all, or an error naming both.
        assert_eq!(
            resolve_ib_hca("mlx5_0:1,mlx5_1:1", &devs).unwrap(),
            (v(&["mlx5_0", "mlx5_1", "mlx5_10"]), Some(1))
        );
        let e = resolve_ib_hca("=mlx5_0:1,mlx5_1:2", &devs).unwrap_err();
        assert!(e.contains("ports 1 and 2") && e.contains("--ib-port"), "{e}");
        let e = resolve_ib_hca("mlx4", &devs).unwrap_err();
        assert_eq!(
            e,
            "NCCL_IB_HCA=mlx4 matches none of the RDMA devices here (mlx5_0, mlx5_1, mlx5_10, rxe0); fix it or pass --devices"
        );
        assert!(resolve_ib_hca("mlx5_0:x", &devs)
            .unwrap_err()
            .contains("`x` is not a port number"));
        assert!(resolve_ib_hca("mlx5_0,,", &devs).unwrap_err().contains("an empty name"));
    }

    #[test]
    fn socket_ifname_as_nccl_reads_it() {
        let ifs = v(&["docker0", "eth0", "eth1", "ib0", "lo"]);
        assert_eq!(resolve_socket_ifname("eth", &ifs).unwrap(), v(&["eth0", "eth1"]));
        assert_eq!(resolve_socket_ifname("=eth1", &ifs).unwrap(), v(&["eth1"]));
        assert_eq!(
            resolve_socket_ifname("^docker,lo", &ifs).unwrap(),
            v(&["eth0", "eth1", "ib0"])
        );
        assert_eq!(resolve_socket_ifname("ib,eth0", &ifs).unwrap(), v(&["eth0", "ib0"]));
        assert!(resolve_socket_ifname("bond", &ifs)
            .unwrap_err()
            .contains("matches none"));
        assert!(resolve_socket_ifname("eth0:1", &ifs)
            .unwrap_err()
            .contains("no `:` here"));
        assert_eq!(parse_gid_index(" 3").unwrap(), 3);
        assert!(parse_gid_index("-1").unwrap_err().starts_with("NCCL_IB_GID_INDEX=-1: "));
    }

    /// The rank arguments and matches of `meshrun pairwise ARGS` (MESHRUN_ variables of this
    /// process are not used: the test sets none).
    fn pairwise(args: &[&str]) -> (RankArgs, clap::ArgMatches) {
        use clap::{CommandFactory, FromArgMatches};
        let argv = std::iter::once("meshrun")
            .chain(std::iter::once("pairwise"))
            .chain(args.iter().copied());
        let m = with_env(crate::cli::Cli::command()).get_matches_from(argv);
        let cli = crate::cli::Cli::from_arg_matches(&m).unwrap();
        let crate::cli::Command::Pairwise(a) = cli.command else {
            unreachable!()
        };
        let sub = m.subcommand_matches("pairwise").unwrap().clone();
        (a.rank, sub)
    }

    fn here() -> Here {
        Here {
            interfaces: Box::new(|| Ok(v(&["lo", "eth0", "eth1"]))),
            rdma_devices: Box::new(|_| Ok(v(&["mlx5_0", "mlx5_1", "mlx5_bond_0"]))),
        }
    }

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
    }

    #[test]
    fn service_level_and_traffic_class_from_nccl_or_the_flags() {
        let e = env(&[("NCCL_IB_SL", "3"), ("NCCL_IB_TC", "106")]);
        let (mut a, m) = pairwise(&[]);
        apply(&mut a, &m, &e, &here()).unwrap();
        assert_eq!((a.sl, a.tclass), (Some(3), Some(106)));
        assert_eq!(
            a.nic_choice.as_deref(),
            Some("--sl 3 from NCCL_IB_SL=3; --tclass 106 from NCCL_IB_TC=106")
        );
        let (mut a, m) = pairwise(&["--tclass", "104"]);
        apply(&mut a, &m, &e, &here()).unwrap();
        assert_eq!((a.sl, a.tclass), (Some(3), Some(104)), "the flag wins");
        let err = apply(
            &mut pairwise(&[]).0,
            &pairwise(&[]).1,
            &env(&[("NCCL_IB_SL", "16")]),
            &here(),
        )
        .unwrap_err();
        assert_eq!(err, "NCCL_IB_SL=16: expected a whole number from 0 to 15");
        let (mut a, m) = pairwise(&["--transport", "tcp"]);
        apply(&mut a, &m, &env(&[("NCCL_IB_TC", "x")]), &here()).unwrap();
        assert_eq!(a.tclass, None, "over TCP they do not apply");
    }

    #[test]
    fn nccl_fills_what_the_flags_leave_open() {
        let e = env(&[
            ("NCCL_SOCKET_IFNAME", "eth"),
            ("NCCL_IB_HCA", "=mlx5_0:1,mlx5_1:1"),
            ("NCCL_IB_GID_INDEX", "3"),
        ]);
        let (mut a, m) = pairwise(&[]);
        apply(&mut a, &m, &e, &here()).unwrap();
        assert_eq!(a.tcp_if, v(&["eth0", "eth1"]));
        assert_eq!(
            (a.devices.clone(), a.ib_port, a.gid_index),
            (v(&["mlx5_0", "mlx5_1"]), Some(1), Some(3))
        );
        assert_eq!(
            a.nic_choice.as_deref(),
            Some(
                "--tcp-if eth0,eth1 from NCCL_SOCKET_IFNAME=eth; --devices mlx5_0,mlx5_1 port 1 from \
                 NCCL_IB_HCA==mlx5_0:1,mlx5_1:1; --gid-index 3 from NCCL_IB_GID_INDEX=3"
            )
        );
        // Flags win, and say so; NCCL fills the rest.
        let (mut a, m) = pairwise(&["--tcp-if", "lo", "--ib-dev", "mlx5_1", "--gid-index", "1"]);
        apply(&mut a, &m, &e, &here()).unwrap();
        assert_eq!(
            (a.tcp_if.clone(), a.devices.len(), a.gid_index),
            (v(&["lo"]), 0, Some(1))
        );
        assert_eq!(a.nic_choice, None, "all from the command line: the header is unchanged");
        // Over TCP the RDMA variables do not apply (a bad one is no error there).
        let bad = env(&[("NCCL_IB_HCA", "mlx4"), ("NCCL_IB_GID_INDEX", "x")]);
        let (mut a, m) = pairwise(&["--transport", "tcp"]);
        apply(&mut a, &m, &bad, &here()).unwrap();
        assert!(a.devices.is_empty() && a.gid_index.is_none() && a.nic_choice.is_none());
        // Where verbs may be used, they are errors that say what to fix.
        let (mut a, m) = pairwise(&[]);
        let err = apply(&mut a, &m, &bad, &here()).unwrap_err();
        assert!(
            err.starts_with("NCCL_IB_HCA=mlx4 matches none of the RDMA devices here"),
            "{err}"
        );
        // auto on a host without RDMA devices leaves NCCL_IB_HCA alone (TCP it will be).
        let none = Here {
            interfaces: Box::new(|| Ok(v(&["lo"]))),
            rdma_devices: Box::new(|_| Ok(Vec::new())),
        };
        let (mut a, m) = pairwise(&[]);
        apply(&mut a, &m, &env(&[("NCCL_IB_HCA", "mlx5")]), &none).unwrap();
        assert!(a.devices.is_empty());
        let (mut a, m) = pairwise(&["--transport", "verbs"]);
        assert!(apply(&mut a, &m, &env(&[("NCCL_IB_HCA", "mlx5")]), &none)
            .unwrap_err()
            .contains("(none)"));
    }

    #[test]
    fn env_names_and_header() {
        assert_eq!(env_name("tcp-if"), "MESHRUN_TCP_IF");
        assert_eq!(env_name("gid-index"), "MESHRUN_GID_INDEX");
        let p = Provenance {
            items: vec![("--tcp-if", Source::Flag)],
        };
        assert_eq!(p.header(), None);
        let p = Provenance {
            items: vec![
                ("--tcp-if", Source::Flag),
                (
                    "--devices",
                    Source::Nccl {
                        var: "NCCL_IB_HCA".into(),
                        value: "mlx5".into(),
                        resolved: "mlx5_0,mlx5_1".into(),
                    },
                ),
                ("--gid-index", Source::Meshrun("MESHRUN_GID_INDEX".into(), "3".into())),
            ],
        };
        assert_eq!(
            p.header().unwrap(),
            "--tcp-if from the command line; --devices mlx5_0,mlx5_1 from NCCL_IB_HCA=mlx5; --gid-index 3 from MESHRUN_GID_INDEX"
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
            "HOME",
        ];
        assert_eq!(
            forwarded(vars.iter().map(|s| s.to_string())),
            ["MESHRUN_GID_INDEX", "NCCL_IB_HCA", "NCCL_TESTS_MIN_BW"]
        );
    }
}
