//! `meshrun topology FILE`: what meshrun makes of a `--topology` file (leaf lines, Slurm's
//! topology.conf, or ibnetdiscover output): each leaf switch with its hosts as a hostlist, so an
//! operator sees before a run which uplink a slow set of host links would be blamed on.

use analysis::pairwise::topology::Topology;

use crate::cli::TopologyArgs;
use crate::exit::Status;

pub fn run(a: &TopologyArgs) -> i32 {
    match Topology::read(&a.file) {
        Ok(t) => {
            print!("{}", render(&t, &a.file.display().to_string()));
            Status::Ok.code()
        }
        Err(e) => {
            ranks::eline!("meshrun topology: {e}");
            Status::Usage.code()
        }
    }
}

/// The report: a header, then `LEAF: HOSTLIST  # N hosts` per leaf.
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
}
