//! `meshrun topology PATH...`: what meshrun makes of a `--topology` file or directory (leaf lines,
//! Slurm's topology.conf, ibnetdiscover or ibtracert output, one `lldpctl -f json` per host, a
//! traced pairwise `--json` report):
//! each leaf switch with its hosts as a hostlist, each host's cable to it where the source names
//! one, and the routes given, so an operator sees before a run which uplink, switch port or
//! route a slow set of host links would be blamed on.

use analysis::pairwise::topology::Topology;

use crate::cli::TopologyArgs;
use crate::exit::Status;

pub fn run(a: &TopologyArgs) -> i32 {
    match Topology::read_all(&a.files) {
        Ok(t) => {
            let names: Vec<String> = a.files.iter().map(|f| f.display().to_string()).collect();
            print!("{}", render(&t, &names.join(" ")));
            Status::Ok.code()
        }
        Err(e) => {
            ranks::eline!("meshrun topology: {e}");
            Status::Usage.code()
        }
    }
}

/// The report: a header, then `LEAF: HOSTLIST  # N hosts` per leaf, each followed by its hosts'
/// cables (`#   gpu01: eno1 -> port Ethernet12`) where known, then the routes as comments; the
/// output is itself a topology file.
fn render(t: &Topology, file: &str) -> String {
    let leaves = t.leaves();
    let hosts: usize = leaves.values().map(Vec::len).sum();
    let mut out = format!(
        "# meshrun topology: {file}: {hosts} host(s) under {} leaf switch(es)\n",
        leaves.len()
    );
    for (leaf, hs) in &leaves {
        out.push_str(&format!(
            "{leaf}: {}  # {} host(s)\n",
            hostfiles::compress_hostlist(hs),
            hs.len()
        ));
        for h in hs {
            if let Some(l) = t.link_of(h) {
                out.push_str(&format!("#   {h}: {} -> port {}\n", l.host_end, l.switch_port));
            }
        }
    }
    let paths = t.traced_paths();
    if !paths.is_empty() {
        out.push_str(&format!(
            "# router paths traced between {} pair(s) of first routers:\n",
            paths.len()
        ));
        for ((a, b), ps) in paths {
            let list: Vec<&str> = ps.iter().map(String::as_str).collect();
            out.push_str(&format!("#   {a} -> {b}: {} path(s): {}\n", ps.len(), list.join("; ")));
        }
    }
    let routes: Vec<_> = t.routes().collect();
    if !routes.is_empty() {
        out.push_str(&format!("# {} route(s), each switch [in>out port]:\n", routes.len()));
        for r in routes {
            out.push_str(&format!("#   {} -> {}: {}\n", r.src, r.dst, r.phrase()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_leaf_with_its_hosts_as_a_hostlist() {
        let t = Topology::parse(
            "leaf1: node[01-03]\nSwitchName=leaf2 Nodes=node[04-05],gpu7\nSwitchName=spine Switches=leaf[1-2]\n",
            "t",
        )
        .unwrap();
        assert_eq!(
            render(&t, "topo.conf"),
            "# meshrun topology: topo.conf: 6 host(s) under 2 leaf switch(es)\n\
             leaf1: node[01-03]  # 3 host(s)\n\
             leaf2: gpu7,node[04-05]  # 3 host(s)\n"
        );
    }

    /// The leaf-spine bed's traced run: three first routers, both spines between each two.
    #[test]
    fn a_traced_report_gives_first_routers_and_their_paths() {
        let json = include_str!("../../docs/evidence/leafspine-defaults-2026-12-06/runs/default-cable-1.json");
        let t = Topology::parse(json, "run.json").expect("a traced report");
        let out = render(&t, "run.json");
        assert!(out.starts_with(
            "# meshrun topology: run.json: 6 host(s) under 3 leaf switch(es)\n\
             router-10.80.0.1: mrls-h[0-1]  # 2 host(s)\n\
             router-10.80.1.1: mrls-h[2-3]  # 2 host(s)\n\
             router-10.80.2.1: mrls-h[4-5]  # 2 host(s)\n\
             # router paths traced between 6 pair(s) of first routers:\n"
        ));
        assert!(
            out.contains(
                "#   router-10.80.0.1 -> router-10.80.2.1: 2 path(s): 10.80.0.1 > 10.100.0.2 > 10.100.2.1; \
                 10.80.0.1 > 10.101.0.2 > 10.101.2.1\n"
            ),
            "{out}"
        );
        // And it reads back as a topology file.
        assert_eq!(Topology::parse(&out, "again").expect("reads back").leaves(), t.leaves());
    }

    #[test]
    fn cables_and_routes_follow_as_comments_and_read_back() {
        let text = "From ca {0x0000000000100002} portnum 1 lid 5-5 \"gpu01 mlx5_0\"\n\
                    [1] -> switch port {0x0000000000200002}[7] lid 4-4 \"leaf01\"\n\
                    [9] -> ca port {0x000000000010000b}[1] lid 12-12 \"gpu02 mlx5_0\"\n\
                    To ca {0x000000000010000a} portnum 1 lid 12-12 \"gpu02 mlx5_0\"\n";
        let t = Topology::parse(text, "r.txt").unwrap();
        let out = render(&t, "r.txt");
        assert_eq!(
            out,
            "# meshrun topology: r.txt: 2 host(s) under 1 leaf switch(es)\n\
             leaf01 (S-0000000000200002): gpu[01-02]  # 2 host(s)\n\
             #   gpu01: mlx5_0 port 1 -> port 7\n\
             #   gpu02: mlx5_0 port 1 -> port 9\n\
             # 1 route(s), each switch [in>out port]:\n\
             #   gpu01 -> gpu02: leaf01 (S-0000000000200002) [7>9]\n"
        );
        let again = Topology::parse(&out, "again").unwrap();
        assert_eq!(again.leaves(), t.leaves());
    }
}
