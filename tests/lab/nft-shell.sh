#!/usr/bin/env bash
# nftables' own shell tests (../shared/nftables-tests/shell) run against a running weir, with
# `$NFT` set to `weir nft` (a symlink named nft, as tools find it on the PATH), as nft's
# `run-tests.sh` runs them against the kernel: `nft flush ruleset` before each test, the
# test must exit 0 (77: it skipped itself; a name's `_N` is only part of it), and the
# ruleset left behind (`nft list ruleset`) compared with the test's shipped dump
# (`dumps/NAME.nft`), as text.
#
# The tests chosen are those that are only `nft` commands against a ruleset (no `ip`, no
# namespaces, no traffic; not the `bridge` and `arp` families, outside weir's scope);
# tests/lab/nft_shell.py chooses them, runs them, and lists every failure with its reason.
# The run fails when fewer than WEIR_SHELL_FLOOR percent of the chosen tests pass.
#
# weir runs inline in namespace weirsh-r between two veth ends (198.18.96.1/24,
# 198.18.97.1/24), starting from an empty ruleset.
#
# Usage: tests/lab/nft-shell.sh [path/to/weir]   (WEIR_SHELL_ONLY=REGEX runs only those)
set -euo pipefail
R=weirsh-r
NAMESPACES="$R" TOOLS="ip python3 timeout" PREFIX=weirsh
. "$(dirname "$0")/common.sh"
IO=afpacket
trap 'stop_weir; cleanup' EXIT
SHELL_DIR=${WEIR_SHELL_DIR:-$(dirname "$0")/../../../shared/nftables-tests/shell}
[ -d "$SHELL_DIR" ] || { echo "SKIP: no $SHELL_DIR (nftables' shell tests, ../shared)"; exit 0; }
SHELL_DIR=$(readlink -f "$SHELL_DIR")

ip -n $R link add weirsh0 type veth peer name weirsh1
ip -n $R addr add 198.18.96.1/24 dev weirsh0; ip -n $R link set weirsh0 up
ip -n $R addr add 198.18.97.1/24 dev weirsh1; ip -n $R link set weirsh1 up
: >"$DIR/rules.nft"
weir_toml "weirsh0 198.18.96.1 198.18.96.0/24" "weirsh1 198.18.97.1 198.18.97.0/24"
start_weir $R "an empty ruleset"
mkdir "$DIR/bin"; ln -s "$WEIR" "$DIR/bin/nft"
export WEIR_SOCKET="$DIR/weir.sock"
# FLOOR: a ratchet at what passes today (the issue's target is 90)
python3 "$(dirname "$0")/nft_shell.py" --nft "$DIR/bin/nft" --tests "$SHELL_DIR" \
  --tmp "$DIR" --weir-pid "$WPID" --floor "${WEIR_SHELL_FLOOR:-88}" \
  ${WEIR_SHELL_ONLY:+--only "$WEIR_SHELL_ONLY"} || fail "nftables' shell tests against weir"
kill -0 "$WPID" 2>/dev/null || fail "weir stopped during the tests"
echo PASS
