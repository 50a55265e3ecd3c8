//! `--p2p ipc|net` (or `MESHRUN_P2P`), else NCCL's `NCCL_P2P_DISABLE`: how a GPU run moves device
//! data between the ranks of one node, and where that choice came from for the run header.

use crate::cli::P2pArg;

/// NCCL's switch for its peer-to-peer transport: `1` turns it off (hops go over the network).
pub const NCCL_P2P_DISABLE: &str = "NCCL_P2P_DISABLE";

/// The path asked for between ranks of one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum P2pChoice {
    /// Nothing asked: IPC where every rank of a node can open the others' buffers, else the
    /// network, with the reason in the header.
    Auto,
    /// IPC, and a failure to open a peer's buffer is an error.
    Ipc,
    Net,
}

/// The choice and where it came from (None for the default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct P2p {
    pub choice: P2pChoice,
    pub source: Option<String>,
}

/// By precedence: `--p2p` or `MESHRUN_P2P` (parsed by clap into `flag`, `from_env` saying
/// which), then `NCCL_P2P_DISABLE` (`1` is net, `0` or empty is the default).
pub fn p2p(flag: Option<P2pArg>, from_env: bool, env: &dyn Fn(&str) -> Option<String>) -> Result<P2p, String> {
    if let Some(f) = flag {
        let (choice, name) = match f {
            P2pArg::Ipc => (P2pChoice::Ipc, "ipc"),
            P2pArg::Net => (P2pChoice::Net, "net"),
        };
        let source = match from_env {
            true => format!("MESHRUN_P2P={name}"),
            false => format!("--p2p {name}"),
        };
        return Ok(P2p {
            choice,
            source: Some(source),
        });
    }
    let default = P2p {
        choice: P2pChoice::Auto,
        source: None,
    };
    match env(NCCL_P2P_DISABLE).as_deref().map(str::trim) {
        None | Some("") | Some("0") => Ok(default),
        Some("1") => Ok(P2p {
            choice: P2pChoice::Net,
            source: Some(format!("{NCCL_P2P_DISABLE}=1")),
        }),
        Some(v) => Err(format!(
            "{NCCL_P2P_DISABLE}={v}: expected 0 (peer-to-peer allowed) or 1 (disabled); or give --p2p ipc|net"
        )),
    }
}

/// [`p2p`] of `--p2p` as clap parsed it (`m`, the subcommand's matches).
pub fn from_matches(
    flag: Option<P2pArg>,
    m: &clap::ArgMatches,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<P2p, String> {
    let from_env = m.value_source("p2p") == Some(clap::parser::ValueSource::EnvVariable);
    p2p(flag, from_env, env)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_wins_then_nccls_variable() {
        let none = |_: &str| None;
        let nccl = |v: &'static str| move |k: &str| (k == NCCL_P2P_DISABLE).then(|| v.to_string());
        assert_eq!(p2p(None, false, &none).unwrap().choice, P2pChoice::Auto);
        let p = p2p(None, false, &nccl("1")).unwrap();
        assert_eq!(
            (p.choice, p.source.as_deref()),
            (P2pChoice::Net, Some("NCCL_P2P_DISABLE=1"))
        );
        assert_eq!(p2p(None, false, &nccl("0")).unwrap().choice, P2pChoice::Auto);
        let p = p2p(Some(P2pArg::Ipc), false, &nccl("1")).unwrap();
        assert_eq!((p.choice, p.source.as_deref()), (P2pChoice::Ipc, Some("--p2p ipc")));
        let p = p2p(Some(P2pArg::Net), true, &none).unwrap();
        assert_eq!(p.source.as_deref(), Some("MESHRUN_P2P=net"));
        let e = p2p(None, false, &nccl("yes")).unwrap_err();
        assert!(e.starts_with("NCCL_P2P_DISABLE=yes: expected 0"), "{e}");
    }
}
