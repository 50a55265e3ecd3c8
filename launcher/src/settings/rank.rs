//! The options every rank command shares, resolved: the flags, then `MESHRUN_<FLAG>` (which
//! clap reads), then NCCL's NIC variables for what neither set, with the run header's line on
//! where each NIC choice came from.

use std::path::PathBuf;

use super::nccl::{parse_gid_index, parse_small, resolve_ib_hca, resolve_socket_ifname};
use super::nccl_conf::{lookup, NcclConf};
use super::source::{clap_source, Provenance, Source};
use crate::cli::{RankArgs, TransportChoice};

/// The options every rank command shares, as the commands use them: the flags (`crate::cli`'s
/// [`RankArgs`]) with the NIC choices NCCL's variables made filled in, and where they came from.
#[derive(Debug, Clone)]
pub struct Rank {
    /// The mesh's transport: verbs, tcp or auto.
    pub transport: TransportChoice,
    /// `--ib-dev` (or perftest's `-d`).
    pub ib_dev: Option<String>,
    /// One RDMA device per local rank: `--devices`, or what `NCCL_IB_HCA` matched here.
    pub devices: Vec<String>,
    /// `--ib-port` (or perftest's `-i`), or the port `NCCL_IB_HCA` named.
    pub ib_port: Option<u8>,
    /// `--gid-index` (or perftest's `-x`), or `NCCL_IB_GID_INDEX`.
    pub gid_index: Option<u32>,
    /// `--sl`, or `NCCL_IB_SL`.
    pub sl: Option<u8>,
    /// `--tclass`, or `NCCL_IB_TC`.
    pub tclass: Option<u8>,
    /// `--rdma-cm` (or perftest's `-R`).
    pub rdma_cm: bool,
    /// `--sysfs-root`.
    pub sysfs_root: PathBuf,
    /// One interface or CIDR per local rank: `--tcp-if`, or what `NCCL_SOCKET_IFNAME` matched here.
    pub tcp_if: Vec<String>,
    /// `--timeout` (`-T` but on pairwise): the deadline of any one wait, seconds.
    pub timeout: f64,
    /// The RDMA queue pairs' path MTU in bytes (pairwise's `-m`, as perftest's; None: the port's
    /// active MTU).
    pub mtu: Option<u32>,
    /// `--verbose`.
    pub verbose: bool,
    /// Where the NIC choices came from, for the run header (None: all flags or defaults).
    pub nic_choice: Option<String>,
    /// Queue pairs per peer of the verbs mesh (the collectives' -q; 0 or 1: one).
    pub lanes: usize,
    /// `pairwise --rails auto`: each rank's NIC is found on its host when it joins the job
    /// (`crate::rails_auto`), the lists above narrowing what is found.
    pub rails_auto: bool,
}

/// Names of this host's interfaces with an address.
pub type Interfaces = Box<dyn Fn() -> Result<Vec<String>, String>>;
/// Names of this host's RDMA devices under a sysfs root.
pub type RdmaDevices = Box<dyn Fn(&std::path::Path) -> Result<Vec<String>, String>>;

/// What [`Rank::resolve`] needs to know of this host: interfaces with an address, RDMA device
/// names, NCCL's configuration files.
pub struct Here {
    pub interfaces: Interfaces,
    pub rdma_devices: RdmaDevices,
    pub nccl_conf: NcclConf,
}

impl Here {
    /// This machine: getifaddrs, the RDMA devices under the sysfs root, and the NCCL
    /// configuration files NCCL would read here.
    pub fn detect() -> Here {
        let env = |k: &str| std::env::var(k).ok();
        let home = super::nccl_conf::home_dir();
        Here {
            nccl_conf: NcclConf::load(
                &env,
                home.as_deref(),
                std::path::Path::new(super::nccl_conf::SYSTEM_FILE),
            ),
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

impl Rank {
    /// The flags as given, nothing filled in from NCCL's variables (`meshrun launch`'s check of
    /// the rank command: the NICs here are not the ranks').
    pub fn from_flags(a: &RankArgs) -> Rank {
        Rank {
            transport: a.transport,
            ib_dev: a.ib_dev.clone(),
            devices: a.devices.clone(),
            ib_port: a.ib_port,
            gid_index: a.gid_index,
            sl: a.sl,
            tclass: a.tclass,
            rdma_cm: a.rdma_cm,
            sysfs_root: a.sysfs_root.clone(),
            tcp_if: a.tcp_if.clone(),
            timeout: a.timeout,
            mtu: None,
            verbose: a.verbose,
            nic_choice: None,
            lanes: 0,
            rails_auto: false,
        }
    }

    /// The flags `args` (with their matches `m`), and the NIC choices that neither a flag nor
    /// `MESHRUN_<FLAG>` made filled from NCCL's variables, with where each choice came from in
    /// `nic_choice`. The RDMA ones only where verbs may be used (not under `--transport tcp`);
    /// under `auto` on a host without RDMA devices, `NCCL_IB_HCA` is left alone (the run falls
    /// back to TCP as NCCL does).
    pub fn resolve(
        args: &RankArgs,
        m: &clap::ArgMatches,
        env: &dyn Fn(&str) -> Option<String>,
        here: &Here,
    ) -> Result<Rank, String> {
        let mut r = Rank::from_flags(args);
        let mut p = Provenance::default();
        fill(&mut r, &Inputs { args, m, env, here }, &mut p)?;
        r.nic_choice = p.line();
        Ok(r)
    }
}

/// What [`Rank::resolve`] reads: the flags as given, their matches, the environment, this host.
struct Inputs<'a> {
    args: &'a RankArgs,
    m: &'a clap::ArgMatches,
    env: &'a dyn Fn(&str) -> Option<String>,
    here: &'a Here,
}

impl Inputs<'_> {
    /// Where clap took flag `id` (`--long`) from, with the value it has (`value`), if anywhere.
    fn flag(&self, id: &str, long: &str, value: impl Fn() -> String) -> Option<Source> {
        clap_source(self.m, id, long, value)
    }

    /// NCCL's `var` where it is set (in the environment, else in NCCL's configuration files),
    /// not empty, and applies: an RDMA one (`rdma`) not under `--transport tcp`. With the file
    /// that set it.
    fn nccl(&self, var: &str, rdma: bool) -> Option<NcclValue> {
        let applies = !rdma || self.args.transport != TransportChoice::Tcp;
        lookup(self.env, &self.here.nccl_conf, var)
            .filter(|(v, _)| applies && !v.trim().is_empty())
            .map(|(value, file)| NcclValue { value, file })
    }
}

/// An NCCL variable's value, and the configuration file that set it (None: the environment).
struct NcclValue {
    value: String,
    file: Option<std::path::PathBuf>,
}

impl NcclValue {
    /// `error` about this value, with the file that set it where one did.
    fn located(&self, error: String) -> String {
        match &self.file {
            Some(f) => format!("{error} (set in {})", f.display()),
            None => error,
        }
    }
}

/// An NCCL variable's value, where it was set, and what it resolved to here.
fn from_nccl(var: &str, v: NcclValue, resolved: String) -> Source {
    Source::Nccl {
        var: var.into(),
        value: v.value,
        resolved,
        file: v.file.map(|f| f.display().to_string()),
    }
}

/// [`Rank::resolve`]'s work: what NCCL's variables fill in `r`, each choice's source in `p`.
fn fill(r: &mut Rank, i: &Inputs<'_>, p: &mut Provenance) -> Result<(), String> {
    tcp_if(r, i, p)?;
    devices(r, i, p)?;
    gid_index(r, i, p)?;
    // Service level and traffic class: NCCL_IB_SL (0-15) and NCCL_IB_TC (0-255).
    r.sl = small(i, ("--sl", "sl"), "NCCL_IB_SL", 15, i.args.sl, p)?;
    r.tclass = small(i, ("--tclass", "tclass"), "NCCL_IB_TC", 255, i.args.tclass, p)?;
    Ok(())
}

/// `--tcp-if`, else `NCCL_SOCKET_IFNAME` against this host's interfaces.
fn tcp_if(r: &mut Rank, i: &Inputs<'_>, p: &mut Provenance) -> Result<(), String> {
    if let Some(s) = i.flag("tcp_if", "tcp-if", || i.args.tcp_if.join(",")) {
        p.items.push(("--tcp-if", s));
        return Ok(());
    }
    if let Some(v) = i.nccl("NCCL_SOCKET_IFNAME", false) {
        let list = resolve_socket_ifname(&v.value, &(i.here.interfaces)()?).map_err(|e| v.located(e))?;
        p.items
            .push(("--tcp-if", from_nccl("NCCL_SOCKET_IFNAME", v, list.join(","))));
        r.tcp_if = list;
    }
    Ok(())
}

/// `--devices` or `--ib-dev`, else `NCCL_IB_HCA` against this host's RDMA devices (and the port
/// its entries name, where `--ib-port` did not).
fn devices(r: &mut Rank, i: &Inputs<'_>, p: &mut Provenance) -> Result<(), String> {
    let a = i.args;
    let dev = i
        .flag("devices", "devices", || a.devices.join(","))
        .map(|s| ("--devices", s))
        .or_else(|| {
            i.flag("ib_dev", "ib-dev", || a.ib_dev.clone().unwrap_or_default())
                .map(|s| ("--ib-dev", s))
        });
    if let Some(d) = dev {
        p.items.push(d);
        return Ok(());
    }
    let Some(v) = i.nccl("NCCL_IB_HCA", true) else {
        return Ok(());
    };
    let devs = (i.here.rdma_devices)(&a.sysfs_root)
        .map_err(|e| format!("NCCL_IB_HCA={}: cannot list RDMA devices: {e}", v.value))?;
    if devs.is_empty() && a.transport == TransportChoice::Auto {
        return Ok(());
    }
    let (list, port) = resolve_ib_hca(&v.value, &devs).map_err(|e| v.located(e))?;
    let mut resolved = list.join(",");
    if let (Some(port), None) = (port, a.ib_port) {
        r.ib_port = Some(port);
        resolved.push_str(&format!(" port {port}"));
    }
    p.items.push(("--devices", from_nccl("NCCL_IB_HCA", v, resolved)));
    r.devices = list;
    Ok(())
}

/// `--gid-index`, else `NCCL_IB_GID_INDEX`.
fn gid_index(r: &mut Rank, i: &Inputs<'_>, p: &mut Provenance) -> Result<(), String> {
    let gid = i.args.gid_index;
    if let Some(s) = i.flag("gid_index", "gid-index", || {
        gid.map(|g| g.to_string()).unwrap_or_default()
    }) {
        p.items.push(("--gid-index", s));
        return Ok(());
    }
    if let Some(v) = i.nccl("NCCL_IB_GID_INDEX", true) {
        let g = parse_gid_index(&v.value).map_err(|e| v.located(e))?;
        p.items
            .push(("--gid-index", from_nccl("NCCL_IB_GID_INDEX", v, g.to_string())));
        r.gid_index = Some(g);
    }
    Ok(())
}

/// A small number's flag `(flag, id)` given as `given`, else NCCL's `var` (0 to `max`).
fn small(
    i: &Inputs<'_>,
    (flag, id): (&'static str, &str),
    var: &str,
    max: u8,
    given: Option<u8>,
    p: &mut Provenance,
) -> Result<Option<u8>, String> {
    if let Some(s) = i.flag(id, id, || given.map(|v| v.to_string()).unwrap_or_default()) {
        p.items.push((flag, s));
        return Ok(given);
    }
    let Some(v) = i.nccl(var, true) else {
        return Ok(given);
    };
    let n = parse_small(&v.value, var, max).map_err(|e| v.located(e))?;
    p.items.push((flag, from_nccl(var, v, n.to_string())));
    Ok(Some(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(xs: &[&str]) -> Vec<String> {
        xs.iter().map(|s| s.to_string()).collect()
    }

    /// The rank arguments and matches of `meshrun pairwise ARGS` (MESHRUN_ variables of this
    /// process are not used: the test sets none).
    fn pairwise(args: &[&str]) -> (RankArgs, clap::ArgMatches) {
        use clap::{CommandFactory, FromArgMatches};
        let argv = std::iter::once("meshrun")
            .chain(std::iter::once("pairwise"))
            .chain(args.iter().copied());
        let m = crate::settings::source::with_env(crate::cli::Cli::command()).get_matches_from(argv);
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
            nccl_conf: NcclConf::default(),
        }
    }

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
    }

    #[test]
    fn service_level_and_traffic_class_from_nccl_or_the_flags() {
        let e = env(&[("NCCL_IB_SL", "3"), ("NCCL_IB_TC", "106")]);
        let (a, m) = pairwise(&[]);
        let a = Rank::resolve(&a, &m, &e, &here()).unwrap();
        assert_eq!((a.sl, a.tclass), (Some(3), Some(106)));
        assert_eq!(
            a.nic_choice.as_deref(),
            Some("--sl 3 from NCCL_IB_SL=3; --tclass 106 from NCCL_IB_TC=106")
        );
        let (a, m) = pairwise(&["--tclass", "104"]);
        let a = Rank::resolve(&a, &m, &e, &here()).unwrap();
        assert_eq!((a.sl, a.tclass), (Some(3), Some(104)), "the flag wins");
        let err = Rank::resolve(
            &pairwise(&[]).0,
            &pairwise(&[]).1,
            &env(&[("NCCL_IB_SL", "16")]),
            &here(),
        )
        .unwrap_err();
        assert_eq!(err, "NCCL_IB_SL=16: expected a whole number from 0 to 15");
        let (a, m) = pairwise(&["--transport", "tcp"]);
        let a = Rank::resolve(&a, &m, &env(&[("NCCL_IB_TC", "x")]), &here()).unwrap();
        assert_eq!(a.tclass, None, "over TCP they do not apply");
    }

    #[test]
    fn nccl_fills_what_the_flags_leave_open() {
        let e = env(&[
            ("NCCL_SOCKET_IFNAME", "eth"),
            ("NCCL_IB_HCA", "=mlx5_0:1,mlx5_1:1"),
            ("NCCL_IB_GID_INDEX", "3"),
        ]);
        let (a, m) = pairwise(&[]);
        let a = Rank::resolve(&a, &m, &e, &here()).unwrap();
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
        let (a, m) = pairwise(&["--tcp-if", "lo", "--ib-dev", "mlx5_1", "--gid-index", "1"]);
        let a = Rank::resolve(&a, &m, &e, &here()).unwrap();
        assert_eq!(
            (a.tcp_if.clone(), a.devices.len(), a.gid_index),
            (v(&["lo"]), 0, Some(1))
        );
        assert_eq!(a.nic_choice, None, "all from the command line: the header is unchanged");
        // Over TCP the RDMA variables do not apply (a bad one is no error there).
        let bad = env(&[("NCCL_IB_HCA", "mlx4"), ("NCCL_IB_GID_INDEX", "x")]);
        let (a, m) = pairwise(&["--transport", "tcp"]);
        let a = Rank::resolve(&a, &m, &bad, &here()).unwrap();
        assert!(a.devices.is_empty() && a.gid_index.is_none() && a.nic_choice.is_none());
        // Where verbs may be used, they are errors that say what to fix.
        let (a, m) = pairwise(&[]);
        let err = Rank::resolve(&a, &m, &bad, &here()).unwrap_err();
        assert!(
            err.starts_with("NCCL_IB_HCA=mlx4 matches none of the RDMA devices here"),
            "{err}"
        );
        // auto on a host without RDMA devices leaves NCCL_IB_HCA alone (TCP it will be).
        let none = Here {
            interfaces: Box::new(|| Ok(v(&["lo"]))),
            rdma_devices: Box::new(|_| Ok(Vec::new())),
            nccl_conf: NcclConf::default(),
        };
        let (a, m) = pairwise(&[]);
        let a = Rank::resolve(&a, &m, &env(&[("NCCL_IB_HCA", "mlx5")]), &none).unwrap();
        assert!(a.devices.is_empty());
        let (a, m) = pairwise(&["--transport", "verbs"]);
        assert!(Rank::resolve(&a, &m, &env(&[("NCCL_IB_HCA", "mlx5")]), &none)
            .unwrap_err()
            .contains("(none)"));
    }

    /// NCCL's configuration files fill what the environment leaves open, and the header and the
    /// errors name the file.
    #[test]
    fn nccl_conf_fills_after_the_environment_and_names_its_file() {
        let mut h = here();
        let etc = std::path::Path::new("/etc/nccl.conf");
        h.nccl_conf
            .add("NCCL_IB_GID_INDEX=3\nNCCL_IB_TC=106\nNCCL_SOCKET_IFNAME=eth1\n", etc);
        let (a, m) = pairwise(&[]);
        let r = Rank::resolve(&a, &m, &env(&[("NCCL_IB_TC", "41")]), &h).unwrap();
        assert_eq!((r.gid_index, r.tclass), (Some(3), Some(41)));
        assert_eq!(r.tcp_if, v(&["eth1"]));
        assert_eq!(
            r.nic_choice.as_deref(),
            Some(
                "--tcp-if eth1 from NCCL_SOCKET_IFNAME=eth1 in /etc/nccl.conf; --gid-index 3 from \
                 NCCL_IB_GID_INDEX=3 in /etc/nccl.conf; --tclass 41 from NCCL_IB_TC=41"
            )
        );
        // A flag still wins over the file.
        let (a, m) = pairwise(&["--gid-index", "0"]);
        assert_eq!(Rank::resolve(&a, &m, &env(&[]), &h).unwrap().gid_index, Some(0));
        // A bad value in the file: the error says where it was set.
        let mut bad = here();
        bad.nccl_conf.add("NCCL_IB_GID_INDEX=x\n", etc);
        let (a, m) = pairwise(&[]);
        let err = Rank::resolve(&a, &m, &env(&[]), &bad).err().unwrap_or_default();
        assert_eq!(
            err,
            "NCCL_IB_GID_INDEX=x: not a GID index (a whole number, 0 or more) (set in /etc/nccl.conf)"
        );
    }
}
