//! The configuration of per-flow scripts (`[scripts]` in `weir run`'s file), and nfqws2's
//! `--lua-desync` syntax for an instance: `function[:name[=value]]...`.

use crate::payload::Protocol;
use crate::profile::filter::{Filters, HostList, IpSet, Ports};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// `[scripts]`.
#[derive(Deserialize, Debug, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct ScriptsConfig {
    /// Lua scripts may read files under it (relative to the configuration file).
    pub dir: Option<PathBuf>,
    /// Lua files loaded at start, in order (relative to `dir`, or the configuration file's
    /// directory without one).
    #[serde(default)]
    pub lua: Vec<PathBuf>,
    /// Named payloads for `blob=`: `@FILE` (relative to the configuration file) or `0xHEX`.
    #[serde(default)]
    pub blobs: BTreeMap<String, String>,
    /// The Lua state's memory limit, bytes.
    pub memory_limit: Option<usize>,
    /// Lua VM instructions one call may run.
    pub instruction_budget: Option<u32>,
    /// Flows whose per-flow state is kept (the least recently seen goes when full).
    pub max_flows: Option<usize>,
    /// Bytes a flow may hold for reassembly, and all flows together.
    pub reasm_flow_limit: Option<usize>,
    pub reasm_total_limit: Option<usize>,
    /// The profiles, in order; each belongs to one queue.
    #[serde(default)]
    pub profile: Vec<ProfileConfig>,
}

/// `[[scripts.profile]]`: nfqws2's profile filters, and its instances.
#[derive(Deserialize, Debug, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct ProfileConfig {
    /// The `queue num` whose packets it takes.
    pub queue: u16,
    #[serde(default)]
    pub name: String,
    /// `ipv4` or `ipv6`.
    pub filter_l3: Option<String>,
    pub filter_tcp: Option<String>,
    pub filter_udp: Option<String>,
    /// `type[:code],...`
    pub filter_icmp: Option<String>,
    pub filter_ipp: Option<String>,
    /// Flow protocols, comma-separated (`tls,http`).
    pub filter_l7: Option<String>,
    #[serde(default)]
    pub ipset: Vec<String>,
    pub ipset_file: Option<PathBuf>,
    #[serde(default)]
    pub ipset_exclude: Vec<String>,
    pub ipset_exclude_file: Option<PathBuf>,
    #[serde(default)]
    pub hostlist: Vec<String>,
    pub hostlist_file: Option<PathBuf>,
    #[serde(default)]
    pub hostlist_exclude: Vec<String>,
    pub hostlist_exclude_file: Option<PathBuf>,
    /// The instances, in order.
    #[serde(default)]
    pub instance: Vec<InstanceConfig>,
}

/// `[[scripts.profile.instance]]`.
#[derive(Deserialize, Debug, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct InstanceConfig {
    /// nfqws2's `--lua-desync` value: `multisplit:pos=1,midsld:seqovl=5`. A native action
    /// of that name, or else a Lua function.
    pub desync: String,
    /// `--payload`: `all`, `known` or payload types (default `all`).
    pub payload: Option<String>,
    /// `--in-range` (default `x`) and `--out-range` (default `a`).
    pub in_range: Option<String>,
    pub out_range: Option<String>,
}

/// Split nfqws2's `function:arg=value:flag` into the function and its arguments (a flag
/// has the empty value).
pub fn split_desync(s: &str) -> Result<(String, Vec<(String, String)>), String> {
    let mut parts = s.split(':');
    let func = parts.next().unwrap_or("").trim();
    if func.is_empty() {
        return Err(format!("desync {s:?}: no function"));
    }
    let mut args = Vec::new();
    for p in parts {
        if p.is_empty() {
            return Err(format!("desync {s:?}: an empty argument"));
        }
        let (k, v) = p.split_once('=').unwrap_or((p, ""));
        if k.is_empty() {
            return Err(format!("desync {s:?}: an argument without a name"));
        }
        args.push((k.to_string(), v.to_string()));
    }
    Ok((func.to_string(), args))
}

/// A file's text, named in errors.
fn read(base: &Path, p: &Path) -> Result<String, String> {
    let path = base.join(p);
    std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))
}

impl ProfileConfig {
    /// The profile's filters; files are read relative to `base`.
    pub fn filters(&self, base: &Path) -> Result<Filters, String> {
        let name = &self.name;
        let ctx = |e: String| format!("profile {name:?}: {e}");
        let mut f = Filters {
            v6: match self.filter_l3.as_deref() {
                None => None,
                Some("ipv4") => Some(false),
                Some("ipv6") => Some(true),
                Some(o) => return Err(ctx(format!("filter_l3 {o:?}: ipv4 or ipv6"))),
            },
            ..Filters::default()
        };
        if let Some(p) = &self.filter_tcp {
            f.tcp = Some(Ports::parse(p).map_err(|e| ctx(e.0))?);
        }
        if let Some(p) = &self.filter_udp {
            f.udp = Some(Ports::parse(p).map_err(|e| ctx(e.0))?);
        }
        if let Some(l) = &self.filter_icmp {
            let mut v = Vec::new();
            for item in l.split(',') {
                let (t, c) = item
                    .split_once(':')
                    .map_or((item, None), |(t, c)| (t, Some(c)));
                let t: u8 = if t == "*" {
                    255
                } else {
                    t.parse()
                        .map_err(|_| ctx(format!("filter_icmp {item:?}")))?
                };
                let c = match c {
                    None => None,
                    Some(c) => Some(
                        c.parse()
                            .map_err(|_| ctx(format!("filter_icmp {item:?}")))?,
                    ),
                };
                v.push((t, c));
            }
            f.icmp = Some(v);
        }
        if let Some(l) = &self.filter_ipp {
            let v = l
                .split(',')
                .map(|p| {
                    p.trim()
                        .parse::<u8>()
                        .map_err(|_| ctx(format!("filter_ipp {p:?}")))
                })
                .collect::<Result<Vec<_>, _>>()?;
            f.ipp = Some(v);
        }
        if let Some(l) = &self.filter_l7 {
            let v = l
                .split(',')
                .map(|p| {
                    Protocol::from_name(p.trim())
                        .ok_or_else(|| ctx(format!("filter_l7 {p:?}: not a protocol")))
                })
                .collect::<Result<Vec<_>, _>>()?;
            f.l7 = Some(v);
        }
        // the items given inline, then a file's (None: neither)
        let text = |list: &[String], file: &Option<PathBuf>| -> Result<Option<String>, String> {
            if list.is_empty() && file.is_none() {
                return Ok(None);
            }
            let mut text = list.join(",");
            if let Some(p) = file {
                text.push('\n');
                text.push_str(&read(base, p)?);
            }
            Ok(Some(text))
        };
        let ipset = |list: &[String], file: &Option<PathBuf>| match text(list, file)? {
            Some(t) => IpSet::parse(&t).map(Some).map_err(|e| e.0),
            None => Ok(None),
        };
        f.ipset = ipset(&self.ipset, &self.ipset_file).map_err(ctx)?;
        f.ipset_exclude = ipset(&self.ipset_exclude, &self.ipset_exclude_file).map_err(ctx)?;
        let hosts = |list: &[String], file: &Option<PathBuf>| {
            text(list, file).map(|t| t.map(|t| HostList::parse(&t)))
        };
        f.hostlist = hosts(&self.hostlist, &self.hostlist_file).map_err(ctx)?;
        f.hostlist_exclude =
            hosts(&self.hostlist_exclude, &self.hostlist_exclude_file).map_err(ctx)?;
        Ok(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn desync_strings() {
        let (f, a) = split_desync("fake:ip_ttl=1:badsum:blob=0x10000000:payload=all").unwrap();
        assert_eq!(f, "fake");
        assert_eq!(
            a,
            [
                ("ip_ttl", "1"),
                ("badsum", ""),
                ("blob", "0x10000000"),
                ("payload", "all")
            ]
            .map(|(k, v)| (k.to_string(), v.to_string()))
        );
        assert_eq!(
            split_desync("multisplit").unwrap(),
            ("multisplit".into(), vec![])
        );
        for bad in ["", ":a=1", "f::a", "f:=1"] {
            assert!(split_desync(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn profile_filters_from_config() {
        let p: ProfileConfig = toml_like(
            r#"{"queue": 200, "name": "p", "filter_l3": "ipv4", "filter_tcp": "80,443",
                "filter_l7": "tls,http", "ipset": ["198.18.0.0/15"], "hostlist": ["example.com"],
                "filter_icmp": "8,3:4"}"#,
        );
        let f = p.filters(Path::new("/")).unwrap();
        assert_eq!(f.v6, Some(false));
        assert!(f.tcp.as_ref().unwrap().contains(443));
        assert_eq!(f.l7, Some(vec![Protocol::Tls, Protocol::Http]));
        assert!(f
            .ipset
            .as_ref()
            .unwrap()
            .contains("198.19.0.1".parse().unwrap()));
        assert!(f.hostlist.as_ref().unwrap().contains("www.example.com"));
        assert_eq!(f.icmp, Some(vec![(8, None), (3, Some(4))]));
        for (k, v, want) in [
            ("filter_l3", "\"ipv5\"", "filter_l3"),
            ("filter_l7", "\"tls,gopher\"", "gopher"),
            ("filter_tcp", "\"99999\"", "ports"),
            ("ipset", "[\"1.2.3.4/40\"]", "prefix"),
            ("hostlist_file", "\"/nonexistent/weir-hosts\"", "weir-hosts"),
        ] {
            let p: ProfileConfig =
                toml_like(&format!(r#"{{"queue": 1, "name": "p", "{k}": {v}}}"#));
            let e = p.filters(Path::new("/")).unwrap_err();
            assert!(e.contains(want) && e.contains("profile \"p\""), "{k}: {e}");
        }
    }

    /// The tests write configurations as JSON (serde reads both the same way).
    fn toml_like(json: &str) -> ProfileConfig {
        serde_json::from_str(json).unwrap()
    }
}
