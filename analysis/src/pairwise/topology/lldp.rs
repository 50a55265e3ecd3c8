//! `lldpctl -f json` output as a `--topology` source: the host under the switch its interface is
//! cabled to, with the switch's port, from the LLDP neighbours lldpd saw on the host.
//!
//! lldpctl prints neighbours only, not the host itself, so one file holds one host's view and the
//! host is named by the file (`lldp/gpu01.json` is gpu01's). lldpd's JSON writer
//! (src/client/json_writer.c in lldpd/lldpd) builds lists and then collapses them: a list of one
//! becomes its element, an object whose only key is `value` becomes that value, and an object
//! with a `name` becomes `{NAME: {...}}`. So the shape depends on what was seen:
//! `"interface"` is an object `{"eth0": {...}}` with one neighbour and a list `[{"eth0": {...}},
//! {"eth1": {...}}]` with several (the same interface twice where it sees two); `"chassis"` is
//! `{"leaf01": {"id": ...}}` where the switch sends a system name and `{"id": {...}, ...}` where it
//! does not; `mgmt-ip` is a string or a list. `{"lldp": {}}` is no neighbour at all. lldpd built
//! with `--enable-json0`, or `lldpctl -f json0`, keeps every list and every `name`/`value` key:
//! `{"lldp": [{"interface": [{"name": "eth0", "chassis": [{"name": [{"value": ...}]}]}]}]}`; both
//! are read. lldpd's own tests show both (tests/integration/test_lldpcli.py), and its author's
//! word on the first is lldpd/lldpd#236.
//!
//! A neighbour that announces its capabilities with neither Bridge nor Router enabled is not a
//! switch (a host cabled back to back) and places nothing. A host whose interfaces see two
//! switches is refused with the fix: gather `lldpctl -f json IFACE` for the interface meshrun
//! tests over, as a host under two leaves is refused from the other sources.

use serde_json::{Map, Value};

/// One LLDP neighbour as the host saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Neighbour {
    /// The host's interface (`eno1`).
    pub interface: String,
    /// The neighbour's system name, or its chassis ID where it sends none.
    pub chassis: String,
    /// The neighbour's port the interface is cabled to: its ID (`Ethernet12`, `ge-1/0/1`), or its
    /// description where the ID is a MAC address.
    pub port: String,
    /// Not known to be other than a switch (see the module notes).
    pub switch: bool,
}

/// Whether `text` is JSON at all (an LLDP file is read as JSON; any other `--topology` text
/// starts with a switch, a comment or `SwitchName=`).
pub fn looks_like(text: &str) -> bool {
    text.trim_start().starts_with(['{', '['])
}

/// Every neighbour in one host's `lldpctl -f json` (or `json0`) output, in the file's order, or
/// why the text is not that (line 0: the file as a whole).
pub fn neighbours(text: &str) -> Result<Vec<Neighbour>, (usize, String)> {
    let root: Value = serde_json::from_str(text).map_err(|e| {
        let more = if e.to_string().starts_with("trailing characters") {
            " (one lldpctl output per file: give each host's as HOST.json in one directory)"
        } else {
            ""
        };
        (e.line(), format!("not JSON: {e}{more}"))
    })?;
    let not_lldpctl = || {
        (
            0,
            "JSON that is not lldpctl's: expected `{\"lldp\": ...}` as `lldpctl -f json` prints it".to_string(),
        )
    };
    let lldp = root.as_object().and_then(|o| o.get("lldp")).ok_or_else(not_lldpctl)?;
    let lldp = match lldp {
        Value::Array(items) if items.len() <= 1 => items.first().cloned().unwrap_or(Value::Null),
        Value::Object(_) => lldp.clone(),
        _ => return Err(not_lldpctl()),
    };
    let Some(interfaces) = lldp.get("interface") else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for (name, body) in interface_entries(interfaces) {
        let body = one(body);
        let (chassis, switch) = chassis_of(body.get("chassis"));
        let port = port_of(body.get("port"));
        out.push(Neighbour {
            interface: name,
            chassis: chassis.ok_or_else(|| {
                (
                    0,
                    "a neighbour without a chassis ID or name; is this lldpctl's output?".to_string(),
                )
            })?,
            port: port.unwrap_or_default(),
            switch,
        });
    }
    Ok(out)
}

/// The switch `host`'s interfaces are cabled to, with the host's interfaces and the switch's
/// ports (joined with `,` where a bond's links reach one switch), or why there is none.
pub fn placement(text: &str, host: &str) -> Result<(String, String, String), (usize, String)> {
    let all = neighbours(text)?;
    if all.is_empty() {
        return Err((
            0,
            format!(
                "names no LLDP neighbour: lldpd on {host} saw none (is lldpd running there, and LLDP \
                 on at the switch?); expected `lldpctl -f json` run on {host} once its neighbours show"
            ),
        ));
    }
    let switches: Vec<&Neighbour> = all.iter().filter(|n| n.switch).collect();
    let Some(first) = switches.first() else {
        let n = &all[0];
        return Err((
            0,
            format!(
                "no neighbour is a switch: {} on {} announces neither Bridge nor Router; expected \
                 the switch {host}'s interface is cabled to",
                n.chassis, n.interface
            ),
        ));
    };
    if let Some(other) = switches.iter().find(|n| n.chassis != first.chassis) {
        return Err((
            0,
            format!(
                "{host} sees two switches, {} (on {}) and {} (on {}); --topology places a host \
                 under one: gather `lldpctl -f json IFACE` naming the interface meshrun tests over",
                first.chassis, first.interface, other.chassis, other.interface
            ),
        ));
    }
    let join = |f: fn(&Neighbour) -> &str| switches.iter().map(|n| f(n)).collect::<Vec<_>>().join(",");
    Ok((
        first.chassis.clone(),
        join(|n| n.interface.as_str()),
        join(|n| n.port.as_str()),
    ))
}

/// `(interface name, its body)` for every entry of `interface`: `{"eth0": {...}}`, a list of
/// those, or json0's list of `{"name": "eth0", ...}`.
fn interface_entries(v: &Value) -> Vec<(String, &Value)> {
    let items: Vec<&Value> = match v {
        Value::Array(a) => a.iter().collect(),
        other => vec![other],
    };
    let mut out = Vec::new();
    for item in items {
        let Value::Object(o) = item else { continue };
        if let Some(name) = o.get("name").and_then(text) {
            out.push((name, item));
        } else {
            out.extend(o.iter().map(|(k, body)| (k.clone(), body)));
        }
    }
    out
}

/// The chassis's name (or ID where it has none) and whether it may be a switch.
fn chassis_of(v: Option<&Value>) -> (Option<String>, bool) {
    let Some(Value::Object(c)) = v.map(one) else {
        return (None, true);
    };
    // `{NAME: {...}}`: one key whose value is the chassis itself.
    let (name, body): (Option<String>, &Map<String, Value>) = match c.iter().next() {
        Some((k, Value::Object(inner))) if c.len() == 1 && k != "id" => (Some(k.clone()), inner),
        _ => (None, c),
    };
    let name = name.or_else(|| body.get("name").and_then(text));
    let id = body.get("id").and_then(|i| typed(i).1);
    (name.or(id), may_be_switch(body.get("capability")))
}

/// False where capabilities are listed and neither Bridge nor Router is enabled.
fn may_be_switch(v: Option<&Value>) -> bool {
    let Some(v) = v else { return true };
    let caps: Vec<&Value> = match v {
        Value::Array(a) => a.iter().collect(),
        other => vec![other],
    };
    caps.iter().any(|c| {
        let kind = c.get("type").and_then(Value::as_str);
        matches!(kind, Some("Bridge" | "Router")) && c.get("enabled").and_then(Value::as_bool) == Some(true)
    })
}

/// The port's ID, or its description where the ID is a MAC address (or missing).
fn port_of(v: Option<&Value>) -> Option<String> {
    let p = one(v?);
    let (kind, id) = p.get("id").map(typed).unwrap_or((None, None));
    let descr = p.get("descr").and_then(text).filter(|d| !d.trim().is_empty());
    match (kind.as_deref(), id) {
        (Some("mac") | None, id) => descr.or(id),
        (_, Some(id)) => Some(id),
        (_, None) => descr,
    }
}

/// `{"type": T, "value": V}` (or json0's list of one): (T, V).
fn typed(v: &Value) -> (Option<String>, Option<String>) {
    let v = one(v);
    (v.get("type").and_then(text), v.get("value").and_then(text))
}

/// A list of one is its element (json0 keeps them).
fn one(v: &Value) -> &Value {
    match v {
        Value::Array(a) if a.len() == 1 => &a[0],
        other => other,
    }
}

/// A string, or json0's `[{"value": S}]`.
fn text(v: &Value) -> Option<String> {
    match one(v) {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("value").and_then(text),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
