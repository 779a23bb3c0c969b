//! `weir run` and `weir ctl`: the command line of the dataplane, which lives in
//! `weir_dataplane`.

use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct RunArgs {
    /// The configuration file (TOML; see docs/nfqueue.md and docs/inline.md).
    #[arg(long)]
    config: PathBuf,
    /// Print the kernel rules weir installs for the configuration, and exit.
    #[arg(long)]
    print_kernel_rules: bool,
}

#[derive(clap::Args)]
pub struct CtlArgs {
    /// The control socket (the `control.socket` of the configuration; `WEIR_SOCKET` when
    /// set).
    #[arg(long, env = "WEIR_SOCKET", default_value = "/run/weir.sock")]
    socket: PathBuf,
    /// status | reload | counters | metrics | ct count|list [N]|flush | trace [N] | set ... |
    /// apply FILE (a transaction) | diff FILE (what apply would change)
    #[arg(required = true, num_args = 1..)]
    command: Vec<String>,
}

pub fn run(a: RunArgs) -> anyhow::Result<ExitCode> {
    weir_dataplane::log::init();
    weir_dataplane::run(weir_dataplane::RunOptions {
        config: a.config,
        print_kernel_rules: a.print_kernel_rules,
    })?;
    Ok(ExitCode::SUCCESS)
}

pub fn ctl(a: CtlArgs) -> anyhow::Result<ExitCode> {
    // `apply FILE` (one transaction, as `nft -f FILE`) and `diff FILE` (what it would change)
    if let [op @ ("apply" | "diff"), file] = a
        .command
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        let text = std::fs::read_to_string(file).map_err(|e| anyhow::anyhow!("{file}: {e}"))?;
        let line = format!("nft {op} {}", file.replace(char::is_whitespace, "_"));
        let reply = weir_dataplane::control::ask_with_body(&a.socket, &line, &text)?;
        let (ok, rest) = match reply.split_once('\n') {
            Some(("ok", r)) => (true, r),
            Some(("error", r)) => (false, r),
            _ => (false, reply.as_str()),
        };
        return Ok(if ok {
            print!("{rest}");
            ExitCode::SUCCESS
        } else {
            eprint!("{rest}");
            ExitCode::from(1)
        });
    }
    let out = weir_dataplane::control::ask(&a.socket, &a.command)?;
    print!("{out}");
    Ok(if out.starts_with("error") {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
