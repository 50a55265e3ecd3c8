//! NCCL's configuration files, read as NCCL reads them, so a check on a node uses the NICs, GID
//! index and traffic class its training jobs get from the same files (the Kubernetes RoCE guides
//! keep `NCCL_IB_GID_INDEX` in `/etc/nccl.conf`).
//!
//! NCCL (`src/misc/param.cc`, `initEnvFunc`) reads `$NCCL_CONF_FILE` where that is set and not
//! empty, else `~/.nccl.conf` (the home directory of the user the process runs as), and then
//! `/etc/nccl.conf`. Each line `NAME=VALUE` sets NAME unless it is set already, so the
//! environment comes first, then the first file, then `/etc/nccl.conf`. A line starting with `#`
//! and a line without `=` are skipped; the name is everything before the first `=` and the value
//! everything after it, nothing trimmed but a line end (`\n`, and `\r` as NCCL 2.2x+ strips it):
//! `NCCL_IB_HCA = mlx5` names a variable `NCCL_IB_HCA ` that nothing reads, as in NCCL.

use std::path::{Path, PathBuf};

/// NCCL's system-wide file.
pub const SYSTEM_FILE: &str = "/etc/nccl.conf";

/// The variables NCCL's files set, each with the file that set it, in NCCL's precedence.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NcclConf {
    values: Vec<(String, String, PathBuf)>,
}

impl NcclConf {
    /// The files NCCL would read here: `NCCL_CONF_FILE` (from `env`) or `home/.nccl.conf`,
    /// then `system` (`/etc/nccl.conf`). A file that cannot be read is skipped, as NCCL does.
    pub fn load(env: &dyn Fn(&str) -> Option<String>, home: Option<&Path>, system: &Path) -> NcclConf {
        let first = match env("NCCL_CONF_FILE").filter(|f| !f.is_empty()) {
            Some(f) => Some(PathBuf::from(f)),
            None => home.map(|h| h.join(".nccl.conf")),
        };
        let mut conf = NcclConf::default();
        for file in first.iter().map(PathBuf::as_path).chain([system]) {
            if let Ok(text) = std::fs::read_to_string(file) {
                conf.add(&text, file);
            }
        }
        conf
    }

    /// The lines of `text`, read from `file`, for the variables no earlier file set.
    pub fn add(&mut self, text: &str, file: &Path) {
        for (name, value) in lines(text) {
            if !self.values.iter().any(|(n, _, _)| *n == name) {
                self.values.push((name, value, file.to_path_buf()));
            }
        }
    }

    /// `var`'s value from the files, and the file that set it.
    pub fn get(&self, var: &str) -> Option<(&str, &Path)> {
        self.values
            .iter()
            .find(|(n, _, _)| n == var)
            .map(|(_, v, f)| (v.as_str(), f.as_path()))
    }
}

/// The `NAME=VALUE` lines of an NCCL configuration file, as NCCL splits them.
pub fn lines(text: &str) -> Vec<(String, String)> {
    text.split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

/// The home directory NCCL takes: the passwd entry of the user this process runs as.
pub fn home_dir() -> Option<PathBuf> {
    nix::unistd::User::from_uid(nix::unistd::getuid())
        .ok()
        .flatten()
        .map(|u| u.dir)
}

/// A variable's value as NCCL would see it: the environment's where it is set (even empty: NCCL
/// then ignores the files' value and the empty one means unset), else the files'; with the file
/// it came from.
pub fn lookup(env: &dyn Fn(&str) -> Option<String>, conf: &NcclConf, var: &str) -> Option<(String, Option<PathBuf>)> {
    match env(var) {
        Some(v) => Some((v, None)),
        None => conf.get(var).map(|(v, f)| (v.to_string(), Some(f.to_path_buf()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file as the Kubernetes RoCE guides write one, with the forms NCCL skips.
    const ETC: &str = "# RoCE v2 on the lossless class\nNCCL_IB_GID_INDEX=3\nNCCL_IB_TC=106\r\n\
                       NCCL_IB_HCA = mlx5\nno equals sign here\nNCCL_SOCKET_IFNAME==eth0\n#NCCL_IB_SL=3\n";

    #[test]
    fn lines_split_as_nccl_splits_them() {
        assert_eq!(
            lines(ETC),
            [
                ("NCCL_IB_GID_INDEX", "3"),
                ("NCCL_IB_TC", "106"),
                ("NCCL_IB_HCA ", " mlx5"),
                ("NCCL_SOCKET_IFNAME", "=eth0"),
            ]
            .map(|(a, b)| (a.to_string(), b.to_string()))
        );
    }

    #[test]
    fn the_environment_then_the_users_file_then_etc() {
        let dir = std::env::temp_dir().join(format!("meshrun-nccl-conf-{}", std::process::id()));
        let home = dir.join("home");
        std::fs::create_dir_all(&home).unwrap();
        let etc = dir.join("nccl.conf");
        std::fs::write(&etc, ETC).unwrap();
        std::fs::write(home.join(".nccl.conf"), "NCCL_IB_GID_INDEX=1\n").unwrap();
        let own = dir.join("job.conf");
        std::fs::write(&own, "NCCL_IB_TC=41\n").unwrap();
        let none = |_: &str| None;
        let conf = NcclConf::load(&none, Some(&home), &etc);
        // NCCL_CONF_FILE replaces ~/.nccl.conf; /etc/nccl.conf is still read after it.
        let with_own = |k: &str| (k == "NCCL_CONF_FILE").then(|| own.display().to_string());
        let conf_own = NcclConf::load(&with_own, Some(&home), &etc);
        let missing = NcclConf::load(&none, Some(&dir.join("nobody")), &dir.join("no.conf"));
        std::fs::remove_dir_all(&dir).unwrap();

        assert_eq!(
            conf.get("NCCL_IB_GID_INDEX"),
            Some(("1", home.join(".nccl.conf").as_path()))
        );
        assert_eq!(conf.get("NCCL_IB_TC"), Some(("106", etc.as_path())));
        assert_eq!(conf.get("NCCL_IB_HCA"), None);
        assert_eq!(conf_own.get("NCCL_IB_TC"), Some(("41", own.as_path())));
        assert_eq!(conf_own.get("NCCL_IB_GID_INDEX"), Some(("3", etc.as_path())));
        assert_eq!(missing, NcclConf::default());

        // The environment first, even set empty.
        let env = |k: &str| match k {
            "NCCL_IB_TC" => Some("0".to_string()),
            "NCCL_IB_GID_INDEX" => Some(String::new()),
            _ => None,
        };
        assert_eq!(lookup(&env, &conf, "NCCL_IB_TC"), Some(("0".into(), None)));
        assert_eq!(lookup(&env, &conf, "NCCL_IB_GID_INDEX"), Some((String::new(), None)));
        assert_eq!(
            lookup(&none, &conf, "NCCL_IB_GID_INDEX"),
            Some(("1".into(), Some(home.join(".nccl.conf"))))
        );
        assert_eq!(lookup(&none, &conf, "NCCL_IB_SL"), None);
    }
}
