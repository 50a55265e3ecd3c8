//! `ibnetdiscover` output as a `--topology`: each host under the switch its HCA is cabled to.
//!
//! ibnetdiscover (infiniband-diags) prints one block per node: a switch's header
//! `Switch 36 "S-<guid>" # "<description>" ...` and a line per cabled port,
//! `[1] "H-<guid>"[1](<port guid>) # "<description>" lid 5 4xEDR` or `[13] "S-<guid>"[19] # ...`;
//! a host channel adapter's header `Ca 1 "H-<guid>" # "<description>"` and its ports. A switch
//! with HCAs cabled to it is a leaf; the host of an HCA is read from its NodeDescription, which
//! Linux sets to `<hostname> <device>` (`node018 HCA-1`, `gpu01 mlx5_0`), or which is the host
//! name alone where ibnetdiscover ran with `--node-name-map`. Descriptions that name no host
//! (firmware defaults such as `MT25408 ConnectX Mellanox Technologies`) place nothing; where no
//! HCA names its host the file is refused with that fix.
//!
//! Each host's cable is kept too: its HCA port and the leaf's port number (`[13]` on the
//! switch's line, the far `[N]` on the HCA's).
//!
//! A leaf is named by its description where that is unique among the file's switches, with its
//! GUID (`Voltaire 4036 # 4036-369C (S-0008f1050020369c)`), else by its GUID alone.

use std::collections::BTreeMap;

use super::HostLink;

/// What ibnetdiscover output places: each host's leaf, and the cable up to it (the HCA's port
/// and the switch's port number).
#[derive(Debug, Default)]
pub struct Placed {
    pub switch_of: BTreeMap<String, String>,
    pub link_of: BTreeMap<String, HostLink>,
}

/// Whether `text` looks like ibnetdiscover output (a switch or CA header, or its GUID lines).
pub fn looks_like(text: &str) -> bool {
    text.lines().any(|l| {
        let l = l.trim_start();
        l.starts_with("switchguid=") || l.starts_with("caguid=") || header(l, "Switch", "S-").is_some()
    })
}

/// Each host's leaf switch, or why the text gives none (line 0: the file as a whole).
pub fn parse(text: &str) -> Result<Placed, (usize, String)> {
    // Switch GUID -> description; HCA GUID -> description; (switch, HCA) cables with the line
    // and the ports at each end (switch, HCA).
    let mut switches: BTreeMap<String, String> = BTreeMap::new();
    let mut hcas: BTreeMap<String, String> = BTreeMap::new();
    let mut cables: Vec<Cable> = Vec::new();
    // The node whose block the lines are in: (is a switch, its GUID).
    let mut current: Option<(bool, String)> = None;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if let Some((guid, desc)) = header(line, "Switch", "S-") {
            switches.insert(guid.clone(), desc);
            current = Some((true, guid));
        } else if let Some((guid, desc)) = header(line, "Ca", "H-") {
            hcas.insert(guid.clone(), desc);
            current = Some((false, guid));
        } else if header(line, "Rt", "R-").is_some() {
            current = None;
        } else if line.starts_with('[') {
            let Some((is_switch, me)) = &current else { continue };
            let Some((kind, peer, desc)) = port_peer(line) else {
                continue;
            };
            match (is_switch, kind) {
                (true, 'H') => {
                    if let Some(d) = desc {
                        hcas.entry(peer.clone()).or_insert(d);
                    }
                    let (mine, theirs) = ports(line);
                    cables.push((me.clone(), peer, i + 1, mine, theirs));
                }
                (false, 'S') => {
                    let (mine, theirs) = ports(line);
                    cables.push((peer, me.clone(), i + 1, theirs, mine));
                }
                _ => {}
            }
        }
    }
    if switches.is_empty() && cables.is_empty() {
        return Err((
            0,
            "no `Switch` block with ports; expected ibnetdiscover's output".into(),
        ));
    }
    let mut count: BTreeMap<&str, usize> = BTreeMap::new();
    for d in switches.values() {
        *count.entry(d.as_str()).or_default() += 1;
    }
    let leaf_name = |guid: &str| match switches.get(guid) {
        Some(d) if !d.is_empty() && count[d.as_str()] == 1 => format!("{d} (S-{guid})"),
        _ => format!("S-{guid}"),
    };
    let mut switch_of: BTreeMap<String, String> = BTreeMap::new();
    let mut unnamed: Vec<&str> = Vec::new();
    let mut link_of: BTreeMap<String, HostLink> = BTreeMap::new();
    for (sw, hca, line, sw_port, hca_port) in &cables {
        let desc = hcas.get(hca).map_or("", String::as_str);
        let Some(host) = host_of(desc) else {
            unnamed.push(desc);
            continue;
        };
        let leaf = leaf_name(sw);
        match switch_of.get(host) {
            Some(prev) if *prev != leaf => {
                return Err((
                    *line,
                    format!(
                        "host {host} has HCA ports under two switches, {prev} and {leaf} (rails?): \
                         --topology places a host under one leaf; give a file of `SWITCH: HOSTLIST` \
                         lines for the rail to judge"
                    ),
                ))
            }
            _ => {
                switch_of.insert(host.to_string(), leaf);
                if let (Some(sp), Some(hp)) = (sw_port, hca_port) {
                    let dev = desc.split_whitespace().nth(1).unwrap_or("HCA");
                    let (end, port) = (format!("{dev} port {hp}"), sp.to_string());
                    match link_of.get_mut(host) {
                        Some(l) if !l.switch_port.split(',').any(|p| p == port) => {
                            l.host_end = format!("{},{end}", l.host_end);
                            l.switch_port = format!("{},{port}", l.switch_port);
                        }
                        Some(_) => {}
                        None => {
                            link_of.insert(
                                host.to_string(),
                                HostLink {
                                    host_end: end,
                                    switch_port: port,
                                },
                            );
                        }
                    }
                }
            }
        }
    }
    if switch_of.is_empty() {
        let example = unnamed.first().map_or(String::new(), |d| format!(" (such as `{d}`)"));
        return Err((
            0,
            format!(
                "no HCA's NodeDescription names its host{example}; run ibnetdiscover with \
                 --node-name-map FILE (lines `0x<node guid> \"<host>\"`) so each HCA carries its host's name"
            ),
        ));
    }
    Ok(Placed { switch_of, link_of })
}

/// A switch-to-HCA cable: the switch's GUID, the HCA's, the line it is read from, and the port
/// numbers at the switch and at the HCA.
type Cable = (String, String, usize, Option<u32>, Option<u32>);

/// A port line's two port numbers: this node's (`[N]` at the start) and the far end's (`[M]`
/// after its quoted name).
fn ports(line: &str) -> (Option<u32>, Option<u32>) {
    let num = |s: &str| {
        let (n, _) = s.strip_prefix('[')?.split_once(']')?;
        n.trim().parse::<u32>().ok()
    };
    let far = line
        .split_once('"')
        .and_then(|(_, r)| r.split_once('"'))
        .and_then(|(_, r)| num(r.trim_start()));
    (num(line), far)
}

/// `KIND <ports> "<prefix><guid>" # "<description>" ...`: the GUID (without its prefix) and the
/// description.
fn header(line: &str, kind: &str, prefix: &str) -> Option<(String, String)> {
    let rest = line.strip_prefix(kind)?;
    if !rest.starts_with([' ', '\t']) {
        return None;
    }
    let rest = rest.trim_start();
    let (ports, rest) = rest.split_once(char::is_whitespace)?;
    ports.parse::<u32>().ok()?;
    let rest = rest.trim_start().strip_prefix('"')?.strip_prefix(prefix)?;
    let (guid, rest) = rest.split_once('"')?;
    if guid.is_empty() || !guid.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    Some((
        guid.to_ascii_lowercase(),
        first_quoted(comment(rest)).unwrap_or_default(),
    ))
}

/// A port line's far end: its kind (`H`, `S`, `R`), GUID and, on a switch's line, the far end's
/// description (the first quoted text after `#`; a CA's lines quote the switch after its LID).
fn port_peer(line: &str) -> Option<(char, String, Option<String>)> {
    let q = line.find('"')?;
    let rest = &line[q + 1..];
    let (name, rest) = rest.split_once('"')?;
    let (kind, guid) = name.split_once('-')?;
    let kind = kind.chars().next().filter(|_| kind.len() == 1)?;
    if guid.is_empty() || !guid.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    let c = comment(rest);
    let desc = if c.trim_start().starts_with('"') {
        first_quoted(c)
    } else {
        None
    };
    Some((kind, guid.to_ascii_lowercase(), desc))
}

/// The text after the first `#`.
fn comment(s: &str) -> &str {
    s.split_once('#').map_or("", |(_, c)| c)
}

/// The first `"..."` in `s`.
fn first_quoted(s: &str) -> Option<String> {
    let (_, rest) = s.split_once('"')?;
    let (q, _) = rest.split_once('"')?;
    Some(q.trim().to_string())
}

/// The host an HCA's NodeDescription names: `host` alone (a node name map's), or `host DEVICE`
/// where DEVICE is an HCA name as Linux gives it (`HCA-1`, `mlx5_0`, `hfi1_0`, `qib0`).
pub(super) fn host_of(desc: &str) -> Option<&str> {
    let words: Vec<&str> = desc.split_whitespace().collect();
    let device = |w: &str| {
        w.strip_prefix("HCA-")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            || (w.bytes().next().is_some_and(|b| b.is_ascii_lowercase())
                && w.bytes().last().is_some_and(|b| b.is_ascii_digit())
                && w.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
    };
    match words.as_slice() {
        [host] => Some(host),
        [host, dev] if device(dev) => Some(host),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
