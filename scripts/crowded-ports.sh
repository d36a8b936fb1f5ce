#!/usr/bin/env bash
# Runs end-to-end tests where ports are scarce, to bring out the races of a test that picks a port
# and binds it later (see "Run the tests" in README.md): in a network namespace of its own (root,
# `unshare`, iproute2's `ip`) whose ephemeral port range is small, so that a released port is soon
# handed out again, several copies of the test binary at once, for several rounds.
#
# Usage: scripts/crowded-ports.sh TEST_FILTER [MORE_FILTERS...]
#   ROUNDS (default 10), COPIES (default 4), RANGE (default "40000 40200") tune it.
# Prints each failed copy's first panic and "failed: N of M"; exits non-zero when any failed.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ $# -eq 0 ]]; then
    echo "usage: $0 TEST_FILTER [MORE_FILTERS...]" >&2
    exit 2
fi
rounds=${ROUNDS:-10}
copies=${COPIES:-4}
range=${RANGE:-"40000 40200"}

cargo build -q --workspace --bins
binary=$(cargo test -p conveyor-cli --test e2e --no-run 2>&1 | sed -n 's/.*Executable .*(\(.*\))$/\1/p' | tail -n 1)
[[ -x "$binary" ]] || { echo "cannot find the e2e test binary" >&2; exit 1; }

logs=$(mktemp -d)
filters=$(printf '%q ' "$@")
# Inside the namespace: loopback up, the small range, then the rounds.
unshare -n bash -c "
    ip link set lo up
    echo '$range' > /proc/sys/net/ipv4/ip_local_port_range
    for ((r = 1; r <= $rounds; r++)); do
        for ((c = 1; c <= $copies; c++)); do
            ( '$binary' $filters > '$logs/run-'\$r-\$c.log 2>&1 || echo FAILED >> '$logs/run-'\$r-\$c.log ) &
        done
        wait
    done
"
failed=0
for log in "$logs"/run-*.log; do
    if grep -q '^FAILED$' "$log"; then
        failed=$((failed + 1))
        echo "--- $(basename "$log"):"
        grep -m 1 -A 2 'panicked at' "$log" | cut -c 1-300 || tail -n 5 "$log"
    fi
done
echo "failed: $failed of $((rounds * copies)) (logs in $logs)"
[[ $failed -eq 0 ]]
