#!/usr/bin/env bash
# rain-worker per-task overhead against dpdk-testpmd's per-packet cost, on the same kind
# of virtual port (net_ring loopback: what a port transmits comes back on its RX queue).
#
# rain-worker --bench: rain mode, echo handler, 32 tokens; the process itself plays a
# saturated switch (every TOKEN that loops back becomes a DISPATCH, every RESPONSE is
# counted), so one task = full receive -> FIFO -> handler -> response + token path,
# i.e. 2 frames received and 2 sent. testpmd: --forward-mode=io with 32 packets
# circulating (--tx-first). For context: testpmd macswap on net_ring (touches each
# packet's Ethernet header) and io on net_null (RX allocates, TX frees every mbuf, as a
# NIC's refill/completion does).
#
# Best of BENCH_REPEAT runs for each (the machine is shared; the minimum is the cost).
# Usage: bench_worker.sh [path/to/rain-worker]; BENCH_SECONDS (per run, default 1).
set -euo pipefail

HERE=$(cd "$(dirname "$0")/.." && pwd)
BIN=${1:-$HERE/build/rain-worker}
SECS=${BENCH_SECONDS:-1}
REPEAT=${BENCH_REPEAT:-3}
OUT=${BENCH_OUT:-$HERE/build/bench-worker.json}
PREFIX=rwbench-$$
EAL=(--no-huge --no-pci --no-telemetry --log-level=lib.eal:error)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP" /var/run/dpdk/$PREFIX-*' EXIT

[ "$(id -u)" = 0 ] || { echo "bench-worker: needs root (DPDK)" >&2; exit 1; }
command -v dpdk-testpmd >/dev/null || { echo "bench-worker: dpdk-testpmd not found (Debian package dpdk-dev)" >&2; exit 1; }
[ -x "$BIN" ] || { echo "bench-worker: $BIN not built" >&2; exit 1; }

# testpmd: ns per packet = 1e9 / the best per-second Rx-pps after the first second.
testpmd_ns() { # vdev forward-mode extra-args...
	local vdev=$1 fwd=$2; shift 2
	local best=0
	timeout -s INT 4 dpdk-testpmd -l 0,1 "${EAL[@]}" --file-prefix="$PREFIX-tp" \
		--vdev="$vdev" -- --forward-mode="$fwd" --stats-period 1 --total-num-mbufs=8192 "$@" \
		</dev/null >"$TMP/tp.out" 2>&1 || true
	best=$(awk '/Rx-pps:/ { n++; if (n > 1 && $2 > b) b = $2 } END { print b + 0 }' "$TMP/tp.out")
	[ "$best" -gt 0 ] || { echo "bench-worker: testpmd on $vdev measured nothing:" >&2; tail -20 "$TMP/tp.out" >&2; exit 1; }
	awk -v p="$best" 'BEGIN { printf "%.2f", 1e9 / p }'
}

# rain-worker --bench: ns per task (best of REPEAT).
worker_ns() { # label lcores extra-args...
	local label=$1 lcores=$2; shift 2
	local best="" i line ns
	for ((i = 0; i < REPEAT; i++)); do
		line=$(timeout 60 "$BIN" --lcores="$lcores" "${EAL[@]}" --file-prefix="$PREFIX-w$i" --vdev=net_ring0 -- \
			--threads 1 --mode rain --handler echo --idle spin --quota 32 \
			--bench "$SECS" --bench-warmup 0.3 "$@" 2>"$TMP/w.err" | grep '"bench"' || true)
		rm -rf "/var/run/dpdk/$PREFIX-w$i"
		[ -n "$line" ] || { echo "bench-worker: rain-worker ($label) failed:" >&2; cat "$TMP/w.err" >&2; exit 1; }
		echo "$line" >>"$TMP/$label.jsonl"
		ns=$(sed -n 's/.*"ns_per_task": \([0-9.]*\).*/\1/p' <<<"$line")
		if [ -z "$best" ] || awk -v a="$ns" -v b="$best" 'BEGIN { exit !(a < b) }'; then best=$ns; fi
	done
	echo "$best"
}

echo "bench-worker: $REPEAT x ${SECS}s per measurement, net_ring loopback (and net_null for context)"
tp_ring=$(testpmd_ns net_ring0 io --tx-first)
tp_swap=$(testpmd_ns net_ring0 macswap --tx-first)
tp_null=$(testpmd_ns net_null0 io)
w_inline=$(worker_ns inline 0@0,1@1 --inline-rx)
w_pipe=$(worker_ns pipelined 0@0,1@1,2@0)

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", a / b }'; }
printf '\n%-58s %10s %9s\n' "measurement" "ns" "ratio"
printf '%-58s %10s %9s\n' "testpmd io, net_ring, per packet (baseline)" "$tp_ring" "1.0"
printf '%-58s %10s %9s\n' "testpmd macswap, net_ring, per packet" "$tp_swap" "$(ratio "$tp_swap" "$tp_ring")"
printf '%-58s %10s %9s\n' "testpmd io, net_null, per packet (alloc+free)" "$tp_null" "$(ratio "$tp_null" "$tp_ring")"
printf '%-58s %10s %9s\n' "rain-worker, run to completion (--inline-rx), per task" "$w_inline" "$(ratio "$w_inline" "$tp_ring")"
printf '%-58s %10s %9s\n' "rain-worker, RX lcore + worker lcore (2 CPUs), per task" "$w_pipe" "$(ratio "$w_pipe" "$tp_ring")"
printf '%-58s %10s %9s\n' "rain-worker, run to completion, per frame (task = 4 frames)" \
	"$(awk -v a="$w_inline" 'BEGIN { printf "%.2f", a / 4 }')" "$(ratio "$(awk -v a="$w_inline" 'BEGIN { print a / 4 }')" "$tp_ring")"
echo "target: rain-worker per task <= 2 x testpmd per packet -> $(awk -v a="$w_inline" -v b="$tp_ring" 'BEGIN { print (a <= 2 * b) ? "met" : "NOT met" }') (run to completion)"

mkdir -p "$(dirname "$OUT")"
cat >"$OUT" <<JSON
{"seconds_per_run": $SECS, "repeat": $REPEAT,
 "testpmd_io_net_ring_ns_per_packet": $tp_ring, "testpmd_macswap_net_ring_ns_per_packet": $tp_swap,
 "testpmd_io_net_null_ns_per_packet": $tp_null,
 "worker_inline_ns_per_task": $w_inline, "worker_pipelined_ns_per_task": $w_pipe,
 "ratio_inline_vs_testpmd_ring": $(ratio "$w_inline" "$tp_ring"), "ratio_inline_vs_testpmd_null": $(ratio "$w_inline" "$tp_null"),
 "worker_runs": {"inline": [$(paste -sd, "$TMP/inline.jsonl")], "pipelined": [$(paste -sd, "$TMP/pipelined.jsonl")]}}
JSON
echo "bench-worker: results in $OUT"
