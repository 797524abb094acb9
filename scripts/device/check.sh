#!/usr/bin/env bash
# The one command a lent accelerator machine runs, from a copy of the working tree with .whl/ carried
# (scripts/device/wheelhouse.sh fills it): no network, no livegen install, the image's python3 with
# its torch and transformers. Within 8 minutes it writes $OUT/device.md and $OUT/device.json:
#
#   machine  the machine and the versions it ran on
#   duplex   the lockstep frame clock at Moshi 7B's geometry (random weights, bfloat16) at batch
#            1, 8, 16, 32, 48, 64 (those whose state fits the GPU): step p50/p95/p99 against the
#            80 ms frame, missed frames, GPU memory (livegen bench voice-duplex)
#   wan      causal Wan at the 1.3B geometry (random weights): 1 and 4 sessions batched, fps per
#            session, the first chunk's latency
#   serve    a live `livegen serve --voice-model moshi` on a random 7B checkpoint written here (with
#            its SHA256SUMS) and as many WebSocket clients as the duplex table held, streaming
#            real-time audio for 60 s: missed frames, first audio, the server's CPU
#
# Each stage runs under its own time budget (timeout), so a slow one cannot eat the others, and the
# report is written from whatever finished. DEVICE_DRY=1 runs the same code paths at tiny geometry
# on the CPU (CI does, .ci/run). Environment: OUT (default out/device), DEVICE_WHEELS (default
# .whl; with no wheels there, nothing is installed: livegen's own install, on a GPU box with a
# registry, needs none), DEVICE_SITE (where the wheels go, default a temporary directory), PYTHON,
# DEVICE_STAGES (default "machine duplex wan checkpoint serve": a rerun of some, in less time).
#
#   OUT=/tmp/out scripts/device/check.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
out="${OUT:-out/device}"
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
python="${PYTHON:-python3}"
wheels="${DEVICE_WHEELS:-.whl}"
site="${DEVICE_SITE:-$work/site}"
dry="${DEVICE_DRY:-0}"
started=$(date +%s)

if [ "$dry" = 1 ]; then
    device=cpu duplex_geometry=tiny wan_geometry=tiny
    duplex_args=(--sizes 1,2,4 --steps 10 --warmup 2 --device cpu --dtype float32)
    wan_args=(--sessions 1,2 --chunks 3) seconds=15 min_sessions=2 max_sessions=2
    budget_duplex=120 budget_wan=180 budget_checkpoint=60 budget_serve=150
else
    device=cuda duplex_geometry=7b wan_geometry=1.3b
    duplex_args=(--steps 50 --warmup 5 --device cuda --dtype bfloat16)
    wan_args=(--sessions 1,4 --chunks 10) seconds=60 min_sessions=1 max_sessions=64
    budget_duplex=100 budget_wan=80 budget_checkpoint=100 budget_serve=160
fi

stages=" ${DEVICE_STAGES:-machine duplex wan checkpoint serve} "
if compgen -G "$wheels/*.whl" >/dev/null; then
    echo "check: installing $(ls "$wheels"/*.whl | wc -l) wheels from $wheels into $site"
    "$python" -m pip install -q --no-index --no-deps --no-compile --disable-pip-version-check \
        --target "$site" "$wheels"/*.whl || { echo "check: the wheelhouse did not install" >&2; exit 1; }
else
    echo "check: no wheels in $wheels: running on what $python has installed"
fi
export PYTHONPATH="$root/src:$site" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# The tiny model's tensors are too small for more than one CPU thread, and on a shared CPU more
# threads wait on each other (the bench and the registry's moshi-tiny take one; the server's moshi,
# made for a GPU, would not).
[ "$dry" = 1 ] && export OMP_NUM_THREADS=1

# stage NAME BUDGET_S COMMAND...: runs it under its budget, its output in $work/NAME.log, and
# appends {"stage", "rc", "seconds", "timed_out"} to $work/stages.jsonl for the report.
stage() {
    local name=$1 budget=$2 begun rc
    shift 2
    [[ "$stages" == *" $name "* ]] || return 0
    begun=$(date +%s)
    echo "check: $name (budget ${budget} s)"
    timeout -k 10 "$budget" "$@" >"$work/$name.log" 2>&1
    rc=$?
    echo "{\"stage\": \"$name\", \"rc\": $rc, \"seconds\": $(($(date +%s) - begun)), \"budget_s\": $budget," \
        "\"timed_out\": $([ $rc = 124 ] || [ $rc = 137 ] && echo true || echo false)}" >>"$work/stages.jsonl"
    echo "check: $name rc=$rc in $(($(date +%s) - begun)) s"
}

stage machine 30 "$python" scripts/device/stages.py machine "$work/machine.json"

sizes=1,8,16,32,48,64
if [ "$dry" != 1 ]; then
    sizes=$("$python" scripts/device/stages.py sizes --want "$sizes" 2>/dev/null || echo 1,8,16,32)
fi
[ "$dry" = 1 ] || duplex_args+=(--sizes "$sizes")
stage duplex "$budget_duplex" "$python" -m livegen bench voice-duplex --geometry "$duplex_geometry" \
    "${duplex_args[@]}" --json "$work/duplex.json"

stage wan "$budget_wan" "$python" scripts/device/stages.py wan "$work/wan.json" \
    --geometry "$wan_geometry" --device "$device" "${wan_args[@]}"

# As many clients as the frame clock held (the duplex table); the dry run always has two.
held=$("$python" -c "import json,sys; print(json.load(open(sys.argv[1]))['sessions_held'])" \
    "$work/duplex.json" 2>/dev/null || echo 1)
[ "$held" -ge "$min_sessions" ] || held=$min_sessions
[ "$held" -le "$max_sessions" ] || held=$max_sessions
held=${DEVICE_SESSIONS:-$held}  # a rerun of serve alone names its clients
stage checkpoint "$budget_checkpoint" "$python" scripts/device/stages.py checkpoint "$work/moshi" \
    --geometry "$duplex_geometry" --device "$device" --max-sessions "$held" --json "$work/checkpoint.json"

if [[ "$stages" == *" serve "* ]]; then
    port=$("$python" -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
    "$python" -m livegen serve --host 127.0.0.1 --port "$port" --voice-model moshi \
        --voice-model-path "$work/moshi" --voice-device "$device" --world-model none \
        --max-sessions "$held" >"$work/server.log" 2>&1 &
    server=$!
    stage serve "$budget_serve" "$python" scripts/device/clients.py "$work/serve.json" --port "$port" \
        --sessions "$held" --seconds "$seconds" --server-pid "$server" --ready-s $((budget_serve - seconds - 15))
    kill "$server" 2>/dev/null
    wait "$server" 2>/dev/null
fi

"$python" scripts/device/report.py "$work" "$out" --dry "$dry" --wall-s $(($(date +%s) - started))
status=$?
# Every stage's log in one file beside the report (a lent machine sends back few files), then the
# work directory (the checkpoint is 15 GB) goes.
for log in "$work"/*.log; do
    [ -e "$log" ] && { echo "==> $(basename "$log")"; tail -n 200 "$log"; }
done >"$out/device-logs.txt"
rm -rf "$work"
echo "check: wrote $out/device.md, device.json and device-logs.txt in $(($(date +%s) - started)) s"
exit $status
