//! Test-only fault injection, so end-to-end tests can show what the tool does when a rank dies,
//! stalls or corrupts data. Read from `MESHRUN_FAULT`, e.g. `kill:rank=2:round=1`,
//! `stall:rank=1:round=0`, `corrupt:rank=1`, `gpu:rank=1` (a device call of that rank's GPU fails).
//! With `phase=NAME` a kill, stall or stop (SIGSTOP, a frozen process) happens when the rank
//! enters that phase (see `ranks::postmortem::enter`): `bootstrap`, `endpoints`, `connect`,
//! `pairwise` (a round), `retest`, a collective's name (`all_reduce`, ...) or `baseline`; e.g.
//! `stop:rank=1:phase=all_reduce`. Unset in normal runs; a malformed value is an error.

/// What to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// SIGKILL this rank itself.
    Kill,
    /// Stop answering (sleep) without exiting; the process still answers a post-mortem.
    Stall,
    /// SIGSTOP this rank itself: a frozen process, every thread stopped.
    Stop,
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
    /// The phase that triggers a kill, stall or stop (instead of a round).
    pub phase: Option<&'static str>,
    /// With a phase: kill or stop this many milliseconds after entering it (from another
    /// thread), so the rank dies or freezes in the middle of the phase's traffic.
    pub delay_ms: Option<u64>,
}

/// The variable read by [`Fault::from_env`].
pub const FAULT_ENV: &str = "MESHRUN_FAULT";

impl Fault {
    pub fn parse(s: &str) -> Result<Fault, String> {
        let mut parts = s.split(':');
        let kind = match parts.next() {
            Some("kill") => FaultKind::Kill,
            Some("stall") => FaultKind::Stall,
            Some("stop") => FaultKind::Stop,
            Some("corrupt") => FaultKind::Corrupt,
            Some("gpu") => FaultKind::Gpu,
            other => {
                return Err(format!(
                    "{FAULT_ENV}: unknown fault {other:?}; expected kill, stall, stop, corrupt or gpu"
                ))
            }
        };
        let (mut rank, mut round, mut phase, mut delay_ms) = (None, None, None, None);
        for p in parts {
            let (k, v) = p
                .split_once('=')
                .ok_or_else(|| format!("{FAULT_ENV}: `{p}` is not key=value"))?;
            if k == "phase" {
                if v.is_empty() {
                    return Err(format!("{FAULT_ENV}: phase= needs a name"));
                }
                // Parsed once per process, test use only: the name lives as long as it.
                phase = Some(&*Box::leak(v.to_string().into_boxed_str()));
                continue;
            }
            let v: usize = v.parse().map_err(|_| format!("{FAULT_ENV}: `{v}` is not a number"))?;
            match k {
                "rank" => rank = Some(v),
                "round" => round = Some(v),
                "delay" => delay_ms = Some(v as u64),
                _ => {
                    return Err(format!(
                        "{FAULT_ENV}: unknown key `{k}`; expected rank, round, phase or delay"
                    ))
                }
            }
        }
        let rank = rank.ok_or_else(|| format!("{FAULT_ENV}: missing rank=N"))?;
        Ok(Fault {
            kind,
            rank,
            round,
            phase,
            delay_ms,
        })
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

    /// Kill, stall or stop now, if this fault says so for this rank and round.
    pub fn maybe_die(this: Option<Fault>, rank: usize, round: usize) {
        let Some(f) = this.filter(|f| f.phase.is_none() && f.applies(rank, round)) else {
            return;
        };
        f.strike(rank, &format!("round {round}"));
    }

    /// Kill, stall or stop now, if this fault is for this rank and `phase` (the fault's phase
    /// name is the phase or its first word: `all_reduce` matches `all_reduce 1048576 B`).
    pub fn at_phase(this: Option<Fault>, rank: usize, phase: &str) {
        let Some(f) = this.filter(|f| f.rank == rank) else {
            return;
        };
        let Some(want) = f.phase else {
            return;
        };
        let hit = phase == want || phase.strip_prefix(want).is_some_and(|rest| rest.starts_with(' '));
        if !hit {
            return;
        }
        match f.delay_ms {
            Some(ms) if f.kind != FaultKind::Stall => {
                let at = format!("{phase} (+{ms} ms)");
                let _ = std::thread::Builder::new().spawn(move || {
                    std::thread::sleep(std::time::Duration::from_millis(ms));
                    f.strike(rank, &at);
                });
            }
            _ => f.strike(rank, phase),
        }
    }

    fn strike(self, rank: usize, at: &str) {
        use nix::sys::signal::{raise, Signal};
        // The wall-clock moment, so a test can time the job's end from the fault.
        let epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let at = format!("{at} (epoch {epoch:.3})");
        match self.kind {
            FaultKind::Kill => {
                eprintln!("meshrun: fault injection: rank {rank} kills itself at {at}");
                let _ = raise(Signal::SIGKILL);
            }
            FaultKind::Stop => {
                eprintln!("meshrun: fault injection: rank {rank} stops itself (SIGSTOP) at {at}");
                let _ = raise(Signal::SIGSTOP);
            }
            FaultKind::Stall => {
                eprintln!("meshrun: fault injection: rank {rank} stalls at {at}");
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
                round: Some(1),
                phase: None,
                delay_ms: None,
            }
        );
        let f = Fault::parse("stop:rank=1:phase=all_reduce").unwrap();
        assert_eq!((f.kind, f.rank, f.phase), (FaultKind::Stop, 1, Some("all_reduce")));
        assert!(Fault::parse("stop:rank=1:phase=").is_err());
        // Another rank, or a phase that only shares a prefix, does not trigger it (these return).
        Fault::at_phase(Some(f), 0, "all_reduce 8 B");
        Fault::at_phase(Some(f), 1, "all_reduce_x 8 B");
        Fault::at_phase(Some(f), 1, "baseline all_reduce 8 B");
        // A phase fault is not a round fault.
        Fault::maybe_die(Some(f), 1, 0);
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
