//! Measure the TCP mesh alone: two ranks (threads) on loopback swap SIZE bytes both ways, N times.
//!     cargo run --release -p ranks --example exchange_rate -- [SIZE] [N]
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use ranks::tcp::{random_token, TcpListening};
use ranks::{Op, Transport};

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let size = args.first().copied().unwrap_or(1 << 20);
    let n = args.get(1).copied().unwrap_or(500);
    let token = random_token().expect("token");
    let l: Vec<TcpListening> = (0..2)
        .map(|_| TcpListening::bind(IpAddr::V4(Ipv4Addr::LOCALHOST)).expect("bind"))
        .collect();
    let eps: Vec<_> = l.iter().map(|x| x.local_addr()).collect();
    let hosts = vec!["a".to_string(), "b".to_string()];
    let hs: Vec<_> = l
        .into_iter()
        .enumerate()
        .map(|(r, l)| {
            let (eps, hosts) = (eps.clone(), hosts.clone());
            std::thread::spawn(move || {
                let mut m = l
                    .connect_all(r, &eps, hosts, token, Duration::from_secs(10))
                    .expect("connect");
                let peer = 1 - r;
                let out = vec![1u8; size];
                let mut inn = vec![0u8; size];
                let t0 = Instant::now();
                for _ in 0..n {
                    m.exchange(
                        &mut [Op::send(peer, &out), Op::recv(peer, &mut inn)],
                        Instant::now() + Duration::from_secs(10),
                    )
                    .expect("exchange");
                }
                t0.elapsed()
            })
        })
        .collect();
    for h in hs {
        let el = h.join().expect("join");
        println!(
            "{size} B both ways x {n}: {:.1} us each, {:.2} GB/s per direction",
            el.as_secs_f64() * 1e6 / n as f64,
            size as f64 * n as f64 / el.as_secs_f64() / 1e9
        );
    }
}
