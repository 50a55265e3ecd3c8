//! The names of the routers a traced path crosses, as traceroute prints them: each hop's address
//! with the name the system resolver gave it (rank 0 asks after the run, `ranks::names`; analysis
//! only reads the map). An address without a name is written alone, as before.

use std::collections::BTreeMap;
use std::net::IpAddr;

/// Router addresses and the names the resolver gave them.
pub type RouterNames = BTreeMap<IpAddr, String>;

/// `name (address)`, or the address alone where it has no name.
pub fn named(a: &IpAddr, names: &RouterNames) -> String {
    match names.get(a) {
        Some(n) => format!("{n} ({a})"),
        None => a.to_string(),
    }
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
    }
}
