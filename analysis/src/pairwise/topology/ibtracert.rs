//! `ibtracert` output as a `--topology` source: InfiniBand routes between hosts, as the subnet
//! manager's forwarding tables send them, and from them each host's leaf switch.
//!
//! ibtracert (infiniband-diags; `dump_endnode` and `dump_route` in
//! infiniband-diags/ibtracert.c of linux-rdma/rdma-core) prints one route as
//! ```text
//! From ca {0x<node guid>} portnum 1 lid 5-5 "gpu01 mlx5_0"
//! [1] -> switch port {0x<port guid>}[1] lid 4-4 "leaf01"
//! [33] -> switch port {0x<port guid>}[1] lid 2-2 "spine01"
//! [3] -> switch port {0x<port guid>}[33] lid 7-7 "leaf02"
//! [1] -> ca port {0x<port guid>}[1] lid 12-12 "gpu03 mlx5_0"
//! To ca {0x<node guid>} portnum 1 lid 12-12 "gpu03 mlx5_0"
//! ```
//! where `[out] -> KIND port {guid}[in]` is the port the packet left by and the port of the next
//! node it arrived on. A file may hold one route or many (one per pair concatenated, or
//! `ibtracert --ports-file` whose routes follow each other and end with `N lid/guid pairs
//! processed`); lines outside a route are skipped. Hosts are named from the CAs' descriptions
//! as from ibnetdiscover's (`gpu01 mlx5_0`, or the host alone under `--node-name-map`); a route
//! from or to a switch is not between hosts and is skipped; `-n`'s simple format names no node
//! and is refused with the fix.
//!
//! A switch is named by its description where that is unique among the file's switches, with
//! its GUID, else by its GUID, as ibnetdiscover's leaves are (`leaf01 (S-<guid>)`).

use std::collections::BTreeMap;

use super::ibnetdiscover::host_of;

/// One switch a route crosses: the port it arrived on and the port it left by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hop {
    pub switch: String,
    pub in_port: u32,
    pub out_port: u32,
}

impl Hop {
    /// The hop as a traced path names it: the switch port the route arrived on, which names the
    /// cable it came over (as a traced TCP hop is the address of the interface a probe arrived
    /// on).
    pub fn arrival(&self) -> String {
        format!("{} port {}", self.switch, self.in_port)
    }
}

/// A route from one host's HCA port to another's, through the switches between.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub src: String,
    pub dst: String,
    /// The HCAs and their port numbers (`mlx5_0 port 1`).
    pub src_hca: String,
    pub dst_hca: String,
    pub hops: Vec<Hop>,
}

impl Route {
    /// `leaf01 [1>33] > spine01 [1>3] > leaf02 [33>1]`: each switch with the ports in and out.
    pub fn phrase(&self) -> String {
        self.hops
            .iter()
            .map(|h| format!("{} [{}>{}]", h.switch, h.in_port, h.out_port))
            .collect::<Vec<_>>()
            .join(" > ")
    }
}

/// Whether `text` holds ibtracert output (a `From <kind> {0x...} portnum` line, or `-n`'s
/// `From {0x...}[N]`).
pub fn looks_like(text: &str) -> bool {
    text.lines().any(|l| {
        let l = l.trim_start();
        l.strip_prefix("From ").is_some_and(|r| {
            let r = r.trim_start();
            r.starts_with("{0x") || (r.contains(" {0x") && r.contains("} portnum "))
        })
    })
}

/// A route's line as read: `[out] -> KIND port {guid}[in] lid ... "description"`.
struct Leg {
    out: u32,
    kind: String,
    guid: String,
    inp: u32,
    desc: String,
}

/// An end's line: `From|To KIND {0x<guid>} portnum N lid ... "description"`.
struct End {
    kind: String,
    port: u32,
    desc: String,
}

/// Every route between hosts in `text`, or the line that is not ibtracert's and why.
pub fn parse(text: &str) -> Result<Vec<Route>, (usize, String)> {
    // Routes as read, with the switches' descriptions by GUID for naming them after.
    let mut raw: Vec<(End, Vec<Leg>, End, usize)> = Vec::new();
    let mut open: Option<(End, Vec<Leg>, usize)> = None;
    for (i, l) in text.lines().enumerate() {
        let (n, l) = (i + 1, l.trim());
        if let Some(rest) = l.strip_prefix("From ") {
            if open.is_some() {
                return Err((n, "a `From` line before the last route's `To` line".into()));
            }
            open = Some((end(rest).map_err(|w| (n, w))?, Vec::new(), n));
        } else if let Some(rest) = l.strip_prefix("To ") {
            let Some((from, legs, at)) = open.take() else {
                return Err((n, "a `To` line without its `From` line".into()));
            };
            raw.push((from, legs, end(rest).map_err(|w| (n, w))?, at));
        } else if l.starts_with('[') {
            let Some((_, legs, _)) = open.as_mut() else {
                return Err((
                    n,
                    "a `[port] -> ...` line outside a route (no `From` line before it)".into(),
                ));
            };
            legs.push(leg(l).map_err(|w| (n, w))?);
        } else if open.is_some() && !l.is_empty() {
            return Err((
                n,
                format!("`{l}` inside a route; expected `[port] -> ... port {{0x...}}[port] ...` or `To ...`"),
            ));
        }
    }
    if let Some((_, _, at)) = open {
        return Err((
            at,
            "this route has no `To` line (ibtracert stopped at a hop that did not answer?)".into(),
        ));
    }
    if raw.is_empty() {
        return Err((
            0,
            "no route: expected ibtracert's `From ...`, `[N] -> ...`, `To ...` lines".into(),
        ));
    }
    let names = switch_names(raw.iter().flat_map(|(_, legs, _, _)| legs));
    let mut out = Vec::new();
    for (from, legs, to, at) in &raw {
        if from.kind != "ca" || to.kind != "ca" {
            continue;
        }
        out.push(route(from, legs, to, &names).map_err(|w| (*at, w))?);
    }
    if out.is_empty() {
        return Err((
            0,
            "no route between two hosts: every route here starts or ends at a switch; expected \
             `ibtracert SRC_LID DST_LID` between two hosts' HCA ports"
                .into(),
        ));
    }
    Ok(out)
}

/// One host-to-host route from its lines.
fn route(from: &End, legs: &[Leg], to: &End, names: &BTreeMap<String, String>) -> Result<Route, String> {
    let host = |e: &End| {
        host_of(&e.desc).map(str::to_string).ok_or_else(|| {
            format!(
                "the CA `{}` names no host; run ibtracert with --node-name-map FILE (lines \
                 `0x<node guid> \"<host>\"`)",
                e.desc
            )
        })
    };
    let hca = |e: &End, port: u32| {
        let dev = e.desc.split_whitespace().nth(1).unwrap_or("HCA");
        format!("{dev} port {port}")
    };
    let mut hops = Vec::new();
    for (k, l) in legs.iter().enumerate() {
        if l.kind != "switch" {
            continue;
        }
        let next = legs
            .get(k + 1)
            .ok_or_else(|| format!("the route ends at switch `{}`, not at a CA", l.desc))?;
        hops.push(Hop {
            switch: names.get(&l.guid).cloned().unwrap_or_else(|| format!("S-{}", l.guid)),
            in_port: l.inp,
            out_port: next.out,
        });
    }
    let last_in = legs.last().map_or(to.port, |l| l.inp);
    Ok(Route {
        src: host(from)?,
        dst: host(to)?,
        src_hca: hca(from, from.port),
        dst_hca: hca(to, last_in),
        hops,
    })
}

/// Switch GUID -> name: its description with the GUID where unique, else `S-<guid>`.
fn switch_names<'a>(legs: impl Iterator<Item = &'a Leg>) -> BTreeMap<String, String> {
    let mut desc: BTreeMap<&str, &str> = BTreeMap::new();
    for l in legs.filter(|l| l.kind == "switch") {
        desc.insert(&l.guid, &l.desc);
    }
    let mut count: BTreeMap<&str, usize> = BTreeMap::new();
    for d in desc.values() {
        *count.entry(d).or_default() += 1;
    }
    desc.iter()
        .map(|(g, d)| {
            let name = if !d.is_empty() && count[d] == 1 {
                format!("{d} (S-{g})")
            } else {
                format!("S-{g}")
            };
            (g.to_string(), name)
        })
        .collect()
}

/// `KIND {0x<guid>} portnum N lid A-B "description"` (after `From `/`To `).
fn end(rest: &str) -> Result<End, String> {
    let rest = rest.trim_start();
    if rest.starts_with('{') {
        return Err(simple_format());
    }
    let (kind, rest) = rest
        .split_once(' ')
        .ok_or_else(|| format!("`{rest}` is not `KIND {{0x...}} portnum N ...`"))?;
    let (_, rest) = guid(rest)?;
    let port = rest
        .trim_start()
        .strip_prefix("portnum ")
        .and_then(|r| r.split_whitespace().next())
        .and_then(|p| p.parse::<u32>().ok())
        .ok_or_else(|| "expected `portnum N` after the GUID".to_string())?;
    Ok(End {
        kind: kind.to_string(),
        port,
        desc: quoted(rest),
    })
}

/// `[out] -> KIND port {0x<guid>}[in] lid A-B "description"`.
fn leg(l: &str) -> Result<Leg, String> {
    let bad = || format!("`{l}` is not `[port] -> KIND port {{0x...}}[port] lid ... \"name\"`");
    let (out, rest) = bracketed(l).ok_or_else(bad)?;
    let rest = rest.trim_start().strip_prefix("->").ok_or_else(bad)?.trim_start();
    if rest.starts_with('{') {
        return Err(simple_format());
    }
    let (kind, rest) = rest.split_once(" port ").ok_or_else(bad)?;
    let (g, rest) = guid(rest)?;
    let (inp, rest) = bracketed(rest).ok_or_else(bad)?;
    Ok(Leg {
        out,
        kind: kind.trim().to_string(),
        guid: g,
        inp,
        desc: quoted(rest),
    })
}

fn simple_format() -> String {
    "ibtracert's simple format (-n) names no node; run it without -n so each CA names its host".into()
}

/// `{0x<hex>}...`: the GUID in lower case without `0x`, and the rest.
fn guid(s: &str) -> Result<(String, &str), String> {
    let inner = s.trim_start().strip_prefix("{0x");
    let (g, rest) = inner
        .and_then(|r| r.split_once('}'))
        .ok_or_else(|| format!("expected `{{0x<guid>}}` at `{}`", s.trim()))?;
    if g.is_empty() || !g.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("`{g}` is not a GUID"));
    }
    Ok((g.to_ascii_lowercase(), rest))
}

/// `[N]rest`: N and the rest.
fn bracketed(s: &str) -> Option<(u32, &str)> {
    let (n, rest) = s.strip_prefix('[')?.split_once(']')?;
    Some((n.trim().parse().ok()?, rest))
}

/// The text between the first `"` and the last.
fn quoted(s: &str) -> String {
    match (s.find('"'), s.rfind('"')) {
        (Some(a), Some(b)) if b > a => s[a + 1..b].trim().to_string(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests;
