//! Trace one TCP 5-tuple's path by hand (`ranks::trace`), e.g. inside a host of
//! `scripts/leafspine`:
//!     trace DST:PORT [--sport N] [--from ADDR] [--connect] [--max-hops N]
//!     trace --listen PORT [--for SECONDS]
//! `--connect` opens a real connection from `--sport` (any free port without it) and traces it
//! while it is idle; without it the 5-tuple is traced with no connection behind it (`--sport`
//! needed). `--from` defaults to the address the kernel would send from. `--listen` accepts
//! connections on PORT and holds them, for SECONDS (default 30), as a far end to trace to.
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, UdpSocket};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use ranks::trace::{trace, Connection, Reply, TraceOptions};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

fn main() -> ExitCode {
    match run(std::env::args().skip(1).collect()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("trace: {e}");
            ExitCode::from(2)
        }
    }
}

fn value<T: std::str::FromStr>(args: &[String], flag: &str) -> Result<Option<T>, String> {
    match args.iter().position(|a| a == flag) {
        None => Ok(None),
        Some(i) => {
            let v = args.get(i + 1).ok_or(format!("{flag} needs a value"))?;
            v.parse()
                .map(Some)
                .map_err(|_| format!("{flag} {v}: not a valid value"))
        }
    }
}

fn run(args: Vec<String>) -> Result<(), String> {
    if let Some(port) = value::<u16>(&args, "--listen")? {
        return listen(port, Duration::from_secs(value(&args, "--for")?.unwrap_or(30)));
    }
    let dst: SocketAddrV4 = args
        .first()
        .ok_or("usage: trace DST:PORT [--sport N] [--from ADDR] [--connect] [--max-hops N] | --listen PORT [--for SECONDS]")?
        .parse()
        .map_err(|_| format!("{}: not an IPv4 address and port", args[0]))?;
    let from = match value::<Ipv4Addr>(&args, "--from")? {
        Some(a) => a,
        None => source_for(dst)?,
    };
    let sport = value::<u16>(&args, "--sport")?;
    let mut options = TraceOptions::default();
    if let Some(m) = value(&args, "--max-hops")? {
        options.max_hops = m;
    }
    // Held open (idle) while its path is traced.
    let (local, _held) = if args.iter().any(|a| a == "--connect") {
        let s = connect(SocketAddrV4::new(from, sport.unwrap_or(0)), dst)?;
        let local = s
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket_ipv4())
            .ok_or("the connection has no IPv4 local address")?;
        (local, Some(s))
    } else {
        let sport = sport.ok_or("--sport is needed without --connect")?;
        (SocketAddrV4::new(from, sport), None)
    };
    let t = trace(Connection { local, remote: dst }, &options).map_err(|e| e.to_string())?;
    println!("path of {local} -> {dst}");
    for h in &t.hops {
        let rtt = h
            .rtt
            .map_or(String::new(), |d| format!("  {:.3} ms", d.as_secs_f64() * 1e3));
        match h.reply {
            Reply::Router(a) => println!("{:2}  {a}{rtt}", h.ttl),
            Reply::Destination => println!("{:2}  {} (destination){rtt}", h.ttl, dst.ip()),
            Reply::Unreachable(a, code) => println!("{:2}  {a} unreachable (code {code}){rtt}", h.ttl),
            Reply::Silent => println!("{:2}  *", h.ttl),
        }
    }
    println!("{}", if t.reached() { "reached" } else { "not reached" });
    Ok(())
}

/// The address the kernel sends from towards `dst` (a UDP socket's connect sends nothing).
fn source_for(dst: SocketAddrV4) -> Result<Ipv4Addr, String> {
    let u = UdpSocket::bind("0.0.0.0:0").map_err(|e| format!("udp socket: {e}"))?;
    u.connect(dst).map_err(|e| format!("no route to {dst}: {e}"))?;
    match u.local_addr().map_err(|e| e.to_string())? {
        SocketAddr::V4(a) => Ok(*a.ip()),
        SocketAddr::V6(a) => Err(format!("{a} is not IPv4")),
    }
}

fn connect(local: SocketAddrV4, dst: SocketAddrV4) -> Result<Socket, String> {
    let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).map_err(|e| e.to_string())?;
    s.set_reuse_address(true).map_err(|e| e.to_string())?;
    s.bind(&SockAddr::from(local))
        .map_err(|e| format!("bind {local}: {e}"))?;
    s.connect_timeout(&SockAddr::from(dst), Duration::from_secs(5))
        .map_err(|e| format!("connect to {dst}: {e}"))?;
    Ok(s)
}

fn listen(port: u16, hold: Duration) -> Result<(), String> {
    let l = TcpListener::bind(("0.0.0.0", port)).map_err(|e| format!("listen on {port}: {e}"))?;
    l.set_nonblocking(true).map_err(|e| e.to_string())?;
    let end = Instant::now() + hold;
    let mut held = Vec::new();
    while Instant::now() < end {
        match l.accept() {
            Ok((s, _)) => held.push(s),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(format!("accept: {e}")),
        }
    }
    Ok(())
}
