//! The control port: one listening socket and one thread per rank, the alarm a failing rank
//! sends, and the collectors' query of every rank.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use super::root_cause::{root_cause, RankOutcome, StalledJob};
use super::{current_report, lock, say, ANSWER, EXIT_STALL, IN_POSTMORTEM, WINDOW};
use crate::wire::{self, ControlEndpoint, ControlFrame, ControlKind, JobToken, Record, StallReport};
use crate::World;

pub(super) struct Control {
    pub(super) rank: usize,
    size: usize,
    token: JobToken,
    endpoints: Vec<ControlEndpoint>,
    hosts: Vec<String>,
    pub(super) verbose: bool,
}

static CONTROL: OnceLock<Control> = OnceLock::new();

pub(super) fn get() -> Option<&'static Control> {
    CONTROL.get()
}

pub(super) fn my_rank() -> usize {
    CONTROL.get().map_or(0, |c| c.rank)
}

/// Open this rank's control port on `ip` and learn every rank's (one MPI allgather and one
/// broadcast of a token). Never fails: a rank that cannot listen announces no port, and the
/// post-mortem then says nothing is known about it. Call once, on every rank.
pub fn start(world: &World, ip: Option<IpAddr>, verbose: bool) {
    let listener = ip.and_then(|ip| TcpListener::bind(SocketAddr::new(ip, 0)).ok());
    let me = ControlEndpoint {
        addr: listener.as_ref().and_then(|l| l.local_addr().ok()),
        pid: std::process::id(),
    };
    let mut token = [0u8; 16];
    if world.rank() == 0 {
        if let Ok(t) = crate::tcp::random_token() {
            token = t;
        }
    }
    let all = world.all_gather_bytes(&me.to_bytes(), "exchanging control endpoints");
    world.broadcast_bytes(&mut token, "sharing the control token");
    let endpoints = wire::decode_all::<ControlEndpoint>(&all, "control endpoints")
        .unwrap_or_else(|_| vec![ControlEndpoint { addr: None, pid: 0 }; world.size()]);
    let c = Control {
        rank: world.rank(),
        size: world.size(),
        token,
        endpoints,
        hosts: world.hosts().to_vec(),
        verbose,
    };
    if CONTROL.set(c).is_err() {
        return;
    }
    // An MPI step that times out becomes an alarm too.
    crate::watchdog::set_on_expiry(|msg| {
        super::fail(crate::wire::WaitState::WaitingInMpi, None, Duration::ZERO, msg, false)
    });
    if let Some(l) = listener {
        let _ = std::thread::Builder::new()
            .name("meshrun-control".into())
            .spawn(move || serve(l));
    }
}

fn collectors(c: &Control) -> Vec<usize> {
    let mut v = vec![0, c.size.saturating_sub(1)];
    v.dedup();
    v
}

/// Answer queries and take alarms, one connection at a time (each bounded by [`ANSWER`]).
fn serve(l: TcpListener) {
    let Some(c) = get() else { return };
    for conn in l.incoming() {
        let Ok(mut s) = conn else { continue };
        let from = s.peer_addr().ok();
        let _ = s.set_read_timeout(Some(ANSWER));
        let _ = s.set_write_timeout(Some(ANSWER));
        let mut buf = vec![0u8; ControlFrame::LEN];
        let frame = s
            .read_exact(&mut buf)
            .ok()
            .and_then(|_| ControlFrame::check(&buf, &c.token));
        match frame {
            Some(f) if f.kind == ControlKind::Alarm => take_alarm(c, f.report),
            Some(f) if f.kind == ControlKind::Query => {
                IN_POSTMORTEM.store(true, Ordering::SeqCst);
                let answer = ControlFrame {
                    token: c.token,
                    kind: ControlKind::Answer,
                    report: current_report(),
                };
                let _ = s.write_all(&answer.to_bytes());
            }
            _ => {
                if c.verbose {
                    say(&format!(
                        "rank {} ({}): ignored a connection to its control port{}: not a control message of this job",
                        c.rank,
                        c.hosts.get(c.rank).map_or("?", String::as_str),
                        from.map(|a| format!(" from {a}")).unwrap_or_default()
                    ));
                }
            }
        }
    }
}

struct Collected {
    started: bool,
    reports: BTreeMap<usize, StallReport>,
}

fn collected() -> &'static Mutex<Collected> {
    static C: OnceLock<Mutex<Collected>> = OnceLock::new();
    C.get_or_init(|| {
        Mutex::new(Collected {
            started: false,
            reports: BTreeMap::new(),
        })
    })
}

/// A collector takes an alarm; the first starts the post-mortem.
fn take_alarm(c: &'static Control, report: StallReport) {
    if !collectors(c).contains(&c.rank) || report.rank as usize >= c.size {
        return;
    }
    IN_POSTMORTEM.store(true, Ordering::SeqCst);
    let mut g = lock(collected());
    g.reports.entry(report.rank as usize).or_insert(report);
    if !g.started {
        g.started = true;
        let _ = std::thread::Builder::new()
            .name("meshrun-postmortem".into())
            .spawn(move || collect(c));
    }
}

/// Send this rank's alarm to the collectors (itself included, in process).
pub(super) fn raise_alarm(c: &'static Control, report: &StallReport) {
    for col in collectors(c) {
        if col == c.rank {
            take_alarm(c, report.clone());
            continue;
        }
        let Some(addr) = c.endpoints.get(col).and_then(|e| e.addr) else {
            continue;
        };
        let frame = ControlFrame {
            token: c.token,
            kind: ControlKind::Alarm,
            report: report.clone(),
        };
        if let Ok(mut s) = TcpStream::connect_timeout(&addr, ANSWER) {
            let _ = s.set_write_timeout(Some(ANSWER));
            let _ = s.write_all(&frame.to_bytes());
        }
    }
}

/// Ask rank `r` for its state.
fn query(c: &Control, r: usize) -> RankOutcome {
    let Some(addr) = c.endpoints.get(r).and_then(|e| e.addr) else {
        return RankOutcome::Unknown;
    };
    let mut s = match TcpStream::connect_timeout(&addr, ANSWER) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => return RankOutcome::Refused,
        Err(_) => return RankOutcome::Unreachable,
    };
    let _ = s.set_read_timeout(Some(ANSWER));
    let _ = s.set_write_timeout(Some(ANSWER));
    let ask = ControlFrame {
        token: c.token,
        kind: ControlKind::Query,
        report: current_report(),
    };
    if s.write_all(&ask.to_bytes()).is_err() {
        return RankOutcome::Silent;
    }
    let mut buf = vec![0u8; ControlFrame::LEN];
    match s.read_exact(&mut buf) {
        Ok(()) => match ControlFrame::check(&buf, &c.token) {
            Some(f) if f.kind == ControlKind::Answer && f.report.rank as usize == r => RankOutcome::Reported(f.report),
            _ => RankOutcome::Silent,
        },
        // Reset or closed at once: the process went away between connect and answer.
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::UnexpectedEof
            ) =>
        {
            RankOutcome::Refused
        }
        Err(_) => RankOutcome::Silent,
    }
}

/// Wait for more alarms, query the rest, print the root cause (rank 0, or rank n-1 when rank 0
/// did not answer) and end the process with status 3.
fn collect(c: &'static Control) {
    std::thread::sleep(WINDOW);
    let reports = lock(collected()).reports.clone();
    let mut outcomes: Vec<Option<RankOutcome>> = (0..c.size)
        .map(|r| {
            if r == c.rank {
                Some(RankOutcome::Reported(current_report()))
            } else {
                reports.get(&r).cloned().map(RankOutcome::Reported)
            }
        })
        .collect();
    let ask: Vec<usize> = (0..c.size).filter(|&r| outcomes[r].is_none()).collect();
    // Up to 64 queries at a time, each bounded by ANSWER twice.
    for chunk in ask.chunks(64) {
        let got: Vec<(usize, RankOutcome)> = std::thread::scope(|s| {
            let hs: Vec<_> = chunk.iter().map(|&r| (r, s.spawn(move || query(c, r)))).collect();
            hs.into_iter()
                .map(|(r, h)| (r, h.join().unwrap_or(RankOutcome::Unknown)))
                .collect()
        });
        for (r, o) in got {
            outcomes[r] = Some(o);
        }
    }
    let outcomes: Vec<RankOutcome> = outcomes
        .into_iter()
        .map(|o| o.unwrap_or(RankOutcome::Unknown))
        .collect();
    let pids: Vec<u32> = c.endpoints.iter().map(|e| e.pid).collect();
    let job = StalledJob {
        hosts: &c.hosts,
        pids: &pids,
    };
    let v = root_cause(&job, c.rank, &outcomes, ANSWER);
    if !should_print(c.rank, &outcomes, reports.contains_key(&0), &v) {
        // The other collector says it; stay until the launcher ends the job (bounded).
        std::thread::sleep(super::FALLBACK);
        crate::exit_now(EXIT_STALL);
    }
    let mut text = format!("root cause of the stall: {}", v.line);
    if c.verbose {
        for (r, o) in outcomes.iter().enumerate() {
            text.push_str(&format!(
                "\nmeshrun: post-mortem: rank {r} ({}): {}",
                job_host(c, r),
                describe(o)
            ));
        }
    }
    say(&text);
    if let Some(hook) = super::CONCLUSION_HOOK.get() {
        hook(&conclusion(c, &v, &outcomes));
    }
    crate::exit_now(EXIT_STALL)
}

/// The root cause and every rank's state, as [`super::Conclusion`] gives them to a report.
fn conclusion(c: &Control, v: &super::root_cause::RootCause, outcomes: &[RankOutcome]) -> super::Conclusion {
    use crate::wire::WaitState;
    let ranks = outcomes
        .iter()
        .enumerate()
        .map(|(r, o)| {
            let mut s = super::RankState {
                rank: r,
                host: job_host(c, r).to_string(),
                state: "unknown",
                phase: String::new(),
                peer: None,
                waited_ms: 0,
                detail: String::new(),
            };
            match o {
                RankOutcome::Reported(rep) => {
                    s.state = match rep.state {
                        WaitState::Busy => "busy",
                        WaitState::WaitingOnPeer => "waiting_on_peer",
                        WaitState::WaitingInMpi => "waiting_in_mpi",
                        WaitState::PeerClosed => "peer_closed",
                    };
                    s.phase = rep.phase.clone();
                    s.peer = rep.peer.map(|p| p as usize);
                    s.waited_ms = rep.waited_ms;
                    s.detail = rep.detail.clone();
                }
                RankOutcome::Refused => s.state = "gone",
                RankOutcome::Silent => s.state = "silent",
                RankOutcome::Unreachable => s.state = "unreachable",
                RankOutcome::Unknown => {}
            }
            s
        })
        .collect();
    super::Conclusion {
        line: v.line.clone(),
        roots: v.roots.clone(),
        ranks,
    }
}

/// Whether this collector prints its root cause. Rank 0 does, and rank n-1 when rank 0 did not
/// answer, or is itself a root without having raised an alarm (`rank0_alarmed`: its deadline
/// expired, so it runs this post-mortem and prints). Neither prints a root cause naming itself
/// alone, which is what a collector that was stopped and woken again (mpirun sends SIGCONT before
/// it ends a job) would conclude from the others' stale alarms.
///
/// Rank 0's alarm keeps rank n-1 quiet even where n-1 concludes otherwise: a collector that
/// queries late (a loaded machine) can ask after rank 0 printed and left and mpirun woke the
/// frozen rank with SIGCONT; that rank then answers, and n-1 would name the link between rank 0
/// and it, a second root-cause line that contradicts the first (seen 1 in 12 runs of the
/// frozen-in-a-retest fault with both cores busy).
pub(super) fn should_print(
    me: usize,
    outcomes: &[RankOutcome],
    rank0_alarmed: bool,
    v: &super::root_cause::RootCause,
) -> bool {
    if v.roots == [me] {
        return false;
    }
    let rank0_answered = matches!(outcomes.first(), Some(RankOutcome::Reported(_)));
    me == 0 || !rank0_answered || (v.roots.contains(&0) && !rank0_alarmed)
}

fn job_host(c: &Control, r: usize) -> &str {
    c.hosts.get(r).map_or("?", String::as_str)
}

/// One rank's state in words, for `--verbose`.
fn describe(o: &RankOutcome) -> String {
    match o {
        RankOutcome::Reported(rep) => {
            let phase = if rep.phase.is_empty() { "-" } else { rep.phase.as_str() };
            match rep.state {
                crate::wire::WaitState::Busy => format!("alive, in {phase}, waiting on no peer"),
                _ if rep.detail.is_empty() => format!("{:?} in {phase}", rep.state),
                _ => format!("in {phase}: {}", rep.detail),
            }
        }
        RankOutcome::Refused => "gone (control port refuses connections)".into(),
        RankOutcome::Silent => "no answer (stopped or hung)".into(),
        RankOutcome::Unreachable => "unreachable".into(),
        RankOutcome::Unknown => "no control port".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::WaitState;

    fn rep(rank: u32, state: WaitState, peer: Option<u32>) -> RankOutcome {
        RankOutcome::Reported(StallReport {
            rank,
            pid: 100 + rank,
            state,
            peer,
            waited_ms: 3000,
            phase: "all_reduce 65536 B".into(),
            detail: format!("rank {rank} (vm): MPI step `before warm-up` did not finish within 3s"),
        })
    }

    fn root_cause_of(me: usize, o: &[RankOutcome]) -> (super::super::root_cause::RootCause, bool) {
        let hosts = vec!["vm".to_string(); o.len()];
        let pids: Vec<u32> = (0..o.len() as u32).map(|r| 100 + r).collect();
        let v = root_cause(
            &StalledJob {
                hosts: &hosts,
                pids: &pids,
            },
            me,
            o,
            ANSWER,
        );
        // Rank 0's outcome is its alarm where it waited on a peer (its deadline expired).
        let alarmed = matches!(&o[0], RankOutcome::Reported(r) if r.state != WaitState::Busy);
        let p = should_print(me, o, alarmed, &v);
        (v, p)
    }

    #[test]
    fn one_collector_prints_and_a_woken_one_does_not_blame_itself() {
        use WaitState::{Busy, WaitingInMpi};
        // Rank 1 frozen: rank 0 prints, rank 3 (rank 0 answered) stays quiet.
        let o = [
            rep(0, WaitingInMpi, None),
            RankOutcome::Silent,
            rep(2, WaitingInMpi, None),
            rep(3, WaitingInMpi, None),
        ];
        assert_eq!(root_cause_of(0, &o).0.roots, vec![1]);
        assert!(root_cause_of(0, &o).1);
        assert!(!root_cause_of(3, &o).1);
        // Rank 0 frozen: rank 3 prints.
        let o = [
            RankOutcome::Silent,
            rep(1, WaitingInMpi, None),
            rep(2, WaitingInMpi, None),
            rep(3, WaitingInMpi, None),
        ];
        assert!(root_cause_of(3, &o).1);
        // Rank 0 woken by mpirun's SIGCONT reads the others' stale alarms: it would name itself
        // alone, and says nothing (rank 3 already did).
        let o = [
            rep(0, Busy, None),
            rep(1, WaitingInMpi, None),
            rep(2, WaitingInMpi, None),
            rep(3, WaitingInMpi, None),
        ];
        let (v, p) = root_cause_of(0, &o);
        assert_eq!(v.roots, vec![0]);
        assert!(!p);
        // The same picture seen by rank 3 (rank 0 alive but stuck): rank 3 prints it.
        assert!(root_cause_of(3, &o).1);
        // Two ranks waiting on each other: rank 0, one end of the link, still prints.
        let o = [
            rep(0, WaitState::WaitingOnPeer, Some(1)),
            rep(1, WaitState::WaitingOnPeer, Some(0)),
        ];
        let (v, p) = root_cause_of(0, &o);
        assert_eq!(v.roots, vec![0, 1]);
        assert!(p);
        // Rank 3 asked late: rank 0 had printed and left, mpirun woke the frozen rank 1, which
        // answered. It would name the link between 0 and 1; rank 0's alarm keeps it quiet.
        let o = [
            rep(0, WaitState::WaitingOnPeer, Some(1)),
            rep(1, WaitState::PeerClosed, Some(0)),
            rep(2, WaitingInMpi, None),
            rep(3, WaitingInMpi, None),
        ];
        let (v, p) = root_cause_of(3, &o);
        assert!(v.roots.contains(&0), "{:?}", v.roots);
        assert!(!p);
        // Rank 0 in those roots without an alarm of its own (alive, waiting on nobody): rank 3
        // prints.
        let (v, p) = root_cause_of(
            3,
            &[
                rep(0, Busy, None),
                rep(1, WaitState::WaitingOnPeer, Some(0)),
                rep(2, WaitingInMpi, None),
                rep(3, WaitingInMpi, None),
            ],
        );
        assert!(v.roots.contains(&0), "{:?}", v.roots);
        assert!(p);
    }
}
