//! Targets: which names are iptables' own targets, target options (`--to-destination`,
//! `--log-prefix`, ...), and `REJECT --reject-with`.

use super::rule::RuleErr::Unsupported;
use super::rule::{Proto, RuleErr};
use super::short;

pub(super) fn is_builtin_target(t: &str) -> bool {
    matches!(
        t,
        "ACCEPT"
            | "DROP"
            | "RETURN"
            | "REJECT"
            | "LOG"
            | "MARK"
            | "DNAT"
            | "SNAT"
            | "MASQUERADE"
            | "REDIRECT"
            | "NOTRACK"
            | "CT"
            | "QUEUE"
            | "NFQUEUE"
            | "TCPMSS"
            | "CONNMARK"
            | "ULOG"
            | "NFLOG"
            | "TOS"
            | "DSCP"
            | "TTL"
            | "HL"
            | "TEE"
            | "CLASSIFY"
            | "SET"
            | "TPROXY"
            | "CHECKSUM"
            | "NETMAP"
            | "AUDIT"
            | "SECMARK"
            | "CONNSECMARK"
            | "TRACE"
            | "IDLETIMER"
            | "LED"
            | "RATEEST"
            | "SYNPROXY"
            | "HMARK"
            | "CLUSTERIP"
            | "ECN"
    )
}

pub(super) struct TargetOpts {
    pub(super) opts: Vec<(bool, String, Vec<String>)>,
    pub(super) target: String,
}

impl TargetOpts {
    pub(super) fn take1(&mut self, key: &str) -> Result<Option<String>, RuleErr> {
        let Some(pos) = self.opts.iter().position(|(_, k, _)| k == key) else {
            return Ok(None);
        };
        let (n, k, v) = self.opts.remove(pos);
        if n {
            return Err(Unsupported(format!("'! {k}' for target {}", self.target)));
        }
        if v.len() != 1 {
            return Err(Unsupported(format!(
                "{} {k} needs exactly one value",
                self.target
            )));
        }
        if self.opts.iter().any(|(_, k2, _)| k2 == key) {
            return Err(Unsupported(format!("{} {k} given twice", self.target)));
        }
        Ok(v.into_iter().next())
    }

    pub(super) fn flag(&mut self, key: &str) -> bool {
        match self
            .opts
            .iter()
            .position(|(n, k, v)| k == key && !n && v.is_empty())
        {
            Some(p) => {
                self.opts.remove(p);
                true
            }
            None => false,
        }
    }

    pub(super) fn nat_flags(&mut self) -> Result<String, RuleErr> {
        let mut f = Vec::new();
        if self.flag("--random") {
            f.push("random");
        }
        if self.flag("--random-fully") {
            f.push("fully-random");
        }
        if self.flag("--persistent") {
            f.push("persistent");
        }
        Ok(if f.is_empty() {
            String::new()
        } else {
            format!(" {}", f.join(","))
        })
    }

    pub(super) fn finish(self) -> Result<(), RuleErr> {
        if let Some((_, k, _)) = self.opts.first() {
            let sup = match self.target.as_str() {
                "REJECT" => "--reject-with",
                "LOG" => "--log-prefix, --log-level",
                "MARK" => "--set-xmark, --set-mark, --and-mark, --or-mark, --xor-mark",
                "DNAT" => "--to-destination, --random, --persistent",
                "SNAT" => "--to-source, --random, --random-fully, --persistent",
                "MASQUERADE" | "REDIRECT" => "--to-ports, --random",
                "CT" => "--notrack",
                _ => "none",
            };
            return Err(Unsupported(format!(
                "unsupported option '{}' for target {} (supported: {sup})",
                short(k),
                self.target
            )));
        }
        Ok(())
    }
}

pub(super) fn reject_with(with: Option<&str>, v6: bool, proto: Proto) -> Result<String, RuleErr> {
    let w = with.unwrap_or(if v6 {
        "icmp6-port-unreachable"
    } else {
        "icmp-port-unreachable"
    });
    let s = match (v6, w) {
        (_, "tcp-reset" | "tcp-rst") => {
            if proto != Proto::Ports("tcp") {
                return Err(Unsupported(
                    "REJECT --reject-with tcp-reset needs '-p tcp'".into(),
                ));
            }
            "reject with tcp reset"
        }
        (false, "icmp-net-unreachable" | "net-unreach") => "reject with icmp type net-unreachable",
        (false, "icmp-host-unreachable" | "host-unreach") => {
            "reject with icmp type host-unreachable"
        }
        (false, "icmp-port-unreachable" | "port-unreach") => {
            "reject with icmp type port-unreachable"
        }
        (false, "icmp-proto-unreachable" | "proto-unreach") => {
            "reject with icmp type prot-unreachable"
        }
        (false, "icmp-net-prohibited" | "net-prohib") => "reject with icmp type net-prohibited",
        (false, "icmp-host-prohibited" | "host-prohib") => "reject with icmp type host-prohibited",
        (false, "icmp-admin-prohibited" | "admin-prohib") => {
            "reject with icmp type admin-prohibited"
        }
        (true, "icmp6-no-route" | "no-route") => "reject with icmpv6 type no-route",
        (true, "icmp6-adm-prohibited" | "adm-prohibited") => {
            "reject with icmpv6 type admin-prohibited"
        }
        (true, "icmp6-addr-unreachable" | "addr-unreach") => {
            "reject with icmpv6 type addr-unreachable"
        }
        (true, "icmp6-port-unreachable" | "port-unreach") => {
            "reject with icmpv6 type port-unreachable"
        }
        (true, "icmp6-policy-fail" | "policy-fail") => "reject with icmpv6 type policy-fail",
        (true, "icmp6-reject-route" | "reject-route") => "reject with icmpv6 type reject-route",
        _ => {
            let sup = if v6 {
                "icmp6-no-route, icmp6-adm-prohibited, icmp6-addr-unreachable, icmp6-port-unreachable, icmp6-policy-fail, icmp6-reject-route, tcp-reset"
            } else {
                "icmp-net-unreachable, icmp-host-unreachable, icmp-port-unreachable, icmp-proto-unreachable, icmp-net-prohibited, icmp-host-prohibited, icmp-admin-prohibited, tcp-reset"
            };
            return Err(Unsupported(format!(
                "REJECT --reject-with '{}' (supported: {sup})",
                short(w)
            )));
        }
    };
    Ok(s.to_string())
}
