#!/usr/bin/env bash
# Provision this machine for startlab: install Ansible if it is missing, then apply
# playbooks/site.yml locally. Skips everything when nothing it depends on has changed.
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$top"

inputs_hash() {
  # Everything provisioning turns into installed state: a change here means work to do.
  find playbooks pyproject.toml Cargo.toml Cargo.lock hosts links analysis \
       \( -name '*.yml' -o -name '*.sh' -o -name '*.toml' -o -name '*.lock' -o -name '*.rs' \
          -o -name '*.c' -o -name '*.h' -o -name '*.go' -o -name go.mod -o -name go.sum \) \
       -type f 2>/dev/null | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-64
}

# --stage core: what the demo needs (no QUIC endpoints, web tools or test tools); full
# (the default): everything; vagrant: full and Vagrant with libvirt (run.py vagrant). A stage
# also satisfies the ones before it. --force: even if done.
stage=full force=
while [ $# -gt 0 ]; do
  case "$1" in
    --stage) stage=$2; shift 2 ;;
    --force) force=1; shift ;;
    *) echo "bootstrap.sh: unknown argument $1 (use --stage core|full|vagrant, --force)" >&2; exit 2 ;;
  esac
done
case "$stage" in
  core) enough="core full vagrant" ;;
  full) enough="full vagrant" ;;
  vagrant) enough="vagrant" ;;
  *) echo "bootstrap.sh: --stage is core, full or vagrant, not $stage" >&2; exit 2 ;;
esac

want=$(inputs_hash)
done_for() { [ -f ".provisioned-$1" ] && [ "$(cat ".provisioned-$1")" = "$want" ]; }
done_already() { for s in $enough; do done_for "$s" && return 0; done; return 1; }
if [ -z "$force" ] && done_already && [ -x .venv/bin/python ] && [ -f .cargo-path ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "startlab: provisioning needs root (run it with sudo)" >&2
  exit 1
fi
echo "startlab: provisioning this machine (playbooks/site.yml, stage $stage) ..." >&2
if ! command -v ansible-playbook >/dev/null; then
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
    --no-install-recommends ansible-core >/dev/null
fi
log=$(mktemp /tmp/startlab-provision.XXXXXX.log)
if ! ANSIBLE_NOCOLOR=1 ANSIBLE_STDOUT_CALLBACK=default ansible-playbook -i localhost, -c local \
     -e startlab_stage="$stage" playbooks/site.yml >"$log" 2>&1; then
  tail -n 40 "$log" >&2
  echo "startlab: provisioning failed; full log in $log" >&2
  exit 1
fi
rm -f "$log"
echo "$want" > ".provisioned-$stage"
echo "startlab: provisioned" >&2
