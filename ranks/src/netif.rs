//! Choosing the local address a rank listens on: `--tcp-if NAME` (an interface), `--tcp-if CIDR`
//! (the first local address inside a subnet), or by default the address this host's name resolves to.

use std::net::{IpAddr, ToSocketAddrs};

/// Why no address could be chosen.
#[derive(Debug, thiserror::Error)]
pub enum NetifError {
    #[error("--tcp-if {spec}: no local interface of that name has an address; interfaces here: {known}")]
    UnknownInterface { spec: String, known: String },
    #[error("--tcp-if {spec}: no local address lies in that subnet; addresses here: {known}")]
    NoAddressInSubnet { spec: String, known: String },
    #[error("--tcp-if {spec}: not an interface name or a CIDR like 10.0.0.0/8 ({why})")]
    BadSpec { spec: String, why: String },
    #[error("host name `{host}` does not resolve to an address ({why}); pass --tcp-if NAME|CIDR")]
    Unresolvable { host: String, why: String },
    #[error("cannot list network interfaces: {0}")]
    List(#[from] nix::Error),
}

/// A local interface address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IfAddr {
    pub name: String,
    pub ip: IpAddr,
}

/// All local interface addresses (IPv4 and IPv6).
pub fn local_addresses() -> Result<Vec<IfAddr>, NetifError> {
    let mut out = Vec::new();
    for ifa in nix::ifaddrs::getifaddrs()? {
        let Some(addr) = ifa.address else { continue };
        let ip = if let Some(v4) = addr.as_sockaddr_in() {
            IpAddr::V4(v4.ip())
        } else if let Some(v6) = addr.as_sockaddr_in6() {
            IpAddr::V6(v6.ip())
        } else {
            continue;
        };
        out.push(IfAddr {
            name: ifa.interface_name,
            ip,
        });
    }
    Ok(out)
}

/// A network interface as the findings report it: name, MTU and PCI address (sysfs under `root`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    pub name: String,
    pub mtu: Option<u32>,
    /// The PCI device behind it (None for virtual interfaces: lo, veth, bridges).
    pub pci: Option<String>,
}

/// The network interface whose MAC address is `mac` (sysfs under `root`: `class/net/*/address`),
/// as an iWARP device names its interface only by the MAC in its GID.
pub fn interface_with_mac(root: &std::path::Path, mac: [u8; 6]) -> Option<String> {
    let want = mac.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":");
    let mut names: Vec<String> = std::fs::read_dir(root.join("class/net"))
        .ok()?
        .flatten()
        .filter(|e| {
            std::fs::read_to_string(e.path().join("address")).is_ok_and(|a| a.trim().eq_ignore_ascii_case(&want))
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names.into_iter().next()
}

/// The interface that holds `ip`, if one does.
pub fn interface_for(root: &std::path::Path, ip: IpAddr) -> Option<Interface> {
    let name = local_addresses().ok()?.into_iter().find(|a| a.ip == ip)?.name;
    let dir = root.join("class/net").join(&name);
    let mtu = std::fs::read_to_string(dir.join("mtu"))
        .ok()
        .and_then(|s| s.trim().parse().ok());
    let pci = std::fs::read_link(dir.join("device"))
        .ok()
        .and_then(|t| t.file_name().map(|f| f.to_string_lossy().into_owned()))
        .filter(|f| f.contains(':'));
    Some(Interface { name, mtu, pci })
}

/// Parse `a.b.c.d/len` or `v6/len`.
pub fn parse_cidr(spec: &str) -> Result<(IpAddr, u8), String> {
    let (ip, len) = spec.split_once('/').ok_or("no `/`")?;
    let ip: IpAddr = ip.parse().map_err(|e| format!("{e}"))?;
    let len: u8 = len.parse().map_err(|_| "prefix length is not a number".to_string())?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    if len > max {
        return Err(format!("prefix length {len} is over {max}"));
    }
    Ok((ip, len))
}

/// Whether `ip` lies in `net/len`.
pub fn in_subnet(ip: IpAddr, net: IpAddr, len: u8) -> bool {
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = if len == 0 { 0 } else { u32::MAX << (32 - u32::from(len)) };
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = if len == 0 {
                0
            } else {
                u128::MAX << (128 - u32::from(len))
            };
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

/// Choose an address from `addrs` for `spec` (interface name or CIDR), preferring IPv4.
pub fn choose(spec: &str, addrs: &[IfAddr]) -> Result<IpAddr, NetifError> {
    let known = || {
        let mut v: Vec<String> = addrs.iter().map(|a| format!("{}={}", a.name, a.ip)).collect();
        v.dedup();
        v.join(", ")
    };
    let pick = |it: &mut dyn Iterator<Item = &IfAddr>| {
        let all: Vec<IpAddr> = it.map(|a| a.ip).collect();
        all.iter().find(|i| i.is_ipv4()).or(all.first()).copied()
    };
    if spec.contains('/') {
        let (net, len) = parse_cidr(spec).map_err(|why| NetifError::BadSpec { spec: spec.into(), why })?;
        return pick(&mut addrs.iter().filter(|a| in_subnet(a.ip, net, len))).ok_or_else(|| {
            NetifError::NoAddressInSubnet {
                spec: spec.into(),
                known: known(),
            }
        });
    }
    pick(&mut addrs.iter().filter(|a| a.name == spec)).ok_or_else(|| NetifError::UnknownInterface {
        spec: spec.into(),
        known: known(),
    })
}

/// The address `host` resolves to, preferring IPv4.
pub fn resolve_host(host: &str) -> Result<IpAddr, NetifError> {
    let addrs: Vec<IpAddr> = (host, 0u16)
        .to_socket_addrs()
        .map_err(|e| NetifError::Unresolvable {
            host: host.into(),
            why: e.to_string(),
        })?
        .map(|s| s.ip())
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| NetifError::Unresolvable {
            host: host.into(),
            why: "no addresses".into(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(name: &str, ip: &str) -> IfAddr {
        IfAddr {
            name: name.into(),
            ip: ip.parse().unwrap(),
        }
    }

    #[test]
    fn choose_by_name_and_cidr() {
        let addrs = [
            a("lo", "127.0.0.1"),
            a("eth0", "fe80::1"),
            a("eth0", "10.1.2.3"),
            a("ib0", "192.168.7.9"),
        ];
        assert_eq!(choose("eth0", &addrs).unwrap(), "10.1.2.3".parse::<IpAddr>().unwrap());
        assert_eq!(
            choose("192.168.0.0/16", &addrs).unwrap(),
            "192.168.7.9".parse::<IpAddr>().unwrap()
        );
        let e = choose("eth9", &addrs).unwrap_err().to_string();
        assert!(e.contains("eth9") && e.contains("ib0=192.168.7.9"), "{e}");
        assert!(matches!(
            choose("172.16.0.0/12", &addrs),
            Err(NetifError::NoAddressInSubnet { .. })
        ));
        assert!(matches!(choose("10.0.0.0/40", &addrs), Err(NetifError::BadSpec { .. })));
    }

    #[test]
    fn subnet_math() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(in_subnet(ip("10.9.0.2"), ip("10.9.0.0"), 24));
        assert!(!in_subnet(ip("10.9.1.2"), ip("10.9.0.0"), 24));
        assert!(in_subnet(ip("1.2.3.4"), ip("0.0.0.0"), 0));
        assert!(in_subnet(ip("fd00::5"), ip("fd00::"), 64));
        assert!(!in_subnet(ip("10.9.0.2"), ip("fd00::"), 0));
    }

    #[test]
    fn this_machine_has_loopback() {
        let addrs = local_addresses().unwrap();
        assert!(choose("lo", &addrs).unwrap().is_loopback());
    }

    /// An iWARP device's interface is found by the MAC in its GID (case as sysfs writes it, or
    /// not); none where no interface has it.
    #[test]
    fn interface_by_mac() {
        let root = std::env::temp_dir().join(format!("meshrun-netif-mac-{}", std::process::id()));
        for (name, mac) in [
            ("eth0", "52:54:00:12:34:56"),
            ("wa", "82:0B:1F:1F:86:6D"),
            ("lo", "00:00:00:00:00:00"),
        ] {
            let d = root.join("class/net").join(name);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("address"), format!("{mac}\n")).unwrap();
        }
        let found = |mac| interface_with_mac(&root, mac);
        assert_eq!(found([0x52, 0x54, 0, 0x12, 0x34, 0x56]).as_deref(), Some("eth0"));
        assert_eq!(found([0x82, 0x0b, 0x1f, 0x1f, 0x86, 0x6d]).as_deref(), Some("wa"));
        assert_eq!(found([1, 2, 3, 4, 5, 6]), None);
        assert_eq!(interface_with_mac(&root.join("nothing"), [1, 2, 3, 4, 5, 6]), None);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
