//! The routed leaf-spine bed on this machine (`scripts/leafspine`): bringing it up under the
//! machine lock the namespace clusters share, running `meshrun launch` from its first host, the
//! kernel's choice of spine for a 5-tuple (the oracle path traces are checked against), the part
//! an address belongs to, and code run inside a host's network namespace.

use std::net::Ipv4Addr;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::netns::MachineLock;
use crate::{mpi_env, root, run_bounded, Run};

/// A leaf-spine bed for the duration of a test (one namespace bed at a time on this machine).
pub struct LeafSpine {
    pub dir: PathBuf,
    pub leaves: usize,
    /// Hosts under each leaf.
    pub hosts: usize,
    pub spines: usize,
    _lock: MachineLock,
}

impl LeafSpine {
    /// `leaves` leaves of `hosts` hosts each, over `spines` spines, one slot per host; host links
    /// at 100 Mbit/s, cables at 200 Mbit/s (the script's defaults).
    pub fn up(leaves: usize, hosts: usize, spines: usize) -> LeafSpine {
        LeafSpine::up_rated(leaves, hosts, spines, "100mbit", "200mbit")
    }

    /// As [`LeafSpine::up`], host links at `host_rate` and cables at `cable_rate` (as tc takes
    /// them: `80mbit`).
    pub fn up_rated(leaves: usize, hosts: usize, spines: usize, host_rate: &str, cable_rate: &str) -> LeafSpine {
        assert!(
            nix::unistd::geteuid().is_root(),
            "the leaf-spine bed needs root (ip netns, unshare); run the tests as root, as CI does"
        );
        let bed = LeafSpine {
            dir: std::env::temp_dir().join(format!("meshrun-leafspine-{}", std::process::id())),
            leaves,
            hosts,
            spines,
            _lock: MachineLock::take(),
        };
        let mut cmd = Command::new(root().join("scripts/leafspine"));
        cmd.args(["up", &leaves.to_string(), &hosts.to_string(), &spines.to_string()])
            .env("MR_LS_DIR", &bed.dir)
            .env("MR_LS_HOST_RATE", host_rate)
            .env("MR_LS_CABLE_RATE", cable_rate);
        let r = run_bounded(&mut cmd, Duration::from_secs(60));
        assert_eq!(r.code, Some(0), "leafspine up failed:\n{}", r.all());
        bed
    }

    pub fn script(&self, args: &[&str]) -> Run {
        let mut cmd = Command::new(root().join("scripts/leafspine"));
        cmd.args(args).env("MR_LS_DIR", &self.dir);
        run_bounded(&mut cmd, Duration::from_secs(60))
    }

    /// Host `i`'s name (its namespace and host name).
    pub fn host(&self, i: usize) -> String {
        format!("mrls-h{i}")
    }

    /// Host `i`'s address: 10.80.LEAF.(10 + its place under the leaf).
    pub fn host_addr(&self, i: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, 80, (i / self.hosts) as u8, (10 + i % self.hosts) as u8)
    }

    /// The spine (`spine0` ..) host `src`'s leaf sends TCP `sport` -> `dport` to host `dst` over,
    /// as the leaf's kernel says (`ip route get`), or `local` under one leaf.
    pub fn spine_of(&self, src: usize, dst: usize, sport: u16, dport: u16) -> String {
        let r = self.script(&[
            "spine-of",
            &self.host(src),
            &self.host(dst),
            &sport.to_string(),
            &dport.to_string(),
        ]);
        r.expect_code(0);
        r.stdout.trim().to_string()
    }

    /// The part of the bed `addr` belongs to: `leaf1`, `spine0`, `mrls-h3` (the address plan
    /// in `scripts/leafspine`'s header).
    pub fn name_of(&self, addr: Ipv4Addr) -> String {
        let [a, b, c, d] = addr.octets();
        match (a, b, d) {
            (10, 80, 1) | (10, 100..=199, 1) => format!("leaf{c}"),
            (10, 80, d) if d >= 10 => self.host(usize::from(c) * self.hosts + usize::from(d) - 10),
            (10, 100..=199, 2) => format!("spine{}", b - 100),
            _ => format!("{addr} (not the bed's)"),
        }
    }

    /// The name `scripts/leafspine` gives router interface `addr` in the hosts' /etc/hosts:
    /// `mrls-leaf1` (a leaf's gateway), `mrls-leaf0-spine1` and `mrls-spine1-leaf0` (a cable's
    /// leaf and spine ends); None for a host's or another address.
    pub fn router_name(&self, addr: Ipv4Addr) -> Option<String> {
        let [a, b, c, d] = addr.octets();
        match (a, b, d) {
            (10, 80, 1) => Some(format!("mrls-leaf{c}")),
            (10, 100..=199, 1) => Some(format!("mrls-leaf{c}-spine{}", b - 100)),
            (10, 100..=199, 2) => Some(format!("mrls-spine{}-leaf{c}", b - 100)),
            _ => None,
        }
    }

    /// Run `f` on a thread inside host `i`'s network namespace: sockets it makes are the host's.
    pub fn in_host<T: Send>(&self, i: usize, f: impl FnOnce() -> T + Send) -> T {
        let ns = format!("/run/netns/{}", self.host(i));
        std::thread::scope(|s| {
            s.spawn(|| {
                let file = std::fs::File::open(&ns).unwrap_or_else(|e| panic!("{ns}: {e}"));
                // setns moves this thread alone; it ends with the scope.
                nix::sched::setns(file.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET)
                    .unwrap_or_else(|e| panic!("setns {ns}: {e}"));
                f()
            })
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
        })
    }

    /// Run `meshrun launch --hostfile ... --rsh-agent ... ARGS` from the first host.
    pub fn launch(&self, launch_args: &[&str], rank_args: &[&str], limit: Duration) -> Run {
        let line = crate::netns::launch_line(&self.dir, launch_args, rank_args);
        let mut cmd = Command::new(root().join("scripts/leafspine"));
        mpi_env(&mut cmd)
            .env("MR_LS_DIR", &self.dir)
            .args(["exec", &self.host(0)])
            .args(&line);
        run_bounded(&mut cmd, limit)
    }

    /// Take the bed down now and return the bed's namespaces still there (none, when `down`
    /// works), checked before the machine lock goes.
    pub fn down(self) -> Vec<String> {
        self.script(&["down"]).expect_code(0);
        let out = Command::new("ip")
            .args(["netns", "list"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        out.lines()
            .filter_map(|l| l.split_whitespace().next())
            .filter(|n| n.starts_with("mrls-"))
            .map(String::from)
            .collect()
    }
}

impl Drop for LeafSpine {
    /// `down` stops every flapper first, then takes the namespaces away (again, after
    /// [`LeafSpine::down`]: it finds nothing).
    fn drop(&mut self) {
        let _ = Command::new(root().join("scripts/leafspine"))
            .arg("down")
            .env("MR_LS_DIR", &self.dir)
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
