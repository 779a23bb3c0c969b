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
    let (mut rp_dropped, mut rp_passed_loose, mut second_gateway) = (0, 0, [0usize; 2]);
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
            let pr = m.predict(p, Variant::WEIR, EngineMode::Compiled);
            if pr.why.contains("rp_filter") {
                rp_dropped += 1;
            }
            let pm = weir_wire::PacketMeta::parse(&p.frame, weir_wire::LinkType::Ethernet);
            let src = crate::model::addrs(&pm).map(|a| a.0);
            let spoofed = src.is_some_and(|s| match w.router.route(s) {
                crate::topology::Dest::Forward { dev, .. } => dev != p.iif,
                _ => false,
            });
            if spoofed && p.iif == 1 && matches!(pr.fate, Fate::Forwarded { .. }) {
                rp_passed_loose += 1;
            }
            if let Fate::Forwarded { frame, .. } = &pr.fate {
                for (i, gw) in [[2u8, 0, 0, 0, 1, 0xfd], [2, 0, 0, 0, 2, 3]]
                    .iter()
                    .enumerate()
                {
                    if frame[..6] == gw[..] {
                        second_gateway[i] += 1;
                    }
                }
            }
            match pr.fate {
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
    assert!(
        rp_dropped > 10 && rp_passed_loose > 0,
        "spoofed sources: {rp_dropped} dropped by the reverse path filter, {rp_passed_loose} through a loose one"
    );
    assert!(
        second_gateway.iter().all(|&n| n > 0),
        "frames to the DMZ's and the WAN's second gateways: {second_gateway:?}"
    );
    assert!(fates[0] > fates[2] * 3, "{fates:?}");
}

#[test]
fn netdev_tables_bind_chains_to_devices() {
    let w = world();
    let mut seen = [0usize; 6];
    let what = [
        "table netdev",
        "hook ingress device",
        "hook egress device",
        "fwd to \"",
        "fwd ip",
        "ip daddr set",
    ];
    let mut marks_read = 0;
    for i in 0..300 {
        let text = ruleset(&mut Rng::for_item(7, i), &w).render();
        for (n, k) in seen.iter_mut().zip(what) {
            if text.contains(k) {
                *n += 1;
            }
        }
        if text.contains("table netdev") && text.contains("meta mark set") {
            let fwd = text.split("table netdev").next().unwrap_or("");
            if fwd.contains("meta mark 0x") {
                marks_read += 1;
            }
        }
    }
    assert!(seen.iter().all(|&n| n > 0), "{what:?}: {seen:?}");
    assert!(seen[0] > 50, "netdev tables in {} of 300 rulesets", seen[0]);
    assert!(marks_read > 0, "marks set at ingress and read in forward");
}
