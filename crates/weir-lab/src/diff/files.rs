//! One given ruleset and capture ([`diff_files`]: `weir lab diff --rules --pcap --topology`).

use super::report::{repro_parts, run_case, write_reproducer, Report};
use crate::kernel::{Lab, LabOptions};
use crate::model::prepare;
use crate::topology::{Router, Topology};
use crate::Error;
use std::path::{Path, PathBuf};

/// The result of `weir lab diff --rules --pcap --topology`.
pub struct FileDiff {
    pub report: Report,
    pub reproducer: Option<PathBuf>,
    pub notes: Vec<String>,
}

pub(super) fn render_diags(sm: &weir_lang::SourceMap, d: &[weir_lang::Diagnostic]) -> String {
    weir_lang::diag::render_all(d, sm)
}

/// The topology, its router, the capture and notes (a capture read only in part) of
/// `--pcap --topology`, checked against each other.
pub(crate) fn read_case(
    pcap: &Path,
    topology: &Path,
) -> Result<(Topology, Router, weir_wire::pcap::Capture, Vec<String>), Error> {
    let ttext = std::fs::read_to_string(topology)
        .map_err(|e| Error::Input(format!("{}: {e}", topology.display())))?;
    let topo =
        Topology::from_json(&topology.display().to_string(), &ttext).map_err(Error::Input)?;
    let router = Router::from_topology(&topo)
        .map_err(|e| Error::Input(format!("{}: {e}", topology.display())))?;
    let cap = weir_wire::pcap::read_file(pcap)
        .map_err(|e| Error::Input(format!("{}: {e}", pcap.display())))?;
    let mut notes = Vec::new();
    if let Some(e) = &cap.trailing_error {
        notes.push(format!(
            "{}: read {} packets, then: {e}",
            pcap.display(),
            cap.packets.len()
        ));
    }
    if router.packets.len() != cap.packets.len() {
        return Err(Error::Input(format!(
            "{} lists {} packets (\"packets\": one {{\"iif\"}} per packet), the capture {} has {}",
            topology.display(),
            router.packets.len(),
            pcap.display(),
            cap.packets.len()
        )));
    }
    Ok((topo, router, cap, notes))
}

/// Run one ruleset and capture through both sides. `repro_dir`: where to write a reproducer
/// when there are unexplained differences.
pub fn diff_files(
    rules: &Path,
    pcap: &Path,
    topology: &Path,
    opts: LabOptions,
    repro_dir: Option<&Path>,
) -> Result<FileDiff, Error> {
    let (topo, router, cap, notes) = read_case(pcap, topology)?;
    let rules_text = std::fs::read_to_string(rules)
        .map_err(|e| Error::Input(format!("{}: {e}", rules.display())))?;
    let rs = match weir_lang::load_file(rules) {
        Ok((rs, _)) => rs,
        Err((sm, d)) => {
            return Err(Error::Input(format!(
                "weir refuses {}:\n{}",
                rules.display(),
                render_diags(&sm, &d)
            )))
        }
    };
    let prepared = prepare(&router, &cap.packets, &router.packets);
    let mut lab = Lab::new(&router, opts)?;
    let report = run_case(&mut lab, &rs, Some(&rules_text), rules, &prepared)?;
    drop(lab);
    let mut reproducer = None;
    if report.differences() > 0 {
        if let Some(dir) = repro_dir {
            let stem = rules
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "rules".into());
            let (d, diff, text) = repro_parts(dir, &stem, &report, &prepared, pcap);
            reproducer = Some(write_reproducer(
                &d,
                &rules_text,
                &topo,
                &router,
                &diff,
                &text,
            )?);
        }
    }
    Ok(FileDiff {
        report,
        reproducer,
        notes,
    })
}
