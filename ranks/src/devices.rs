//! RDMA devices, ports and GID tables, read from sysfs under a configurable root (default `/sys`),
//! so tests run on fixture trees of real machines. The active MTU is not in sysfs; the verbs layer
//! queries it.

use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

/// The GID types sysfs reports in `gid_attrs/types/N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GidKind {
    /// `IB/RoCE v1`: InfiniBand, or RoCE v1 on Ethernet.
    IbRoceV1,
    /// `RoCE v2` (UDP/IP).
    RoceV2,
}

/// One non-zero GID table entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gid {
    pub index: u32,
    pub raw: [u8; 16],
    pub kind: Option<GidKind>,
    /// The network device of a RoCE GID (`gid_attrs/ndevs/N`).
    pub netdev: Option<String>,
}

impl Gid {
    /// The IPv4 address of an IPv4-mapped GID (`::ffff:a.b.c.d`).
    pub fn ipv4(&self) -> Option<Ipv4Addr> {
        (self.raw[..10].iter().all(|&b| b == 0) && self.raw[10] == 0xff && self.raw[11] == 0xff)
            .then(|| Ipv4Addr::new(self.raw[12], self.raw[13], self.raw[14], self.raw[15]))
    }
    pub fn is_link_local(&self) -> bool {
        self.raw[0] == 0xfe && self.raw[1] & 0xc0 == 0x80
    }
    /// As sysfs writes it: eight groups of four hex digits.
    pub fn to_sysfs(&self) -> String {
        self.raw
            .chunks(2)
            .map(|c| format!("{:02x}{:02x}", c[0], c[1]))
            .collect::<Vec<_>>()
            .join(":")
    }
    /// `v1`, `v2` or empty, as show_gids prints the version.
    pub fn roce_version(&self) -> &'static str {
        match self.kind {
            Some(GidKind::IbRoceV1) => "v1",
            Some(GidKind::RoceV2) => "v2",
            None => "",
        }
    }
    /// perftest's preference, extended: IPv4-mapped over IPv6, global over link-local, RoCE v2 over v1.
    pub fn preference(&self) -> (bool, bool, bool) {
        (
            self.ipv4().is_some(),
            !self.is_link_local(),
            self.kind == Some(GidKind::RoceV2),
        )
    }
}

/// Parse `fe80:0000:...` (eight groups of four hex digits).
pub fn parse_gid(s: &str) -> Option<[u8; 16]> {
    let groups: Vec<&str> = s.trim().split(':').collect();
    if groups.len() != 8 {
        return None;
    }
    let mut raw = [0u8; 16];
    for (i, g) in groups.iter().enumerate() {
        let v = u16::from_str_radix(g, 16).ok()?;
        raw[2 * i..2 * i + 2].copy_from_slice(&v.to_be_bytes());
    }
    Some(raw)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkLayer {
    InfiniBand,
    Ethernet,
    Other,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Port {
    pub num: u8,
    /// `4: ACTIVE` -> (4, "ACTIVE").
    pub state: (u8, String),
    pub phys_state: String,
    pub link_layer: LinkLayer,
    pub rate: String,
    pub lid: u16,
    pub sm_lid: u16,
    pub gids: Vec<Gid>,
}

impl Port {
    pub fn is_active(&self) -> bool {
        self.state.0 == 4
    }
    /// The GID perftest's scoring picks (lowest index among equals).
    pub fn best_gid(&self) -> Option<&Gid> {
        let mut best: Option<&Gid> = None;
        for g in &self.gids {
            if best.is_none_or(|b| g.preference() > b.preference()) {
                best = Some(g);
            }
        }
        best
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeType {
    /// `1: CA`: InfiniBand or RoCE adapter.
    Ca,
    /// `4: RNIC`: iWARP.
    Rnic,
    Other,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaDevice {
    pub name: String,
    pub node_type: NodeType,
    /// PCI address from the `device` link (none for software devices).
    pub pci: Option<String>,
    pub fw_ver: Option<String>,
    pub ports: Vec<Port>,
}

#[derive(Debug, thiserror::Error)]
pub enum DevicesError {
    #[error("{path} does not exist: this kernel has no RDMA support loaded; load a driver (modprobe mlx5_ib, or modprobe rdma_rxe for Soft-RoCE) or use --transport tcp")]
    NoRdma { path: PathBuf },
    #[error("{path} lists no RDMA device: RDMA is loaded but no device is configured (for Soft-RoCE: rdma link add rxe0 type rxe netdev IFACE), or use --transport tcp")]
    NoDevices { path: PathBuf },
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A sysfs attribute's text, trimmed; None where it cannot be read.
pub(crate) fn read_attr(p: &Path) -> Option<String> {
    std::fs::read_to_string(p).ok().map(|s| s.trim().to_string())
}

fn parse_hex_u16(s: &str) -> u16 {
    u16::from_str_radix(s.trim_start_matches("0x"), 16).unwrap_or(0)
}

/// Every RDMA device under `root/class/infiniband`, sorted by name.
pub fn discover(root: &Path) -> Result<Vec<RdmaDevice>, DevicesError> {
    let dir = root.join("class/infiniband");
    if !dir.is_dir() {
        return Err(DevicesError::NoRdma { path: dir });
    }
    let entries = std::fs::read_dir(&dir).map_err(|source| DevicesError::Read {
        path: dir.clone(),
        source,
    })?;
    let mut devs = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        devs.push(read_device(&e.path(), name));
    }
    if devs.is_empty() {
        return Err(DevicesError::NoDevices { path: dir });
    }
    devs.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(devs)
}

fn read_device(d: &Path, name: String) -> RdmaDevice {
    let node_type = match read_attr(&d.join("node_type"))
        .as_deref()
        .and_then(|s| s.split(':').next())
    {
        Some("1") => NodeType::Ca,
        Some("4") => NodeType::Rnic,
        _ => NodeType::Other,
    };
    let pci = std::fs::read_link(d.join("device"))
        .ok()
        .and_then(|p| p.file_name().map(|f| f.to_string_lossy().into_owned()));
    let mut ports = Vec::new();
    if let Ok(rd) = std::fs::read_dir(d.join("ports")) {
        for p in rd.flatten() {
            if let Ok(num) = p.file_name().to_string_lossy().parse::<u8>() {
                ports.push(read_port(&p.path(), num));
            }
        }
    }
    ports.sort_by_key(|p| p.num);
    RdmaDevice {
        name,
        node_type,
        pci,
        fw_ver: read_attr(&d.join("fw_ver")),
        ports,
    }
}

fn read_port(p: &Path, num: u8) -> Port {
    let state_s = read_attr(&p.join("state")).unwrap_or_default();
    let (n, s) = state_s.split_once(':').unwrap_or(("0", "UNKNOWN"));
    let link_layer = match read_attr(&p.join("link_layer")).as_deref() {
        Some("InfiniBand") => LinkLayer::InfiniBand,
        Some("Ethernet") => LinkLayer::Ethernet,
        _ => LinkLayer::Other,
    };
    let mut gids = Vec::new();
    if let Ok(rd) = std::fs::read_dir(p.join("gids")) {
        for g in rd.flatten() {
            let Ok(index) = g.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Some(raw) = read_attr(&g.path()).as_deref().and_then(parse_gid) else {
                continue;
            };
            if raw.iter().all(|&b| b == 0) {
                continue;
            }
            let kind = match read_attr(&p.join(format!("gid_attrs/types/{index}"))).as_deref() {
                Some("IB/RoCE v1") => Some(GidKind::IbRoceV1),
                Some("RoCE v2") => Some(GidKind::RoceV2),
                _ => None,
            };
            let netdev = read_attr(&p.join(format!("gid_attrs/ndevs/{index}"))).filter(|s| !s.is_empty());
            gids.push(Gid {
                index,
                raw,
                kind,
                netdev,
            });
        }
    }
    gids.sort_by_key(|g| g.index);
    Port {
        num,
        state: (n.trim().parse().unwrap_or(0), s.trim().to_string()),
        phys_state: read_attr(&p.join("phys_state")).unwrap_or_default(),
        link_layer,
        rate: read_attr(&p.join("rate")).unwrap_or_default(),
        lid: parse_hex_u16(&read_attr(&p.join("lid")).unwrap_or_default()),
        sm_lid: parse_hex_u16(&read_attr(&p.join("sm_lid")).unwrap_or_default()),
        gids,
    }
}

/// The GID table as `show_gids` prints it.
pub fn show_gids(devs: &[RdmaDevice]) -> String {
    let mut s = String::from(
        "DEV\tPORT\tINDEX\tGID\t\t\t\t\tIPv4  \t\tVER\tDEV\n---\t----\t-----\t---\t\t\t\t\t------------  \t---\t---\n",
    );
    let mut n = 0;
    for d in devs {
        for p in &d.ports {
            for g in &p.gids {
                n += 1;
                let ip = g.ipv4().map(|a| a.to_string()).unwrap_or_default();
                let _ = writeln!(
                    s,
                    "{}\t{}\t{}\t{}\t{:<12}  \t{}\t{}",
                    d.name,
                    p.num,
                    g.index,
                    g.to_sysfs(),
                    ip,
                    g.roce_version(),
                    g.netdev.as_deref().unwrap_or("")
                );
            }
        }
    }
    let _ = writeln!(s, "n_gids_found={n}");
    s
}

/// What a rank will use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    pub device: String,
    pub port: u8,
    pub link_layer: LinkLayer,
    pub gid: Gid,
    pub lid: u16,
    /// An iWARP device (node type RNIC): it connects only through the RDMA connection manager,
    /// and its GID is the network device's MAC address.
    pub iwarp: bool,
}

impl Choice {
    /// One line for reports and errors.
    pub fn describe(&self) -> String {
        if self.iwarp {
            let mac = self.gid.raw[..6]
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(":");
            return format!("{} port {} (iWARP, MAC {mac})", self.device, self.port);
        }
        let kind = match (self.link_layer, self.gid.kind) {
            (LinkLayer::InfiniBand, _) => "IB".to_string(),
            (_, Some(GidKind::RoceV2)) => "RoCE v2".into(),
            (_, Some(GidKind::IbRoceV1)) => "RoCE v1".into(),
            _ => "unknown type".into(),
        };
        let addr = self.gid.ipv4().map_or_else(|| self.gid.to_sysfs(), |a| a.to_string());
        format!(
            "{} port {} GID {} ({kind}, {addr})",
            self.device, self.port, self.gid.index
        )
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SelectError {
    #[error("-d {0}: no such RDMA device; devices here: {1}")]
    UnknownDevice(String, String),
    #[error("{0} is an iWARP device (node type RNIC), which connects only through the RDMA connection manager: add -R (--rdma-cm), or use another device or --transport tcp")]
    Iwarp(String),
    #[error("{dev} has no port {port}; its ports: {ports}")]
    NoPort { dev: String, port: u8, ports: String },
    #[error("{dev} port {port} is {state}, not ACTIVE: check the cable and the subnet manager (ibstat {dev}), or choose another port with -i")]
    PortDown { dev: String, port: u8, state: String },
    #[error("{dev} port {port} has no GID index {index}; valid indexes: {valid} (see meshrun devices)")]
    NoGid {
        dev: String,
        port: u8,
        index: u32,
        valid: String,
    },
    #[error("{dev} port {port} has no GID: for RoCE, give the network device an IP address")]
    NoGids { dev: String, port: u8 },
    #[error("no active port on any RDMA device here ({0}); use --transport tcp")]
    NoActivePort(String),
}

/// Choose device, port and GID: `-d`, `-i`, `-x` when given, else the first device with an active
/// port, its first active port, and the best GID by perftest's scoring.
pub fn choose_device(
    devs: &[RdmaDevice],
    device: Option<&str>,
    port: Option<u8>,
    gid_index: Option<u32>,
) -> Result<Choice, SelectError> {
    choose_device_with(devs, device, port, gid_index, false)
}

/// [`choose_device`], where `rdma_cm` (connection setup through the RDMA connection manager) lets a
/// named iWARP device be chosen; a job left to choose still picks InfiniBand or RoCE.
pub fn choose_device_with(
    devs: &[RdmaDevice],
    device: Option<&str>,
    port: Option<u8>,
    gid_index: Option<u32>,
    rdma_cm: bool,
) -> Result<Choice, SelectError> {
    let names = || devs.iter().map(|d| d.name.as_str()).collect::<Vec<_>>().join(", ");
    let candidates: Vec<&RdmaDevice> = match device {
        Some(name) => vec![devs
            .iter()
            .find(|d| d.name == name)
            .ok_or_else(|| SelectError::UnknownDevice(name.into(), names()))?],
        None => devs.iter().filter(|d| d.node_type != NodeType::Rnic).collect(),
    };
    if let Some(d) = candidates.iter().find(|d| d.node_type == NodeType::Rnic && !rdma_cm) {
        return Err(SelectError::Iwarp(d.name.clone()));
    }
    for d in &candidates {
        let p = match port {
            Some(n) => match d.ports.iter().find(|p| p.num == n) {
                Some(p) => p,
                None => {
                    return Err(SelectError::NoPort {
                        dev: d.name.clone(),
                        port: n,
                        ports: d.ports.iter().map(|p| p.num.to_string()).collect::<Vec<_>>().join(", "),
                    })
                }
            },
            None => match d.ports.iter().find(|p| p.is_active()) {
                Some(p) => p,
                None if device.is_some() => {
                    let p = &d.ports[0];
                    return Err(SelectError::PortDown {
                        dev: d.name.clone(),
                        port: p.num,
                        state: p.state.1.clone(),
                    });
                }
                None => continue,
            },
        };
        if !p.is_active() {
            return Err(SelectError::PortDown {
                dev: d.name.clone(),
                port: p.num,
                state: p.state.1.clone(),
            });
        }
        let gid = match gid_index {
            Some(i) => p
                .gids
                .iter()
                .find(|g| g.index == i)
                .cloned()
                .ok_or_else(|| SelectError::NoGid {
                    dev: d.name.clone(),
                    port: p.num,
                    index: i,
                    valid: p
                        .gids
                        .iter()
                        .map(|g| g.index.to_string())
                        .collect::<Vec<_>>()
                        .join(", "),
                })?,
            None => p.best_gid().cloned().ok_or_else(|| SelectError::NoGids {
                dev: d.name.clone(),
                port: p.num,
            })?,
        };
        return Ok(Choice {
            device: d.name.clone(),
            port: p.num,
            link_layer: p.link_layer,
            gid,
            lid: p.lid,
            iwarp: d.node_type == NodeType::Rnic,
        });
    }
    Err(SelectError::NoActivePort(names()))
}

/// What the ranks compare about each other's choice (it travels in the MPI exchange).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GidSummary {
    pub ethernet: bool,
    /// 0 unknown, 1 IB / RoCE v1, 2 RoCE v2, 3 iWARP.
    pub kind: u8,
    pub ipv4: bool,
    pub describe: String,
}

impl Choice {
    pub fn gid_summary(&self) -> GidSummary {
        GidSummary {
            ethernet: self.link_layer == LinkLayer::Ethernet,
            kind: match self.gid.kind {
                _ if self.iwarp => 3,
                None => 0,
                Some(GidKind::IbRoceV1) => 1,
                Some(GidKind::RoceV2) => 2,
            },
            ipv4: self.gid.ipv4().is_some(),
            describe: self.describe(),
        }
    }
}

/// Check that the GIDs chosen on every rank can talk to each other: same link layer, and for RoCE
/// the same version and address family (one side v1 and the other v2 retries silently forever).
pub fn check_consistent(choices: &[(usize, String, GidSummary)]) -> Result<(), String> {
    let Some((r0, h0, c0)) = choices.first() else {
        return Ok(());
    };
    for (r, h, c) in &choices[1..] {
        let mismatch = if (c.kind == 3) != (c0.kind == 3) {
            Some("iWARP and InfiniBand/RoCE cannot talk to each other")
        } else if c.kind == 3 {
            None
        } else if c.ethernet != c0.ethernet {
            Some("link layers differ")
        } else if c.ethernet && c.kind != c0.kind {
            Some("RoCE versions differ")
        } else if c.ethernet && c.ipv4 != c0.ipv4 {
            Some("GID address families differ")
        } else {
            None
        };
        if let Some(why) = mismatch {
            let fix = if (c.kind == 3) != (c0.kind == 3) {
                "give every rank a device of the same kind with -d/--devices (see meshrun devices)"
            } else {
                "pick matching GIDs on every rank with -x N (see meshrun devices)"
            };
            return Err(format!(
                "{why}: rank {r0} ({h0}) uses {} but rank {r} ({h}) uses {}; {fix}",
                c0.describe, c.describe
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
