//! The `nat` table of a generated ruleset: masquerade / snat towards the WAN, port forwards
//! from it.

use super::rulesets::*;
use crate::rng::Rng;

/// A `nat` table: masquerade / snat towards the WAN, port forwards from it.
pub(super) fn nat_table(rng: &mut Rng, fam: Fam) -> GenTable {
    // the family keyword nft wants in an inet table (`snat ip to ...`)
    let (k4, k6) = match fam {
        Fam::Inet => ("ip ", "ip6 "),
        _ => ("", ""),
    };
    let mut post = Vec::new();
    let mut pre = Vec::new();
    if fam.v4() {
        post.push(
            [
                "oifname \"weirwan0\" masquerade".to_string(),
                format!("oifname \"weirwan0\" ip saddr 198.18.0.0/23 snat {k4}to 198.19.0.2"),
                "oifname \"weirwan0\" meta l4proto udp masquerade".to_string(),
                format!("ip saddr 198.18.1.0/24 oifname \"weirlan0\" snat {k4}to 198.18.0.1"),
            ][rng.weighted(&[45, 25, 15, 15])]
            .clone(),
        );
        pre.push(
            [
                format!(
                    "iifname \"weirwan0\" ip daddr 198.19.0.2 tcp dport {{ 80, 443 }} dnat {k4}to 198.18.1.16"
                ),
                format!(
                    "iifname \"weirwan0\" ip daddr 198.19.0.2 tcp dport 8080 dnat {k4}to 198.18.1.16:80"
                ),
                format!("iifname \"weirwan0\" tcp dport 443 dnat {k4}to 198.18.1.16"),
                "iifname \"weirlan0\" tcp dport 22 redirect to :2222".to_string(),
            ][rng.weighted(&[40, 30, 20, 10])]
            .clone(),
        );
    }
    if fam.v6() {
        post.push(
            [
                "oifname \"weirwan0\" ip6 saddr 2001:db8::/32 masquerade".to_string(),
                format!("oifname \"weirwan0\" snat {k6}to 2001:db8:ffff::2"),
            ][rng.weighted(&[60, 40])]
            .clone(),
        );
        pre.push(format!(
            "iifname \"weirwan0\" ip6 daddr 2001:db8:ffff::2 tcp dport {{ 80, 443, 8080 }} dnat {k6}to 2001:db8:0:2::10"
        ));
    }
    let mut chains = Vec::new();
    if rng.chance(85) {
        chains.push(GenChain {
            name: "post".into(),
            base: Some("type nat hook postrouting priority srcnat; policy accept;".into()),
            rules: post,
        });
    }
    if rng.chance(70) {
        chains.push(GenChain {
            name: "pre".into(),
            base: Some("type nat hook prerouting priority dstnat; policy accept;".into()),
            rules: pre,
        });
    }
    GenTable {
        family: fam,
        name: "weirnat".into(),
        sets: Vec::new(),
        chains,
    }
}
