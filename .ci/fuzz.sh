#!/usr/bin/env bash
# Runs every cargo-fuzz target of the repository for a bounded time and fails if one crashes.
#
#   bash .ci/fuzz.sh                      # 60 s per target
#   FUZZ_SECONDS=10 bash .ci/fuzz.sh      # shorter
#   FUZZ_TIMEOUT=10                       # seconds one input may take before it counts as a hang
#
# Targets: every `cargo fuzz list` entry of every crates/*/fuzz directory (weir-wire:
# packet_parse, pcap_read; weir-lang: parse_ruleset, import_iptables; weir-engine: engine_frames,
# answers; and any added later). Each runs on a
# scratch copy of its seed corpus (crates/X/fuzz/corpus/TARGET, when there is one), so the
# committed seeds are never rewritten. Crash inputs land in crates/X/fuzz/artifacts/TARGET/.
#
# Needs a nightly toolchain (AddressSanitizer); without one fuzzing is skipped, not failed.
# cargo-fuzz is installed with `cargo install cargo-fuzz --locked` when missing (~1-5 min).
set -euo pipefail

cd "$(dirname "$0")/.."
root=$PWD

FUZZ_SECONDS=${FUZZ_SECONDS:-60}
FUZZ_TIMEOUT=${FUZZ_TIMEOUT:-10}

say() { printf 'fuzz: %s\n' "$*"; }

if [[ $FUZZ_SECONDS == 0 ]]; then
    say "SKIPPED: FUZZ_SECONDS=0"
    exit 0
fi

if ! nightly_version=$(cargo +nightly --version 2>&1); then
    say "SKIPPED: no nightly toolchain ('cargo +nightly --version' said: ${nightly_version%%$'\n'*})."
    say "cargo-fuzz needs nightly for -Zsanitizer=address; the stable tests above still ran."
    exit 0
fi
say "using $nightly_version"

export PATH="$HOME/.cargo/bin:$PATH"
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    say "cargo-fuzz not found: installing it (cargo install cargo-fuzz --locked, a few minutes)"
    start=$SECONDS
    cargo install cargo-fuzz --locked
    say "cargo-fuzz installed in $((SECONDS - start)) s"
fi
say "using $(cargo +nightly fuzz --version)"

work=$(mktemp -d "${TMPDIR:-/tmp}/weir-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT

clean=()
crashed=()
broken=()

for dir in crates/*/fuzz; do
    [[ -f $dir/Cargo.toml ]] || continue
    crate=$(basename "$(dirname "$dir")")
    if ! targets=$(cargo +nightly fuzz list --fuzz-dir "$dir" 2>"$work/list.err"); then
        say "$dir: 'cargo fuzz list' failed:"
        cat "$work/list.err"
        broken+=("$crate (list)")
        continue
    fi
    say "$dir: targets: $(echo $targets)"

    # One build per fuzz directory (release, debug assertions and overflow checks on, ASan).
    say "$dir: building"
    start=$SECONDS
    if ! cargo +nightly fuzz build --debug-assertions --fuzz-dir "$dir" >"$work/build-$crate.log" 2>&1; then
        say "$dir: BUILD FAILED; last lines of the build log:"
        tail -n 40 "$work/build-$crate.log"
        broken+=("$crate (build)")
        continue
    fi
    say "$dir: built in $((SECONDS - start)) s"

    for target in $targets; do
        name="$crate/$target"
        corpus="$work/corpus/$crate/$target"
        mkdir -p "$corpus"
        dirs=("$corpus")
        seeds="$dir/corpus/$target"
        if [[ -d $seeds ]]; then
            dirs+=("$seeds")
        fi
        log="$work/run-$crate-$target.log"
        say "$name: fuzzing for ${FUZZ_SECONDS} s (seeds: $( [[ -d $seeds ]] && echo "$seeds" || echo none))"
        status=0
        cargo +nightly fuzz run --debug-assertions --fuzz-dir "$dir" "$target" "${dirs[@]}" -- \
            -max_total_time="$FUZZ_SECONDS" -timeout="$FUZZ_TIMEOUT" -print_final_stats=1 \
            >"$log" 2>&1 || status=$?

        runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n1)
        rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n1)
        cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n1 || true)
        units=$(ls "$corpus" | wc -l)
        if [[ $status -eq 0 ]]; then
            say "$name: ok: ${runs:-?} runs, ${rate:-?} execs/s, ${cov:-cov: ?}, corpus $units new inputs"
            clean+=("$name")
            continue
        fi

        artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n1)
        if [[ -n $artifact ]]; then
            say "$name: CRASH after ${runs:-?} runs (exit $status). The end of the fuzzer's report:"
            # libFuzzer's progress lines and cargo-fuzz's own backtrace are noise here.
            grep -v '^#[0-9]' "$log" | sed '/^Stack backtrace:/,$d' | tail -n 60
            [[ $artifact = /* ]] || artifact="$root/$artifact"
            say "$name: crash input: $artifact"
            if [[ -f $artifact ]]; then
                say "$name: the input, escaped (first 400 bytes):"
                head -c 400 "$artifact" | od -An -c | head -n 30
            fi
            say "hint: reproduce with: cargo +nightly fuzz run --debug-assertions --fuzz-dir $dir $target $artifact"
            say "hint: shrink it with: cargo +nightly fuzz tmin --debug-assertions --fuzz-dir $dir $target $artifact"
            say "hint: then turn it into a regression test in $crate and fix the code, not the target."
            crashed+=("$name")
        else
            say "$name: the fuzzer failed (exit $status) without a crash input; last lines:"
            tail -n 40 "$log"
            broken+=("$name")
        fi
    done
done

say "summary: ${#clean[@]} target(s) clean, ${#crashed[@]} crashed, ${#broken[@]} could not run"
if ((${#crashed[@]})); then say "crashed: ${crashed[*]}"; fi
if ((${#broken[@]})); then say "could not run: ${broken[*]}"; fi
if ((${#crashed[@]} + ${#broken[@]})); then
    exit 1
fi
if ((${#clean[@]} == 0)); then
    say "no fuzz target found under crates/*/fuzz"
    exit 1
fi
