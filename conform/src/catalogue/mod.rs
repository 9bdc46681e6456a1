//! The case catalogue, one file per IBA area. Every case cites the rule it
//! checks: the section of IBA Vol 1 (release 1.4 numbering, with the 1.5
//! annex for FLUSH and ATOMIC WRITE, Annex A14 for XRC, Annex A17 for
//! RoCEv2's congestion management) and, where there is one, the
//! compliance statement (`C9-40`).

mod access;
mod congestion;
mod ext;
mod headers;
mod mw;
mod opcode;
mod psn;
mod requester;
mod rnr;
mod srq;
mod state;
mod uc;
mod ud;
mod xrc;

use crate::case::Case;

/// Every case, area by area (responder areas first; the QP-state area has both).
pub fn all() -> Vec<&'static Case> {
    [
        psn::CASES,
        opcode::CASES,
        access::CASES,
        rnr::CASES,
        uc::CASES,
        ud::CASES,
        xrc::CASES,
        headers::CASES,
        state::CASES,
        srq::CASES,
        mw::CASES,
        ext::CASES,
        congestion::CASES,
        requester::CASES,
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// One line per case: id, direction, IBA rule, what it checks.
pub fn listing() -> String {
    all()
        .iter()
        .map(|c| format!("{:<44} {:<9} {:<24} {}\n", c.id, c.direction.name(), c.iba, c.rule))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn ids_are_unique_and_every_case_cites_iba() {
        let cases = all();
        let ids: BTreeSet<_> = cases.iter().map(|c| c.id).collect();
        assert_eq!(ids.len(), cases.len(), "duplicate case ids");
        for c in &cases {
            assert!(
                c.iba.contains('§')
                    || c.iba.contains("C9-")
                    || c.iba.contains("C10-")
                    || c.iba.starts_with("Annex A"),
                "{}: no IBA rule",
                c.id
            );
            assert!(!c.rule.is_empty() && !c.steps.is_empty(), "{}", c.id);
            let area = c.id.split('.').next().unwrap();
            assert!(matches!(area, "resp" | "req"), "{}: id must start with resp. or req.", c.id);
            assert_eq!(area == "req", c.direction == crate::case::Direction::Requester, "{}", c.id);
        }
    }
}
