//! Tests of the generators: the world's hosts route to their interfaces, rulesets check in
//! weir and are reproducible, captures are valid and varied.

use super::rulesets::req_of;
use super::*;
use crate::model::{prepare, EngineMode, Fate, Model, Variant};
use crate::rng::Rng;
use crate::topology::Router;

#[test]
fn world_is_valid_and_hosts_route_to_their_interface() {
    let w = world();
    for h in &w.hosts {
        match w.router.route(h.addr) {
            crate::topology::Dest::Forward { dev, nexthop } => {
                assert_eq!(dev, h.iface, "{}", h.addr);
                assert!(
                    w.router.neighbor(nexthop, dev).is_some(),
                    "{} has a neighbour entry",
                    h.addr
                );
            }
            d => panic!("{}: {d:?}", h.addr),
        }
        assert!(crate::topology::in_lab_range(h.addr));
    }
    for a in &w.router_addrs {
        assert!(w.router.is_local(*a), "{a}");
    }
}

#[test]
fn rulesets_check_in_weir_and_are_reproducible() {
    let w = world();
    for i in 0..300 {
        let g = ruleset(&mut Rng::for_item(42, i), &w);
        assert_eq!(g, ruleset(&mut Rng::for_item(42, i), &w));
        let text = g.render();
        if let Err((sm, d)) = weir_lang::load_str("gen.nft", &text) {
            panic!(
                "ruleset {i} does not check:\n{text}\n{}",
                weir_lang::diag::render_all(&d, &sm)
            );
        }
        for r in g
            .tables
            .iter()
            .flat_map(|t| &t.chains)
            .flat_map(|c| &c.rules)
        {
            assert!(
                req_of(r).is_some(),
                "ruleset {i}: rule with conflicting protocols: {r}"
            );
        }
        for k in 0..g.rule_count() {
            let h = g.without_rule(k).prune();
            assert!(
                weir_lang::load_str("min.nft", &h.render()).is_ok(),
                "ruleset {i} without rule {k}:\n{}",
                h.render()
            );
        }
    }
}

#[test]
fn captures_are_valid_and_varied() {
    let w = world();
    let mut fates = [0usize; 3];
    let rules =
        "table inet f { chain forward { type filter hook forward priority 0; policy accept; } }";
    let (rs, _) = weir_lang::load_str("t", rules).unwrap();
    for i in 0..40 {
        let cap = capture(&mut Rng::for_item(9, i), &w, 40);
        assert!(cap.packets.len() <= 40 && !cap.packets.is_empty());
        let topo = cap.topology(&w);
        let r = Router::from_topology(&topo).unwrap();
        let prep = prepare(&r, &cap.packets, &r.packets);
        let mut m = Model::new(&rs, r);
        for p in &prep {
            assert_eq!(p.skip, None, "generated packets are all injected");
            match m.predict(p, Variant::WEIR, EngineMode::Compiled).fate {
                Fate::Forwarded { .. } => fates[0] += 1,
                Fate::Local => fates[1] += 1,
                Fate::Dropped => fates[2] += 1,
            }
        }
    }
    assert!(
        fates.iter().all(|&n| n > 0),
        "forwarded, local and dropped all occur: {fates:?}"
    );
    assert!(fates[0] > fates[2] * 3, "{fates:?}");
}
