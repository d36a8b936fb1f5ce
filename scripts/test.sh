#!/usr/bin/env bash
# Runs every test of the workspace on a fresh Debian machine: installs what the end-to-end tests
# need when it is missing (apt; as root, or with sudo), then `cargo test --workspace`. Arguments
# after `--` go to cargo test (`bash scripts/test.sh -- chaos::`). `--install-only` stops after
# the installs.
set -euo pipefail
cd "$(dirname "$0")/.."

install_only=false
if [ "${1:-}" = "--install-only" ]; then
  install_only=true
  shift
fi
[ "${1:-}" = "--" ] && shift

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing+=(python3-venv)
# The validators of the deployment files (deploy/validate.sh, run by cli/tests/e2e/deploy.rs), the
# topology test's proxy, and the browser of the web view's test (cli/tests/e2e/web_ui.rs), without
# recommended packages: docker-compose's would bring a Docker engine, which nothing here uses.
bare=()
command -v docker-compose >/dev/null 2>&1 || bare+=(docker-compose)
command -v promtool >/dev/null 2>&1 || bare+=(prometheus)
PATH="$PATH:/usr/sbin:/sbin" command -v nginx >/dev/null 2>&1 || bare+=(nginx-light)
command -v chromium >/dev/null 2>&1 || bare+=(chromium)
# The terminal client's test runs it in a real terminal.
command -v tmux >/dev/null 2>&1 || bare+=(tmux)
# The clock-skew test (cli/tests/e2e/faults.rs) runs conveyor under libfaketime.
[ -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 ] || bare+=(faketime)
if [ ${#missing[@]} -gt 0 ] || [ ${#bare[@]} -gt 0 ]; then
  apt_get=apt-get
  if [ "$(id -u)" -ne 0 ]; then
    apt_get="sudo apt-get"
  fi
  echo "installing: ${missing[*]} ${bare[*]}"
  export DEBIAN_FRONTEND=noninteractive
  ${apt_get} update -qq
  if [ ${#missing[@]} -gt 0 ]; then
    ${apt_get} install -y -qq "${missing[@]}" >/dev/null
  fi
  if [ ${#bare[@]} -gt 0 ]; then
    ${apt_get} install -y -qq --no-install-recommends "${bare[@]}" >/dev/null
  fi
fi

if $install_only; then
  exit 0
fi
# The end-to-end tests mostly wait on processes, sockets and Redis: four at a time use a 2-core
# machine well (twice as fast as one per core). RUST_TEST_THREADS overrides it.
export RUST_TEST_THREADS="${RUST_TEST_THREADS:-4}"
cargo test --workspace -- "$@"
