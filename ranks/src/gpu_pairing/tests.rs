use super::*;
use std::path::PathBuf;

/// A sysfs tree built for one test: PCI devices under `devices/` with `bus/pci/devices` links,
/// as `tests/fixtures/sysfs/gpu-2socket` is laid out, and RDMA devices under `class/infiniband`.
struct Tree {
    root: PathBuf,
}

impl Tree {
    fn new(tag: &str) -> Tree {
        let root = std::env::temp_dir().join(format!("meshrun-pairing-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("bus/pci/devices")).unwrap();
        Tree { root }
    }

    /// A PCI device at `path` (root complex first, the device's own address last).
    fn pci(&self, path: &[String], numa: i32, vendor: &str, class: &str) {
        let rel = path.join("/");
        let dir = self.root.join("devices").join(&rel);
        std::fs::create_dir_all(&dir).unwrap();
        for (f, v) in [("vendor", vendor), ("class", class), ("numa_node", &numa.to_string())] {
            std::fs::write(dir.join(f), format!("{v}\n")).unwrap();
        }
        let addr = path.last().unwrap();
        std::os::unix::fs::symlink(
            format!("../../../devices/{rel}"),
            self.root.join("bus/pci/devices").join(addr),
        )
        .unwrap();
    }

    fn gpu(&self, path: &[String], numa: i32) {
        self.pci(path, numa, "0x10de", "0x030200");
    }

    /// A Mellanox NIC with one ACTIVE InfiniBand port, as RDMA device `name`.
    fn nic(&self, name: &str, path: &[String], numa: i32) {
        self.pci(path, numa, "0x15b3", "0x020700");
        let d = self.root.join("class/infiniband").join(name);
        std::fs::create_dir_all(d.join("ports/1")).unwrap();
        std::os::unix::fs::symlink(self.root.join("devices").join(path.join("/")), d.join("device")).unwrap();
        std::fs::write(d.join("node_type"), "1: CA\n").unwrap();
        std::fs::write(d.join("ports/1/state"), "4: ACTIVE\n").unwrap();
        std::fs::write(d.join("ports/1/link_layer"), "InfiniBand\n").unwrap();
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn p(parts: &[String]) -> Vec<String> {
    parts.to_vec()
}

/// A DGX H100 node. Which ConnectX-7 serves which GPU is NVIDIA's DGX H100 User Guide, table 6
/// ("Network Modules": mlx5_0 ibp24s0 GPU 0, mlx5_3 ibp64s0 GPU 1, mlx5_4 ibp79s0 GPU 2, mlx5_5
/// ibp94s0 GPU 3, mlx5_6 ibp154s0 GPU 4, mlx5_9 ibp192s0 GPU 5, mlx5_10 ibp206s0 GPU 6, mlx5_11
/// ibp220s0 GPU 7; the NIC's PCI bus is in its interface name); each pair sits behind one PCIe
/// switch, which `nvidia-smi topo -m` prints as PIX, GPUs 0-3 on NUMA node 0 and 4-7 on 1. The
/// GPUs' buses (1b, 43, 52, 61, 9d, c3, d1, df) are those of a published `nvidia-smi` listing of
/// an 8 x H100 80GB HBM3 node with two Xeon Platinum 8480C (the DGX H100's CPUs; driver
/// 535.161.08, a host named `hidon`, a hardware report found through code search whose repository
/// was not recorded); the tree between them is modelled, not read off that node. The
/// storage and in-band NICs (mlx5_1, 2, 7, 8) are left out. `skip`: GPUs not on the bus.
fn dgx_h100(tag: &str, skip: &[usize]) -> Tree {
    let t = Tree::new(tag);
    let gpus = [0x1b, 0x43, 0x52, 0x61, 0x9d, 0xc3, 0xd1, 0xdf];
    let nics = [
        (0, 0x18),
        (3, 0x40),
        (4, 0x4f),
        (5, 0x5e),
        (6, 0x9a),
        (9, 0xc0),
        (10, 0xce),
        (11, 0xdc),
    ];
    for (k, (&g, &(mlx, n))) in gpus.iter().zip(&nics).enumerate() {
        // Each pair its own root complex below its socket: root port, switch, one downstream
        // bridge to the GPU and one to the NIC.
        let rc = n - 4;
        let base = [
            format!("pci0000:{rc:02x}"),
            format!("0000:{rc:02x}:01.0"),
            format!("0000:{:02x}:00.0", rc + 1),
        ];
        let numa = if k < 4 { 0 } else { 1 };
        let mut nic = p(&base);
        nic.extend([format!("0000:{:02x}:01.0", rc + 2), format!("0000:{n:02x}:00.0")]);
        t.nic(&format!("mlx5_{mlx}"), &nic, numa);
        if !skip.contains(&k) {
            let mut gpu = p(&base);
            gpu.extend([format!("0000:{:02x}:02.0", rc + 2), format!("0000:{g:02x}:00.0")]);
            t.gpu(&gpu, numa);
        }
    }
    t
}

/// The rails `--rails auto` finds on `root`, as `pair` takes them.
fn rails(root: &Path) -> Vec<(String, Option<String>)> {
    crate::rail_ports::verbs_ports(root, &[])
        .into_iter()
        .map(|r| (r.name(), r.pci))
        .collect()
}

#[test]
fn each_dgx_h100_rail_gets_the_gpu_behind_its_switch() {
    let t = dgx_h100("h100", &[]);
    let r = rails(&t.root);
    let names: Vec<&str> = r.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "mlx5_0:1",
            "mlx5_3:1",
            "mlx5_4:1",
            "mlx5_5:1",
            "mlx5_6:1",
            "mlx5_9:1",
            "mlx5_10:1",
            "mlx5_11:1"
        ]
    );
    let v = pair(&t.root, &r);
    let got: Vec<(&str, &str, Affinity)> = v
        .iter()
        .map(|x| {
            let (g, a) = x.gpu.as_ref().unwrap();
            (x.nic.as_str(), g.as_str(), *a)
        })
        .collect();
    assert_eq!(
        got,
        [
            ("mlx5_0:1", "0000:1b:00.0", Affinity::Pix),
            ("mlx5_3:1", "0000:43:00.0", Affinity::Pix),
            ("mlx5_4:1", "0000:52:00.0", Affinity::Pix),
            ("mlx5_5:1", "0000:61:00.0", Affinity::Pix),
            ("mlx5_6:1", "0000:9d:00.0", Affinity::Pix),
            ("mlx5_9:1", "0000:c3:00.0", Affinity::Pix),
            ("mlx5_10:1", "0000:d1:00.0", Affinity::Pix),
            ("mlx5_11:1", "0000:df:00.0", Affinity::Pix),
        ]
    );
    assert!(v.iter().all(|x| x.warning().is_none()));
}

/// The rails in another order still find their own GPUs: the pairing follows the PCI tree, not
/// the rank's index.
#[test]
fn the_pairing_follows_the_tree_not_the_order() {
    let t = dgx_h100("order", &[]);
    let mut r = rails(&t.root);
    r.reverse();
    let v = pair(&t.root, &r);
    assert_eq!(v[0].nic, "mlx5_11:1");
    assert_eq!(v[0].gpu, Some(("0000:df:00.0".into(), Affinity::Pix)));
    assert_eq!(v[7].gpu, Some(("0000:1b:00.0".into(), Affinity::Pix)));
}

/// GPU 2 off the bus: its NIC shares the nearest GPU left, on its own socket (NODE), and is
/// named: no GPU is closer to it. The other seven keep their PIX pairs, each GPU once.
#[test]
fn a_missing_gpu_leaves_its_nic_with_a_node_pairing_named() {
    let t = dgx_h100("missing", &[2]);
    let v = pair(&t.root, &rails(&t.root));
    let lone = &v[2];
    assert_eq!(lone.nic, "mlx5_4:1");
    assert_eq!(lone.gpu, Some(("0000:1b:00.0".into(), Affinity::Node)));
    assert_eq!(lone.closer, None);
    assert_eq!(
        lone.warning().unwrap(),
        "NIC mlx5_4:1 and GPU 0000:1b:00.0 are NODE apart: GPUDirect traffic crosses host bridges; no GPU is \
         closer to it"
    );
    let pix = v
        .iter()
        .filter(|x| x.gpu.as_ref().is_some_and(|g| g.1 == Affinity::Pix))
        .count();
    assert_eq!(pix, 7);
}

/// Two NICs behind one switch with one GPU, the other GPU across the socket interconnect: the
/// first NIC takes the near GPU, the second the far one, and its warning names the closer GPU
/// and the NIC that took it.
#[test]
fn a_far_pairing_names_the_closer_gpu_and_who_has_it() {
    let t = Tree::new("far");
    let s: Vec<String> = ["pci0000:16", "0000:16:02.0", "0000:17:00.0"]
        .map(String::from)
        .to_vec();
    let with = |last: &[&str]| {
        let mut v = s.clone();
        v.extend(last.iter().map(|x| x.to_string()));
        v
    };
    t.gpu(&with(&["0000:17:01.0", "0000:18:00.0"]), 0);
    t.nic("mlx5_0", &with(&["0000:17:02.0", "0000:19:00.0"]), 0);
    t.nic("mlx5_1", &with(&["0000:17:03.0", "0000:1a:00.0"]), 0);
    t.gpu(&p(&["pci0000:97", "0000:97:02.0", "0000:9a:00.0"].map(String::from)), 1);
    let v = pair(&t.root, &rails(&t.root));
    assert_eq!(v[0].gpu, Some(("0000:18:00.0".into(), Affinity::Pix)));
    assert_eq!(v[1].gpu, Some(("0000:9a:00.0".into(), Affinity::Sys)));
    assert_eq!(
        v[1].warning().unwrap(),
        "NIC mlx5_1:1 and GPU 0000:9a:00.0 are SYS apart: GPUDirect traffic crosses the socket interconnect; GPU \
         0000:18:00.0 is closer (PIX), taken by mlx5_0:1"
    );
}

/// No place in the PCI tree (veth, Soft-RoCE) or no GPU: no pairing claimed.
#[test]
fn without_a_tree_or_gpus_there_is_no_pairing() {
    let t = dgx_h100("nogpu", &[0, 1, 2, 3, 4, 5, 6, 7]);
    let v = pair(&t.root, &rails(&t.root));
    assert!(v.iter().all(|x| x.gpu.is_none() && x.warning().is_none()));
    let v = pair(&t.root, &[("eth0".into(), None)]);
    assert_eq!(v[0].gpu, None);
}
