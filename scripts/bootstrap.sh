#!/usr/bin/env bash
# Create the virtualenv and install podnet with its test tools; on Debian as root, also
# install the Debian packages named in $3 when they are missing.
set -euo pipefail
python=${1:-python3}
venv=${2:-.venv}
debs=${3:-}

missing=()
for pkg in $debs; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
# commands the tests drive, and the Debian package that brings each when it is absent
for pair in kubectl:kubernetes-client; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair##*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "bootstrap: installing Debian packages: ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    # prometheus is wanted for its promtool only: its server must not start (a listener
    # on every address), so services are refused while it installs
    tools=() rest=()
    for pkg in "${missing[@]}"; do
      if [ "$pkg" = prometheus ]; then tools+=("$pkg"); else rest+=("$pkg"); fi
    done
    if [ ${#rest[@]} -gt 0 ]; then
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${rest[@]}" >/dev/null
    fi
    if [ ${#tools[@]} -gt 0 ]; then
      policy=/usr/sbin/policy-rc.d
      made=
      if [ ! -e "$policy" ]; then printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod +x "$policy"; made=1; fi
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${tools[@]}" >/dev/null
      if [ -n "$made" ]; then rm -f "$policy"; fi
    fi
  else
    echo "bootstrap: please install these Debian packages: ${missing[*]}" >&2
  fi
fi

if [ ! -x "$venv/bin/python" ]; then
  echo "bootstrap: creating $venv"
  "$python" -m venv "$venv"
fi
log="$venv/bootstrap.log"
echo "bootstrap: installing podnet with every provider's extra and its test tools (log: $log)"
if ! { "$venv/bin/python" -m pip install --upgrade pip && "$venv/bin/python" -m pip install -e '.[all,test]'; } >"$log" 2>&1; then
  tail -n 40 "$log" >&2
  exit 1
fi
"$venv/bin/python" -c "import podnet.app, podnet.core, podnet.hookspecs, podnet.node, podnet.testing"
# OVSDB's C JSON parser for the OVN provider (pip's `ovs` has none): a venv without it
# works, slower; the script says why
bash "$(dirname "$0")/ovs-json-parser.sh" "$venv/bin/python" || true
