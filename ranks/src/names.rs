//! The names of router addresses, as traceroute gives them: each address through the system
//! resolver (getnameinfo, in `sys.rs`), all of them in parallel threads under one deadline, so
//! a resolver that does not answer (a DNS server away, PTR queries dropped) costs the run
//! [`WITHIN`] at most; an address not named by then stays unnamed and is counted.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// How long all the lookups may take together: about traceroute's own wait for a name, so a run
/// whose resolver is down loses two seconds, not a DNS timeout per router.
pub const WITHIN: Duration = Duration::from_secs(2);

/// Threads that ask at once, at most (a big fabric has hundreds of router interfaces).
const THREADS: usize = 16;

/// What the lookups found: each named address's name, and how many addresses had no answer by
/// the deadline (an answer of "no name" is not counted: it is an answer).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Named {
    pub names: BTreeMap<IpAddr, String>,
    pub late: usize,
}

/// Each of `addrs` through the system resolver, all within `within`.
pub fn resolve(addrs: &[IpAddr], within: Duration) -> Named {
    resolve_with(addrs, within, crate::sys::name_of)
}

/// [`resolve`] with `lookup` as the resolver (tests give one of their own). Lookups still running
/// at the deadline are left to finish on their own; their answers are dropped.
pub fn resolve_with(
    addrs: &[IpAddr],
    within: Duration,
    lookup: impl Fn(IpAddr) -> Option<String> + Send + Sync + 'static,
) -> Named {
    let deadline = Instant::now() + within;
    let queue = Arc::new(Mutex::new(addrs.to_vec()));
    let lookup = Arc::new(lookup);
    let (tx, rx) = mpsc::channel();
    for _ in 0..addrs.len().min(THREADS) {
        let (queue, lookup, tx) = (Arc::clone(&queue), Arc::clone(&lookup), tx.clone());
        let spawned = std::thread::Builder::new().name("resolve".into()).spawn(move || loop {
            let next = queue.lock().ok().and_then(|mut q| q.pop());
            let Some(a) = next else { break };
            if tx.send((a, lookup(a))).is_err() {
                break;
            }
        });
        // A thread that could not start leaves its share to the others (or to the deadline).
        drop(spawned);
    }
    drop(tx);
    let mut named = Named::default();
    let mut answered = 0;
    while answered < addrs.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((a, name)) => {
                answered += 1;
                if let Some(n) = name {
                    named.names.insert(a, n);
                }
            }
            // The deadline passed, or every thread ended (none could start).
            Err(_) => break,
        }
    }
    named.late = addrs.len() - answered;
    named
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("an address")
    }

    /// A resolver read from a hosts file's text, as /etc/hosts is: an address, then its name.
    fn hosts_file(text: &'static str) -> impl Fn(IpAddr) -> Option<String> + Send + Sync + 'static {
        move |a| {
            text.lines()
                .filter_map(|l| {
                    let mut w = l.split_whitespace();
                    Some((w.next()?.parse::<IpAddr>().ok()?, w.next()?.to_string()))
                })
                .find(|(x, _)| *x == a)
                .map(|(_, n)| n)
        }
    }

    const BED_HOSTS: &str = "127.0.0.1 localhost\n10.80.0.1 mrls-leaf0\n10.101.0.2 mrls-spine1-leaf0\n";

    #[test]
    fn every_address_is_asked_and_those_with_a_name_are_named() {
        let addrs = [ip("10.80.0.1"), ip("10.101.0.2"), ip("10.100.0.2")];
        // A deadline no answer from a lookup in memory misses: all three answer.
        let n = resolve_with(&addrs, Duration::from_secs(600), hosts_file(BED_HOSTS));
        assert_eq!(n.late, 0);
        assert_eq!(n.names.len(), 2);
        assert_eq!(n.names[&ip("10.80.0.1")], "mrls-leaf0");
        assert_eq!(n.names[&ip("10.101.0.2")], "mrls-spine1-leaf0");
        // More addresses than threads: still each once.
        let many: Vec<IpAddr> = (0..40u8).map(|i| IpAddr::from([10, 1, 0, i])).collect();
        let n = resolve_with(&many, Duration::from_secs(600), |a| Some(format!("r-{a}")));
        assert_eq!((n.names.len(), n.late), (40, 0));
        assert_eq!(n.names[&ip("10.1.0.39")], "r-10.1.0.39");
    }

    #[test]
    fn a_lookup_that_never_answers_is_counted_late_and_the_deadline_holds() {
        let stuck = ip("10.100.0.2");
        let addrs = [ip("10.80.0.1"), stuck, ip("10.101.0.2")];
        let t = Instant::now();
        let n = resolve_with(&addrs, Duration::from_millis(300), move |a| {
            if a == stuck {
                // A resolver that never answers (its thread is left behind, as in a run).
                loop {
                    std::thread::park();
                }
            }
            hosts_file(BED_HOSTS)(a)
        });
        // The stuck one is never named; the others answered or, on a starved machine, are late
        // too: every address is one or the other.
        assert!(!n.names.contains_key(&stuck));
        assert!(n.late >= 1);
        assert_eq!(n.late + n.names.len(), 3);
        assert!(t.elapsed() >= Duration::from_millis(300));
    }

    #[test]
    fn nothing_to_ask_asks_nothing() {
        let n = resolve_with(&[], WITHIN, |_| -> Option<String> { panic!("asked") });
        assert_eq!(n, Named::default());
    }
}
