#!/usr/bin/env bash
# Provision this machine for startlab: install Ansible if it is missing, then apply
# playbooks/site.yml locally. Skips everything when nothing it depends on has changed.
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$top"

inputs_hash() {
  # Everything provisioning turns into installed state: a change here means work to do.
  find playbooks pyproject.toml Cargo.toml Cargo.lock hosts analysis \
       \( -name '*.yml' -o -name '*.sh' -o -name '*.toml' -o -name '*.lock' -o -name '*.rs' \
          -o -name '*.c' -o -name '*.h' \) \
       -type f 2>/dev/null | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-64
}

want=$(inputs_hash)
if [ "${1:-}" != "--force" ] && [ -f .provisioned ] && [ "$(cat .provisioned)" = "$want" ] \
   && [ -x .venv/bin/python ] && [ -f .cargo-path ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "startlab: provisioning needs root (run it with sudo)" >&2
  exit 1
fi
echo "startlab: provisioning this machine (playbooks/site.yml) ..." >&2
if ! command -v ansible-playbook >/dev/null; then
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
    --no-install-recommends ansible-core >/dev/null
fi
log=$(mktemp /tmp/startlab-provision.XXXXXX.log)
if ! ANSIBLE_NOCOLOR=1 ANSIBLE_STDOUT_CALLBACK=default ansible-playbook -i localhost, -c local \
     playbooks/site.yml >"$log" 2>&1; then
  tail -n 40 "$log" >&2
  echo "startlab: provisioning failed; full log in $log" >&2
  exit 1
fi
rm -f "$log"
echo "$want" > .provisioned
echo "startlab: provisioned" >&2
