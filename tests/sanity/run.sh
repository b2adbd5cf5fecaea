#!/usr/bin/env bash
# Run `ansible-test sanity` on a clean copy of the collection (only files git knows about),
# laid out as ansible_collections/stellaops/runtime as ansible-test requires. Works offline:
# ansible-test's get-pip download is replaced by a local bootstrap based on ensurepip.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
venv=${VENV:-$root/.venv}
work=$root/.build/sanity/ansible_collections/stellaops/runtime
cache=$HOME/.ansible/test/cache
mkdir -p "$cache"

# ansible-test names the cache file after the pip version it wants (get_pip_<ver>.py); cover them all.
for ver in $(grep -ho "pip='[0-9.]*'" "$("$venv/bin/python" -c 'import ansible_test,os;print(os.path.dirname(ansible_test.__file__))')/_internal/python_requirements.py" | tr -dc "0-9.\n" | tr . _ | sort -u); do
  cat > "$cache/get_pip_${ver}.py" <<'PY'
"""Offline stand-in for get-pip.py: bootstrap pip with ensurepip, then install what was asked."""
import os
import subprocess
import sys
import ensurepip

ensurepip.bootstrap(upgrade=True)
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel", "--disable-pip-version-check")]
env = dict(os.environ)
env.pop("PIP_CONFIG_FILE", None)
env.setdefault("PIP_CERT", "/etc/ssl/certs/ca-certificates.crt")
if args:
    subprocess.check_call([sys.executable, "-m", "pip", "install", "--disable-pip-version-check"] + args, env=env)
PY
done

rm -rf "$root/.build/sanity"
mkdir -p "$work"
# (files deleted in the work tree but still in git's index are left out)
(cd "$root" && git ls-files -co --exclude-standard | grep -v '^\.' | while IFS= read -r f; do [[ -e $f || -L $f ]] && printf '%s\n' "$f"; done \
  | tar -cf - -T -) | tar -C "$work" -xf -
cd "$work"
git init -q . && git add -A >/dev/null
export PIP_CERT=${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}
"$venv/bin/ansible-test" sanity --python 3.11 --local --color no "$@"
