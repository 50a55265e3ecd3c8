//! Test-only fault injection, so end-to-end tests can show what the tool does when a rank dies,
//! stalls or corrupts data. Read from `MESHRUN_FAULT`, e.g. `kill:rank=2:round=1`,
//! `stall:rank=1:round=0`, `corrupt:rank=1`, `gpu:rank=1` (a device call of that rank's GPU fails).
//! With `phase=NAME` a kill, stall or stop (SIGSTOP, a frozen process) happens when the rank
//! enters that phase (see `ranks::postmortem::enter`): `bootstrap`, `endpoints`, `connect`,
//! `pairwise` (a round), `retest`, a collective's name (`all_reduce`, ...) or `baseline`; e.g.
//! `stop:rank=1:phase=all_reduce`; `pause:rank=2:phase=pairwise:delay=300:for=1500` freezes the
//! whole process 300 ms into the phase for 1.5 s and lets it go on (a slow pair, so a retest
//! follows). Several faults are separated by commas, e.g.
//! `pause:rank=2:phase=pairwise:delay=2000,stop:rank=1:phase=retest`. Unset in normal runs; a
//! malformed value is an error.
//!
//! The faults are a hook registered once at start ([`install_from_env`]), as the post-mortem's
//! phase hook is: production functions take no fault parameter, they ask [`at_round`],
//! [`corrupts`] and [`fails_gpu`], which answer "no" in every process that installed nothing.

/// What to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// SIGKILL this rank itself.
    Kill,
    /// Stop answering (sleep) without exiting; the process still answers a post-mortem.
    Stall,
    /// SIGSTOP this rank itself: a frozen process, every thread stopped.
    Stop,
    /// Freeze the process (SIGSTOP) `delay` ms into the phase for `for` ms, then go on.
    Pause,
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
    /// How long a pause lasts, milliseconds.
    pub for_ms: Option<u64>,
}

/// The variable read by [`install_from_env`].
pub const FAULT_ENV: &str = "MESHRUN_FAULT";

impl Fault {
    pub fn parse(s: &str) -> Result<Fault, String> {
        let mut parts = s.split(':');
        let kind = match parts.next() {
            Some("kill") => FaultKind::Kill,
            Some("stall") => FaultKind::Stall,
            Some("stop") => FaultKind::Stop,
            Some("pause") => FaultKind::Pause,
            Some("corrupt") => FaultKind::Corrupt,
            Some("gpu") => FaultKind::Gpu,
            other => {
                return Err(format!(
                    "{FAULT_ENV}: unknown fault {other:?}; expected kill, stall, stop, pause, corrupt or gpu"
                ))
            }
        };
        let (mut rank, mut round, mut phase, mut delay_ms, mut for_ms) = (None, None, None, None, None);
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
                "for" => for_ms = Some(v as u64),
                _ => {
                    return Err(format!(
                        "{FAULT_ENV}: unknown key `{k}`; expected rank, round, phase, delay or for"
                    ))
                }
            }
        }
        let rank = rank.ok_or_else(|| format!("{FAULT_ENV}: missing rank=N"))?;
        if kind == FaultKind::Pause && (phase.is_none() || for_ms.is_none()) {
            return Err(format!("{FAULT_ENV}: pause needs phase=NAME and for=MS"));
        }
        Ok(Fault {
            kind,
            rank,
            round,
            phase,
            delay_ms,
            for_ms,
        })
    }

    /// Every fault configured in the environment (comma-separated), in order.
    pub fn list_from_env() -> Result<Vec<Fault>, String> {
        match std::env::var(FAULT_ENV) {
            Ok(s) if !s.is_empty() => s.split(',').map(Fault::parse).collect(),
            _ => Ok(Vec::new()),
        }
    }

    fn applies(&self, rank: usize, round: usize) -> bool {
        self.phase.is_none() && self.rank == rank && self.round.is_none_or(|r| r == round)
    }

    /// Whether this fault is for `phase`: its phase name is the phase or the phase's first word.
    pub fn matches_phase(&self, phase: &str) -> bool {
        self.phase
            .is_some_and(|want| phase == want || phase.strip_prefix(want).is_some_and(|rest| rest.starts_with(' ')))
    }

    /// Kill, stall, stop or pause now, or `delay_ms` after entering the phase (from another
    /// thread, so the rank dies or freezes in the middle of the phase's traffic).
    fn strike_at_phase(self, rank: usize, phase: &str) {
        match self.delay_ms {
            Some(ms) if self.kind != FaultKind::Stall => {
                let at = format!("{phase} (+{ms} ms)");
                let _ = std::thread::Builder::new().spawn(move || {
                    std::thread::sleep(std::time::Duration::from_millis(ms));
                    self.strike(rank, &at);
                });
            }
            _ => self.strike(rank, phase),
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
                ranks::eline!("meshrun: fault injection: rank {rank} kills itself at {at}");
                let _ = raise(Signal::SIGKILL);
            }
            FaultKind::Stop => {
                ranks::eline!("meshrun: fault injection: rank {rank} stops itself (SIGSTOP) at {at}");
                let _ = raise(Signal::SIGSTOP);
            }
            FaultKind::Stall => {
                ranks::eline!("meshrun: fault injection: rank {rank} stalls at {at}");
                loop {
                    std::thread::sleep(std::time::Duration::from_secs(3600));
                }
            }
            FaultKind::Pause => {
                let ms = self.for_ms.unwrap_or(0);
                ranks::eline!("meshrun: fault injection: rank {rank} freezes for {ms} ms at {at}");
                // Something outside this process must wake it: a shell that sleeps, then sends
                // SIGCONT.
                let pid = std::process::id();
                let waker = std::process::Command::new("sh")
                    .args(["-c", &format!("sleep {}; kill -CONT {pid}", ms as f64 / 1000.0)])
                    .spawn();
                if waker.is_ok() {
                    let _ = raise(Signal::SIGSTOP);
                }
            }
            FaultKind::Corrupt | FaultKind::Gpu => {}
        }
    }
}

/// The faults this process registered at start; empty (no fault anywhere) unless
/// [`install_from_env`] found MESHRUN_FAULT set.
static INSTALLED: std::sync::OnceLock<Vec<Fault>> = std::sync::OnceLock::new();

/// Register MESHRUN_FAULT's faults for this process (once, before the rank's first phase): the
/// round, corruption and GPU faults for [`at_round`], [`corrupts`] and [`fails_gpu`], and the
/// phase faults as the post-mortem's phase hook. A malformed value is an error; unset, nothing
/// is registered.
pub fn install_from_env() -> Result<(), String> {
    let faults = Fault::list_from_env()?;
    if faults.is_empty() {
        return Ok(());
    }
    install_phase_hook(faults.iter().filter(|f| f.phase.is_some()).copied().collect());
    let _ = INSTALLED.set(faults);
    Ok(())
}

fn installed() -> &'static [Fault] {
    INSTALLED.get().map_or(&[], Vec::as_slice)
}

/// A kill, stall, stop or pause at each phase a fault names, for this rank (known from the MPI
/// launcher's environment before MPI starts). Each fault strikes at the first phase it matches,
/// once.
fn install_phase_hook(faults: Vec<Fault>) {
    if faults.is_empty() {
        return;
    }
    let rank = ["OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"]
        .iter()
        .find_map(|v| std::env::var(v).ok()?.parse::<usize>().ok());
    let Some(rank) = rank else { return };
    let struck = std::sync::Mutex::new(vec![false; faults.len()]);
    ranks::postmortem::set_phase_hook(Box::new(move |phase| {
        for i in first_strikes(&faults, &struck, rank, phase) {
            faults[i].strike_at_phase(rank, phase);
        }
    }));
}

/// The faults (by index) that strike `rank` on entering `phase` for the first time, marked struck.
fn first_strikes(faults: &[Fault], struck: &std::sync::Mutex<Vec<bool>>, rank: usize, phase: &str) -> Vec<usize> {
    let mut s = struck.lock().unwrap_or_else(|p| p.into_inner());
    let hits: Vec<usize> = (0..faults.len())
        .filter(|&i| faults[i].rank == rank && !s[i] && faults[i].matches_phase(phase))
        .collect();
    for &i in &hits {
        s[i] = true;
    }
    hits
}

/// The first round fault (kill, stall or stop) of `faults` for this rank and round.
fn round_fault(faults: &[Fault], rank: usize, round: usize) -> Option<Fault> {
    faults
        .iter()
        .find(|f| matches!(f.kind, FaultKind::Kill | FaultKind::Stall | FaultKind::Stop) && f.applies(rank, round))
        .copied()
}

fn has(faults: &[Fault], kind: FaultKind, rank: usize, round: usize) -> bool {
    faults.iter().any(|f| f.kind == kind && f.applies(rank, round))
}

/// Kill, stall or stop now, if a registered fault says so for this rank and round.
pub fn at_round(rank: usize, round: usize) {
    if let Some(f) = round_fault(installed(), rank, round) {
        f.strike(rank, &format!("round {round}"));
    }
}

/// Whether data sent by this rank at this round should be corrupted.
pub fn corrupts(rank: usize, round: usize) -> bool {
    has(installed(), FaultKind::Corrupt, rank, round)
}

/// Whether this rank's GPU should fail a device call at this round.
pub fn fails_gpu(rank: usize, round: usize) -> bool {
    has(installed(), FaultKind::Gpu, rank, round)
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
                for_ms: None,
            }
        );
        let f = Fault::parse("stop:rank=1:phase=all_reduce").unwrap();
        assert_eq!((f.kind, f.rank, f.phase), (FaultKind::Stop, 1, Some("all_reduce")));
        assert!(Fault::parse("stop:rank=1:phase=").is_err());
        assert!(
            Fault::parse("pause:rank=1:phase=x").is_err(),
            "a pause needs its length"
        );
        let p = Fault::parse("pause:rank=2:phase=pairwise:delay=300:for=1500").unwrap();
        assert_eq!(
            (p.kind, p.delay_ms, p.for_ms),
            (FaultKind::Pause, Some(300), Some(1500))
        );
        // Another rank, or a phase that only shares a prefix, does not trigger it.
        let struck = std::sync::Mutex::new(vec![false]);
        assert!(first_strikes(&[f], &struck, 0, "all_reduce 8 B").is_empty());
        assert!(first_strikes(&[f], &struck, 1, "all_reduce_x 8 B").is_empty());
        assert!(first_strikes(&[f], &struck, 1, "baseline all_reduce 8 B").is_empty());
        assert_eq!(first_strikes(&[f], &struck, 1, "all_reduce 8 B"), vec![0]);
        assert!(
            first_strikes(&[f], &struck, 1, "all_reduce 16 B").is_empty(),
            "once only"
        );
        // A phase fault is not a round fault.
        assert_eq!(round_fault(&[f], 1, 0), None);
        let k = Fault::parse("kill:rank=2:round=1").unwrap();
        assert_eq!(round_fault(&[f, k], 2, 1), Some(k));
        assert_eq!(round_fault(&[k], 2, 0), None);
        assert_eq!(round_fault(&[k], 1, 1), None);
        assert_eq!(Fault::parse("corrupt:rank=0").unwrap().round, None);
        assert!(Fault::parse("explode:rank=1").is_err());
        assert!(Fault::parse("kill").is_err());
        assert!(Fault::parse("kill:rank=x").is_err());
        let c = Fault::parse("corrupt:rank=1").unwrap();
        let g = Fault::parse("gpu:rank=1").unwrap();
        assert!(has(&[c], FaultKind::Corrupt, 1, 7));
        assert!(!has(&[c], FaultKind::Corrupt, 0, 7));
        assert!(has(&[c, g], FaultKind::Gpu, 1, 0));
        assert!(!has(&[g], FaultKind::Gpu, 0, 0));
        assert!(!has(&[c], FaultKind::Gpu, 1, 0));
        assert_eq!(
            round_fault(&[c, g], 1, 0),
            None,
            "corruption and GPU faults do not kill"
        );
        // Nothing installed in this test process: every question answers no.
        assert!(!corrupts(1, 0) && !fails_gpu(1, 0));
    }
}
