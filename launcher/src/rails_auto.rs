//! `pairwise --rails auto` on the ranks, after MPI and before the mesh: every rank lists its
//! host's ports ([`ranks::rail_ports`]), rank 0 plans the rails from every host's list and shares
//! the plan (or the one line that says why there is none), and each rank takes port
//! `local_rank` of its host as if `--devices` or `--tcp-if` had named it. Each rank's GPU is the
//! nearest to its NIC ([`ranks::gpu_pairing`]); rank 0 prints every rank's pairing.

use std::sync::OnceLock;

use ranks::rail_ports::{self, RailPort};
use ranks::World;

use crate::cli::TransportChoice;
use crate::settings::Rank;

/// Both kinds of ports a rank found on its host, and why it could not look.
#[derive(Default, Debug, PartialEq)]
struct Found {
    verbs: Vec<RailPort>,
    tcp: Vec<RailPort>,
    problem: Option<String>,
}

/// Rank 0's answer: the transport and every host's ports by node index, or why not.
#[derive(Debug, PartialEq)]
enum Plan {
    Rails { verbs: bool, nodes: Vec<Vec<RailPort>> },
    Refused(String),
}

/// A port as one line's fields after its tag: device, port number, PCI address (names hold no
/// tab or newline: the kernel's interface and device names have no white space).
fn port_fields(p: &RailPort) -> String {
    format!(
        "{}\t{}\t{}",
        p.device,
        p.port.map_or_else(String::new, |n| n.to_string()),
        p.pci.as_deref().unwrap_or("")
    )
}

fn parse_port(fields: &[&str]) -> Option<RailPort> {
    let [device, port, pci] = fields else { return None };
    Some(RailPort {
        device: device.to_string(),
        port: if port.is_empty() {
            None
        } else {
            Some(port.parse().ok()?)
        },
        pci: (!pci.is_empty()).then(|| pci.to_string()),
    })
}

impl Found {
    /// `v` lines for RDMA ports, `t` for interfaces, `p` for the problem.
    fn encode(&self) -> String {
        let mut s = String::new();
        for (tag, list) in [("v", &self.verbs), ("t", &self.tcp)] {
            for p in list {
                s += &format!("{tag}\t{}\n", port_fields(p));
            }
        }
        if let Some(p) = &self.problem {
            s += &format!("p\t{}\n", p.replace('\n', " "));
        }
        s
    }

    fn decode(text: &str) -> Found {
        let mut f = Found::default();
        for line in text.lines() {
            let fields: Vec<&str> = line.split('\t').collect();
            match fields.split_first() {
                Some((&"v", rest)) => f.verbs.extend(parse_port(rest)),
                Some((&"t", rest)) => f.tcp.extend(parse_port(rest)),
                Some((&"p", rest)) => f.problem = Some(rest.join("\t")),
                _ => {}
            }
        }
        f
    }
}

impl Plan {
    /// `verbs` or `tcp`, then a line per port (`NODE\tfields`); or `refused\tWHY`.
    fn encode(&self) -> String {
        match self {
            Plan::Refused(why) => format!("refused\t{why}"),
            Plan::Rails { verbs, nodes } => {
                let mut s = String::from(if *verbs { "verbs\n" } else { "tcp\n" });
                for (n, list) in nodes.iter().enumerate() {
                    for p in list {
                        s += &format!("{n}\t{}\n", port_fields(p));
                    }
                }
                s
            }
        }
    }

    fn decode(text: &str) -> Option<Plan> {
        if let Some(why) = text.strip_prefix("refused\t") {
            return Some(Plan::Refused(why.to_string()));
        }
        let (head, rest) = text.split_once('\n').unwrap_or((text, ""));
        let verbs = match head {
            "verbs" => true,
            "tcp" => false,
            _ => return None,
        };
        let mut nodes: Vec<Vec<RailPort>> = Vec::new();
        for line in rest.lines() {
            let fields: Vec<&str> = line.split('\t').collect();
            let (n, port) = fields.split_first()?;
            let n: usize = n.parse().ok()?;
            if nodes.len() <= n {
                nodes.resize(n + 1, Vec::new());
            }
            nodes[n].push(parse_port(port)?);
        }
        Some(Plan::Rails { verbs, nodes })
    }
}

/// This rank's GPU from the pairing (its PCI address), for `--use-cuda auto`.
static GPU: OnceLock<String> = OnceLock::new();

/// Where this rank's NIC came from, for the header's NIC choice line.
static CHOICE: OnceLock<String> = OnceLock::new();

/// What `--rails auto` found, for the header's NIC choice line (None before [`resolve`], or without it).
pub fn nic_choice() -> Option<&'static str> {
    CHOICE.get().map(String::as_str)
}

/// The GPU `--rails auto` paired with this rank's NIC, where sysfs showed one.
pub fn gpu() -> Option<&'static str> {
    GPU.get().map(String::as_str)
}

/// `args` with this rank's rail filled in (the transport the plan chose, the host's ports as the
/// `--devices` or `--tcp-if` list, and where it came from on the header's NIC choice line), or
/// the one line that says why the ports make no rails (the same on every rank).
pub fn resolve(world: &World, args: &Rank) -> Result<Rank, String> {
    let root = &args.sysfs_root;
    let mut found = Found::default();
    if args.transport != TransportChoice::Tcp {
        found.verbs = rail_ports::verbs_ports(root, &args.devices);
    }
    if args.transport != TransportChoice::Verbs {
        match rail_ports::tcp_ports(root, &args.tcp_if) {
            Ok(v) => found.tcp = v,
            Err(e) => found.problem = Some(format!("{} cannot list its interfaces: {e}", world.host())),
        }
    }
    let plan = match world.gather_bytes(found.encode().as_bytes(), "gathering each host's ports") {
        Some(all) => {
            let lists: Vec<Found> = all.iter().map(|b| Found::decode(&String::from_utf8_lossy(b))).collect();
            decide(world.hosts(), world.node_of(), args.transport, &lists).encode()
        }
        None => String::new(),
    };
    let bytes = world.broadcast_vec(plan.as_bytes(), "sharing the rails");
    let (verbs, nodes) = match Plan::decode(&String::from_utf8_lossy(&bytes)) {
        Some(Plan::Rails { verbs, nodes }) => (verbs, nodes),
        Some(Plan::Refused(why)) => return Err(why),
        None => return Err("--rails auto: the plan rank 0 sent did not decode".into()),
    };
    let host: Vec<RailPort> = world
        .node_of()
        .get(world.rank())
        .and_then(|&n| nodes.get(n))
        .cloned()
        .unwrap_or_default();
    let port = host.get(world.local_rank()).ok_or_else(|| {
        format!(
            "--rails auto: {} has no port for local rank {}",
            world.host(),
            world.local_rank()
        )
    })?;
    let mut r = args.clone();
    let names: Vec<String> = host.iter().map(RailPort::name).collect();
    if verbs {
        r.transport = TransportChoice::Verbs;
        r.devices = host.iter().map(|p| p.device.clone()).collect();
        r.ib_port = port.port;
    } else {
        r.transport = TransportChoice::Tcp;
        r.tcp_if = names.clone();
    }
    let line = format!("--rails auto found {} on every host", names.join(", "));
    r.nic_choice = Some(match &args.nic_choice {
        Some(before) => format!("{before}; {line}"),
        None => line.clone(),
    });
    let _ = CHOICE.set(line.clone());
    report_pairing(world, args, &host);
    Ok(r)
}

/// Rank 0's plan from every rank's `lists`: RDMA ports under `--transport verbs`, or under auto
/// where every host has one; interfaces otherwise.
fn decide(hosts: &[String], node_of: &[usize], transport: TransportChoice, lists: &[Found]) -> Plan {
    if let Some(p) = lists.iter().find_map(|f| f.problem.clone()) {
        return Plan::Refused(format!("--rails auto: {p}"));
    }
    let verbs = match transport {
        TransportChoice::Verbs => true,
        TransportChoice::Tcp => false,
        TransportChoice::Auto => !lists.is_empty() && lists.iter().all(|f| !f.verbs.is_empty()),
    };
    let (what, ports): (&'static str, Vec<Vec<RailPort>>) = if verbs {
        ("RDMA ports", lists.iter().map(|f| f.verbs.clone()).collect())
    } else {
        ("interfaces", lists.iter().map(|f| f.tcp.clone()).collect())
    };
    match rail_ports::plan(hosts, node_of, &ports, what) {
        Ok(nodes) => Plan::Rails { verbs, nodes },
        Err(e) => Plan::Refused(e.to_string()),
    }
}

/// Pair this host's rails with its GPUs, keep this rank's GPU, and print every rank's pairing
/// on rank 0 ([`pairing_report`]), with a warning for each NODE or SYS one.
fn report_pairing(world: &World, args: &Rank, host: &[RailPort]) {
    let nics: Vec<(String, Option<String>)> = host.iter().map(|p| (p.name(), p.pci.clone())).collect();
    let pairing = ranks::gpu_pairing::pair(&args.sysfs_root, &nics);
    let mine = pairing.get(world.local_rank());
    if let Some((g, _)) = mine.and_then(|m| m.gpu.as_ref()) {
        let _ = GPU.set(g.clone());
    }
    let port = host.get(world.local_rank());
    let pci = port
        .and_then(|p| p.pci.as_deref())
        .map_or_else(String::new, |a| format!(" [{a}]"));
    let gpu = match mine.and_then(|m| m.gpu.as_ref()) {
        Some((g, a)) => format!("GPU {g} ({})", a.as_str()),
        None => "no GPU paired".into(),
    };
    let who = format!("rank {} ({})", world.rank(), world.host());
    let line = format!(
        "# Rail pairing: {who} rail {}: {}{pci}, {gpu}",
        world.local_rank(),
        port.map(RailPort::name).unwrap_or_default()
    );
    let warning = mine
        .and_then(ranks::gpu_pairing::Pairing::warning)
        .map(|w| format!("warning: {who}: {w}"));
    let text = format!("{line}\n{}", warning.unwrap_or_default());
    if let Some(all) = world.gather_bytes(text.as_bytes(), "gathering the rail pairing") {
        let texts: Vec<String> = all.iter().map(|t| String::from_utf8_lossy(t).into_owned()).collect();
        let names: Vec<String> = host.iter().map(RailPort::name).collect();
        let (out, warnings) = pairing_report(&texts, world.host(), &names);
        for w in warnings {
            ranks::stderr_line(&format!("meshrun: {w}"));
        }
        use std::io::Write;
        let mut so = std::io::stdout();
        let _ = so.write_all(out.as_bytes());
        let _ = so.flush();
    }
}

/// Rank 0's text from every rank's pairing line and warning (`LINE\nWARNING`): the lines, or
/// where no rank has a GPU one line for the job (local rank i on port i, rank 0's host's ports
/// `names` for example); and the warnings.
fn pairing_report(texts: &[String], host: &str, names: &[String]) -> (String, Vec<String>) {
    let split: Vec<(&str, &str)> = texts.iter().map(|t| t.split_once('\n').unwrap_or((t, ""))).collect();
    let warnings = split
        .iter()
        .map(|(_, w)| w.to_string())
        .filter(|w| !w.is_empty())
        .collect();
    if split.iter().all(|(l, _)| l.ends_with(", no GPU paired")) {
        let one = format!(
            "# Rail pairing: local rank i on port i of its host ({host}: {}); no GPU paired (none in sysfs, or the \
             NICs have no PCI address)\n",
            names.join(", ")
        );
        return (one, warnings);
    }
    let lines = split.iter().map(|(l, _)| format!("{l}\n")).collect();
    (lines, warnings)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(device: &str, port: Option<u8>, pci: Option<&str>) -> RailPort {
        RailPort {
            device: device.into(),
            port,
            pci: pci.map(String::from),
        }
    }

    /// What a rank found and rank 0's plan come back as they went.
    #[test]
    fn found_and_plans_round_trip() {
        let f = Found {
            verbs: vec![
                port("mlx5_0", Some(1), Some("0000:18:00.0")),
                port("mlx5_1", Some(2), None),
            ],
            tcp: vec![port("eth0", None, None)],
            problem: Some("mr-h1 cannot list its interfaces: EPERM".into()),
        };
        assert_eq!(Found::decode(&f.encode()), f);
        let p = Plan::Rails {
            verbs: false,
            nodes: vec![vec![port("eth0", None, None), port("eth1", None, Some("0000:3b:00.1"))]; 2],
        };
        assert_eq!(Plan::decode(&p.encode()), Some(p));
        let r = Plan::Refused("--rails auto: b has no active interfaces; bring one up".into());
        assert_eq!(Plan::decode(&r.encode()), Some(r));
        assert_eq!(Plan::decode("udp\n"), None);
        assert_eq!(Plan::decode("tcp\nx\teth0\t\t\n"), None);
    }

    /// Every rank's line where any has a GPU; one line for the job where none has.
    #[test]
    fn the_pairing_is_one_line_per_rank_or_one_for_the_job() {
        let names = ["eth0".to_string(), "eth1".to_string()];
        let none = [
            "# Rail pairing: rank 0 (a) rail 0: eth0, no GPU paired\n".to_string(),
            "# Rail pairing: rank 1 (a) rail 1: eth1, no GPU paired\n".to_string(),
        ];
        let (out, w) = pairing_report(&none, "a", &names);
        assert_eq!(
            out,
            "# Rail pairing: local rank i on port i of its host (a: eth0, eth1); no GPU paired (none in sysfs, or the \
             NICs have no PCI address)\n"
        );
        assert!(w.is_empty());
        let some = [
            "# Rail pairing: rank 0 (a) rail 0: mlx5_0:1 [0000:18:00.0], GPU 0000:1b:00.0 (PIX)\n".to_string(),
            "# Rail pairing: rank 1 (a) rail 1: mlx5_1:1 [0000:1a:00.0], GPU 0000:9a:00.0 (SYS)\nwarning: rank 1 (a): \
             NIC mlx5_1:1 and GPU 0000:9a:00.0 are SYS apart"
                .to_string(),
        ];
        let (out, w) = pairing_report(&some, "a", &names);
        assert_eq!(out.lines().count(), 2);
        assert!(out.ends_with("GPU 0000:9a:00.0 (SYS)\n"), "{out}");
        assert_eq!(
            w,
            ["warning: rank 1 (a): NIC mlx5_1:1 and GPU 0000:9a:00.0 are SYS apart"]
        );
    }

    /// Under `--transport auto`, RDMA ports where every host has one, else interfaces; a rank
    /// that could not look is the refusal.
    #[test]
    fn auto_takes_rdma_ports_only_where_every_host_has_them() {
        let hosts: Vec<String> = ["a", "b"].map(String::from).to_vec();
        let both = |verbs: bool| Found {
            verbs: if verbs {
                vec![port("mlx5_0", Some(1), None)]
            } else {
                vec![]
            },
            tcp: vec![port("eth0", None, None)],
            problem: None,
        };
        let plan = |lists: &[Found], t| decide(&hosts, &[0, 1], t, lists);
        let got = |p: Plan| match p {
            Plan::Rails { verbs, nodes } => (verbs, nodes[1][0].name()),
            Plan::Refused(why) => panic!("{why}"),
        };
        assert_eq!(
            got(plan(&[both(true), both(true)], TransportChoice::Auto)),
            (true, "mlx5_0:1".into())
        );
        assert_eq!(
            got(plan(&[both(true), both(false)], TransportChoice::Auto)),
            (false, "eth0".into())
        );
        assert_eq!(
            got(plan(&[both(true), both(true)], TransportChoice::Tcp)),
            (false, "eth0".into())
        );
        assert_eq!(
            plan(&[both(true), both(false)], TransportChoice::Verbs),
            Plan::Refused("--rails auto: b has no active RDMA ports; bring one up, or run without --rails auto".into())
        );
        let mut blind = both(true);
        blind.problem = Some("b cannot list its interfaces: EPERM".into());
        assert_eq!(
            plan(&[both(true), blind], TransportChoice::Auto),
            Plan::Refused("--rails auto: b cannot list its interfaces: EPERM".into())
        );
    }
}
