//! Queue pairs: pairwise's per test and the collectives' per peer, from `-q` (or `MESHRUN_QP`),
//! else NCCL's `NCCL_IB_QPS_PER_CONNECTION` where RDMA may be used, with where the number came from.

use ranks::verbs_mesh::MAX_LANES;

use super::nccl_conf::{lookup, NcclConf};
use super::source::{clap_source, Provenance, Source};
use crate::cli::TransportChoice;

/// NCCL's queue pairs per connection.
const NCCL_QPS: &str = "NCCL_IB_QPS_PER_CONNECTION";

/// What the queue pairs' number is made of: `-q`, where it came from, and NCCL's variable as
/// this rank's environment has it (used over RDMA only).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Qps {
    /// `-q`/`--qp` (or `MESHRUN_QP`).
    pub given: Option<u32>,
    /// Where `given` came from (None where clap took no value).
    pub source: Option<Source>,
    /// `NCCL_IB_QPS_PER_CONNECTION`.
    pub env: Option<String>,
    /// The NCCL configuration file that set it (None: the environment, or unset).
    pub file: Option<String>,
}

impl Qps {
    /// `-q` as clap parsed it (`m`, the subcommand's matches) and NCCL's variable from `env`,
    /// else from NCCL's configuration files `conf`.
    pub fn from_matches(
        given: Option<u32>,
        m: &clap::ArgMatches,
        env: &dyn Fn(&str) -> Option<String>,
        conf: &NcclConf,
    ) -> Qps {
        let (env, file) = lookup(env, conf, NCCL_QPS).map_or((None, None), |(v, f)| (Some(v), f));
        Qps {
            given,
            source: clap_source(m, "qps", "qp", || given.map(|n| n.to_string()).unwrap_or_default()),
            env,
            file: file.map(|f| f.display().to_string()),
        }
    }

    /// `-q` alone, no variable read (`meshrun launch`'s check of the rank command).
    pub fn from_flag(given: Option<u32>) -> Qps {
        Qps {
            given,
            ..Qps::default()
        }
    }

    /// NCCL's variable as [`qps`] reads it.
    fn env_fn(&self) -> impl Fn(&str) -> Option<String> + '_ {
        |k: &str| self.env.clone().filter(|_| k == NCCL_QPS)
    }

    /// Pairwise's queue pairs per test over a mesh with RDMA or not (see [`qps`]).
    pub fn per_test(&self, rdma: bool, header: &mut Option<String>) -> Result<u32, String> {
        qps(self.given, self.source.clone(), rdma, &self.env_fn()).map(|(n, from)| {
            self.note(from, header);
            n
        })
    }

    /// The run header's note of where the number came from (`from`, None for the flag).
    fn note(&self, from: Option<Source>, header: &mut Option<String>) {
        let Some(mut s) = from else { return };
        if let Source::Nccl { file, .. } = &mut s {
            file.clone_from(&self.file);
        }
        let line = Provenance { items: vec![("-q", s)] }.line().unwrap_or_default();
        *header = Some(match header.take() {
            Some(h) => format!("{h}; {line}"),
            None => line,
        });
    }

    /// The collectives' queue pairs per peer: `-q` (or `MESHRUN_QP`), else
    /// `NCCL_IB_QPS_PER_CONNECTION`, with where it came from when not the flag. The flag takes 1
    /// to [`MAX_LANES`]; NCCL's variable, which NCCL itself takes up to 128, is capped at that.
    pub fn lanes(&self, transport: TransportChoice) -> Result<(usize, Option<String>), String> {
        let mut note = None;
        // Read before the mesh exists: under `auto` the variable counts (and a bad value is an
        // error) even where the run ends up on TCP; `--transport tcp` ignores it, as the other
        // RDMA variables.
        let rdma = transport != TransportChoice::Tcp;
        let n = self.per_test(rdma, &mut note)? as usize;
        if self.given.is_some() && !(1..=MAX_LANES).contains(&n) {
            return Err(format!(
                "-q {n}: expected 1 to {MAX_LANES} queue pairs per peer (each needs staging slots of its own)"
            ));
        }
        if n > MAX_LANES {
            let capped = format!("capped to {MAX_LANES}, the most the collectives' mesh stripes over");
            note = Some(match note {
                Some(h) => format!("{h} ({capped})"),
                None => capped,
            });
        }
        Ok((n.min(MAX_LANES), note))
    }
}

/// The most queue pairs per test: NCCL's own limit per connection (NCCL_IB_MAX_QPS).
pub const MAX_QPS: u32 = 128;

/// Pairwise's queue pairs per test: `-q`/`--qp` (or `MESHRUN_QP`, `source` says which), else
/// `NCCL_IB_QPS_PER_CONNECTION` over RDMA, else 1; with where it came from when not the flag.
/// (The flag's range is checked with the other flags, in `crate::pairwise_cmd::config`.)
pub fn qps(
    given: Option<u32>,
    source: Option<Source>,
    rdma: bool,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(u32, Option<Source>), String> {
    let var = "NCCL_IB_QPS_PER_CONNECTION";
    let (n, from) = match (given, source) {
        (Some(n), s) => (n, s.filter(|s| *s != Source::Flag)),
        (None, _) => match env(var).filter(|v| !v.trim().is_empty() && rdma) {
            Some(v) => {
                let n = v
                    .trim()
                    .parse::<u32>()
                    .ok()
                    .filter(|n| (1..=MAX_QPS).contains(n))
                    .ok_or_else(|| format!("{var}={v}: expected a whole number from 1 to {MAX_QPS}"))?;
                let resolved = n.to_string();
                (
                    n,
                    Some(Source::Nccl {
                        var: var.into(),
                        value: v,
                        resolved,
                        file: None,
                    }),
                )
            }
            None => return Ok((1, None)),
        },
    };
    Ok((n, from))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `-q` as given (`given`, from `source`) and NCCL's variable (`env`, set in `file`).
    fn q(given: Option<u32>, source: Option<Source>, env: Option<&str>, file: Option<&str>) -> Qps {
        Qps {
            given,
            source,
            env: env.map(str::to_string),
            file: file.map(str::to_string),
        }
    }

    #[test]
    fn queue_pairs_from_the_flag_meshrun_qp_or_nccl() {
        let nccl = Some("4");
        // Nothing given, nothing set: one.
        let mut h = None;
        assert_eq!(q(None, None, None, None).per_test(true, &mut h), Ok(1));
        assert_eq!(h, None);
        // NCCL's variable over RDMA, said in the header after what is there.
        let mut h = Some("--tclass 106 from NCCL_IB_TC=106".to_string());
        assert_eq!(q(None, None, nccl, None).per_test(true, &mut h), Ok(4));
        assert_eq!(
            h.as_deref(),
            Some("--tclass 106 from NCCL_IB_TC=106; -q 4 from NCCL_IB_QPS_PER_CONNECTION=4")
        );
        // Set in an NCCL configuration file: the file is named.
        let mut h = None;
        let from_file = q(None, None, nccl, Some("/etc/nccl.conf"));
        assert_eq!(from_file.per_test(true, &mut h), Ok(4));
        assert_eq!(
            h.as_deref(),
            Some("-q 4 from NCCL_IB_QPS_PER_CONNECTION=4 in /etc/nccl.conf")
        );
        // The flag wins and says nothing; MESHRUN_QP is named.
        let mut h = None;
        assert_eq!(q(Some(2), Some(Source::Flag), nccl, None).per_test(true, &mut h), Ok(2));
        assert_eq!(h, None);
        let m = Some(Source::Meshrun("MESHRUN_QP".into(), "8".into()));
        assert_eq!(q(Some(8), m, nccl, None).per_test(true, &mut h), Ok(8));
        assert_eq!(h.as_deref(), Some("-q 8 from MESHRUN_QP"));
        // Over TCP NCCL's IB variable does not apply.
        let mut h = None;
        assert_eq!(q(None, None, nccl, None).per_test(false, &mut h), Ok(1));
        assert_eq!(h, None);
        // A bad value is one line naming the variable and the range.
        for bad in ["0", "129", "four"] {
            assert_eq!(
                q(None, None, Some(bad), None).per_test(true, &mut None),
                Err(format!(
                    "NCCL_IB_QPS_PER_CONNECTION={bad}: expected a whole number from 1 to 128"
                ))
            );
        }
    }

    fn coll(given: Option<u32>, env: Option<&str>) -> Qps {
        q(given, given.map(|_| Source::Flag), env, None)
    }

    #[test]
    fn queue_pairs_per_peer_from_the_flag_or_nccl_and_their_bounds() {
        let auto = TransportChoice::Auto;
        assert_eq!(coll(None, None).lanes(auto), Ok((1, None)), "default: one");
        assert_eq!(coll(Some(4), None).lanes(auto), Ok((4, None)));
        assert_eq!(coll(Some(16), None).lanes(auto), Ok((16, None)));
        for bad in [0, 17] {
            let e = coll(Some(bad), None).lanes(auto).unwrap_err();
            assert_eq!(
                e,
                format!("-q {bad}: expected 1 to 16 queue pairs per peer (each needs staging slots of its own)")
            );
        }
        assert_eq!(
            coll(None, Some("4")).lanes(auto),
            Ok((4, Some("-q 4 from NCCL_IB_QPS_PER_CONNECTION=4".into())))
        );
        // The flag wins over NCCL's variable.
        assert_eq!(coll(Some(2), Some("8")).lanes(auto), Ok((2, None)));
        // NCCL takes up to 128: meshrun stripes over 16 at most, and says so.
        let (n, note) = coll(None, Some("32")).lanes(auto).unwrap();
        assert_eq!(n, 16);
        assert_eq!(
            note.as_deref(),
            Some(
                "-q 32 from NCCL_IB_QPS_PER_CONNECTION=32 (capped to 16, the most the collectives' mesh stripes over)"
            )
        );
        assert_eq!(
            coll(None, Some("many")).lanes(auto).unwrap_err(),
            "NCCL_IB_QPS_PER_CONNECTION=many: expected a whole number from 1 to 128"
        );
        // --transport tcp ignores NCCL's RDMA variables, this one too.
        assert_eq!(coll(None, Some("many")).lanes(TransportChoice::Tcp), Ok((1, None)));
    }
}
