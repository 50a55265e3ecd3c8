//! NCCL's NIC variables, read as NCCL reads them. They come after the flag and `MESHRUN_<FLAG>`
//! (clap reads it, see [`super::source::with_env`]; [`super::rank`] applies the precedence), so
//! a check run in a training job's environment uses the NICs and GID the job will:
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

/// The NCCL variables meshrun reads.
pub const NCCL_VARS: [&str; 6] = [
    "NCCL_SOCKET_IFNAME",
    "NCCL_IB_HCA",
    "NCCL_IB_GID_INDEX",
    "NCCL_IB_SL",
    "NCCL_IB_TC",
    "NCCL_IB_QPS_PER_CONNECTION",
];

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
}
