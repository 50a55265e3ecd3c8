//! The names of the routers a traced path crosses, as traceroute prints them: each hop's address
//! with the name the system resolver gave it (rank 0 asks after the run, `ranks::names`; analysis
//! only reads the map). An address without a name is written alone, as before.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use super::cables::End;
use super::connections::Path;
use super::PairwiseOutcome;

/// Router addresses and the names the resolver gave them.
pub type RouterNames = BTreeMap<IpAddr, String>;

/// `name (address)`, or the address alone where it has no name.
pub fn named(a: &IpAddr, names: &RouterNames) -> String {
    match names.get(a) {
        Some(n) => format!("{n} ({a})"),
        None => a.to_string(),
    }
}

/// A cable's end as [`named`] writes an address; a switch port as [`End`]'s own display.
pub fn end_named(e: &End, names: &RouterNames) -> String {
    match e {
        End::Ip(a) => named(a, names),
        other => other.to_string(),
    }
}

/// Every distinct router address a traced connection of the run crossed: its first pass, its
/// retests and each repeated pass. What rank 0 asks the resolver for (none: nothing to ask).
pub fn traced_hops(o: &PairwiseOutcome) -> BTreeSet<IpAddr> {
    let passes = o.repeats.iter().map(|p| &p.outcome).chain(std::iter::once(o));
    passes
        .flat_map(|p| p.measurements.iter().chain(&p.retests))
        .flat_map(|m| &m.connections)
        .filter_map(|c| match &c.path {
            Some(Path::Traced { hops, .. }) => Some(hops.iter().flatten().copied()),
            _ => None,
        })
        .flatten()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_with_a_name_is_written_with_both_and_one_without_alone() {
        let a: IpAddr = "10.101.0.2".parse().expect("an address");
        let b: IpAddr = "10.80.0.1".parse().expect("an address");
        let names = RouterNames::from([(a, "spine1-leaf0".to_string())]);
        assert_eq!(named(&a, &names), "spine1-leaf0 (10.101.0.2)");
        assert_eq!(named(&b, &names), "10.80.0.1");
        assert_eq!(end_named(&End::Ip(a), &names), "spine1-leaf0 (10.101.0.2)");
        let port = End::Port {
            switch: "spine1".into(),
            port: Some(3),
        };
        assert_eq!(end_named(&port, &names), "spine1 port 3");
    }

    /// The leaf-spine bed's traced run (leaf0-spine1 slowed), read back.
    fn bed() -> PairwiseOutcome {
        let json = include_str!(
            "../../../docs/evidence/leafspine-paths-2026-12-06/pairwise-q4-cable-leaf0-spine1-60mbit.json"
        );
        crate::pairwise::saved::parse(json.as_bytes()).expect("a pairwise --json run")
    }

    #[test]
    fn the_traced_hops_are_every_router_address_once() {
        let hops = traced_hops(&bed());
        let want: BTreeSet<IpAddr> = [
            "10.80.0.1",
            "10.80.1.1",
            "10.80.2.1",
            "10.100.0.2",
            "10.100.1.2",
            "10.100.2.2",
            "10.100.0.1",
            "10.100.1.1",
            "10.100.2.1",
            "10.101.0.2",
            "10.101.1.2",
            "10.101.2.2",
            "10.101.0.1",
            "10.101.1.1",
            "10.101.2.1",
        ]
        .into_iter()
        .map(|a| a.parse().expect("an address"))
        .collect();
        // Every first router, spine end and far leaf end; nothing else (no host address).
        assert!(hops.is_subset(&want), "{hops:?}");
        assert!(hops.contains(&"10.80.0.1".parse::<IpAddr>().expect("an address")));
        assert!(hops.contains(&"10.101.0.2".parse::<IpAddr>().expect("an address")));
        // A run with nothing traced has nothing to ask.
        let mut untraced = bed();
        for m in untraced.measurements.iter_mut().chain(untraced.retests.iter_mut()) {
            m.connections.clear();
        }
        assert!(traced_hops(&untraced).is_empty());
    }

    #[test]
    fn the_names_travel_in_the_json_and_only_where_there_are_some() {
        let mut o = bed();
        let plain = crate::pairwise::report::json::render(&o);
        assert!(!String::from_utf8_lossy(&plain).contains("router_names"));
        let a: IpAddr = "10.101.0.2".parse().expect("an address");
        o.router_names = RouterNames::from([(a, "mrls-spine1-leaf0".to_string())]);
        let with = crate::pairwise::report::json::render(&o);
        let text = String::from_utf8_lossy(&with);
        assert!(
            text.contains("\"router_names\": {\n    \"10.101.0.2\": \"mrls-spine1-leaf0\""),
            "{text}"
        );
        let back = crate::pairwise::saved::parse(&with).expect("read back");
        assert_eq!(back.router_names, o.router_names);
    }
}
