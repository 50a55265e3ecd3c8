//! Test-only fault injection, so end-to-end tests can show what the tool does when a rank dies,
//! stalls or corrupts data. Read from `MESHRUN_FAULT`, e.g. `kill:rank=2:round=1`,
//! `stall:rank=1:round=0`, `corrupt:rank=1`, `gpu:rank=1` (a device call of that rank's GPU fails). Unset in normal runs; a malformed value is an error.

/// What to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// SIGKILL this rank itself.
    Kill,
    /// Stop answering (sleep) without exiting.
    Stall,
    /// Flip bits in data this rank sends.
    Corrupt,
    /// This rank's GPU fails a device call (as a GPU with an Xid error would).
    Gpu,
}

/// A fault for one rank, at one round or step (any step when `round` is None).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    pub kind: FaultKind,
    pub rank: usize,
    pub round: Option<usize>,
}

/// The variable read by [`Fault::from_env`].
pub const FAULT_ENV: &str = "MESHRUN_FAULT";

impl Fault {
    pub fn parse(s: &str) -> Result<Fault, String> {
        let mut parts = s.split(':');
        let kind = match parts.next() {
            Some("kill") => FaultKind::Kill,
            Some("stall") => FaultKind::Stall,
            Some("corrupt") => FaultKind::Corrupt,
            Some("gpu") => FaultKind::Gpu,
            other => {
                return Err(format!(
                    "{FAULT_ENV}: unknown fault {other:?}; expected kill, stall, corrupt or gpu"
                ))
            }
        };
        let (mut rank, mut round) = (None, None);
        for p in parts {
            let (k, v) = p
                .split_once('=')
                .ok_or_else(|| format!("{FAULT_ENV}: `{p}` is not key=value"))?;
            let v: usize = v.parse().map_err(|_| format!("{FAULT_ENV}: `{v}` is not a number"))?;
            match k {
                "rank" => rank = Some(v),
                "round" => round = Some(v),
                _ => return Err(format!("{FAULT_ENV}: unknown key `{k}`; expected rank or round")),
            }
        }
        let rank = rank.ok_or_else(|| format!("{FAULT_ENV}: missing rank=N"))?;
        Ok(Fault { kind, rank, round })
    }

    /// The fault configured in the environment, if any.
    pub fn from_env() -> Result<Option<Fault>, String> {
        match std::env::var(FAULT_ENV) {
            Ok(s) if !s.is_empty() => Fault::parse(&s).map(Some),
            _ => Ok(None),
        }
    }

    fn applies(&self, rank: usize, round: usize) -> bool {
        self.rank == rank && self.round.is_none_or(|r| r == round)
    }

    /// Kill or stall now, if this fault says so for this rank and round.
    pub fn maybe_die(this: Option<Fault>, rank: usize, round: usize) {
        let Some(f) = this.filter(|f| f.applies(rank, round)) else {
            return;
        };
        match f.kind {
            FaultKind::Kill => {
                eprintln!("meshrun: fault injection: rank {rank} kills itself at round {round}");
                let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
            }
            FaultKind::Stall => {
                eprintln!("meshrun: fault injection: rank {rank} stalls at round {round}");
                loop {
                    std::thread::sleep(std::time::Duration::from_secs(3600));
                }
            }
            FaultKind::Corrupt | FaultKind::Gpu => {}
        }
    }

    /// Whether this rank's GPU should fail a device call at this round.
    pub fn fails_gpu(this: Option<Fault>, rank: usize, round: usize) -> bool {
        this.is_some_and(|f| f.kind == FaultKind::Gpu && f.applies(rank, round))
    }

    /// Whether data sent by this rank at this round should be corrupted.
    pub fn corrupts(this: Option<Fault>, rank: usize, round: usize) -> bool {
        this.is_some_and(|f| f.kind == FaultKind::Corrupt && f.applies(rank, round))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects() {
        assert_eq!(
            Fault::parse("kill:rank=2:round=1").unwrap(),
            Fault {
                kind: FaultKind::Kill,
                rank: 2,
                round: Some(1)
            }
        );
        assert_eq!(Fault::parse("corrupt:rank=0").unwrap().round, None);
        assert!(Fault::parse("explode:rank=1").is_err());
        assert!(Fault::parse("kill").is_err());
        assert!(Fault::parse("kill:rank=x").is_err());
        assert!(Fault::corrupts(Some(Fault::parse("corrupt:rank=1").unwrap()), 1, 7));
        assert!(!Fault::corrupts(Some(Fault::parse("corrupt:rank=1").unwrap()), 0, 7));
        assert!(Fault::fails_gpu(Some(Fault::parse("gpu:rank=1").unwrap()), 1, 0));
        assert!(!Fault::fails_gpu(Some(Fault::parse("gpu:rank=1").unwrap()), 0, 0));
        assert!(!Fault::fails_gpu(Some(Fault::parse("corrupt:rank=1").unwrap()), 1, 0));
    }
}
