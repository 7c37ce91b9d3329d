#!/usr/bin/env bash
# Checks deploy/systemd/ember.service with systemd's own parser (systemd-analyze verify) and the
# capability lines against the documented set. Usage: check_systemd_unit.sh UNIT AGENT DEFAULTS.
set -euo pipefail
unit=$1 agent=$2 defaults=$3
fail() {
  echo "check_systemd_unit: $*"
  exit 1
}
command -v systemd-analyze >/dev/null || fail "systemd-analyze missing (Debian: systemd; scripts/setup.sh installs it)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# verify insists that ExecStart's program exists, so point it at the agent this build made.
sed "s|/usr/local/bin/ember-agent|$agent|" "$unit" >"$work/ember.service"
grep -q "^ExecStart=$agent " "$work/ember.service" || fail "ExecStart does not run /usr/local/bin/ember-agent"
# verify exits 0 on settings it ignores ("Failed to parse ..., ignoring"): any word is a failure.
systemd-analyze verify --man=no "$work/ember.service" >"$work/out" 2>&1 || true
[[ ! -s $work/out ]] || fail "systemd-analyze verify: $(cat "$work/out")"

# The set of docs/capabilities.md.
caps="CAP_BPF CAP_PERFMON CAP_SYS_PTRACE CAP_SYS_RESOURCE CAP_DAC_READ_SEARCH CAP_SYSLOG CAP_SETPCAP"
for key in CapabilityBoundingSet AmbientCapabilities; do
  [[ $(sed -n "s/^$key=//p" "$unit") == "$caps" ]] || fail "$key is not exactly: $caps"
done
docs=$(dirname "$unit")/../../docs/capabilities.md
for cap in $caps; do
  grep -q "^| \`$cap\`" "$docs" || fail "$cap is not in the table of docs/capabilities.md"
done
for setting in EnvironmentFile=-/etc/default/ember Restart=on-failure ProtectSystem=strict \
  ProtectHome=read-only PrivateTmp=yes NoNewPrivileges=yes StateDirectory=ember; do
  grep -qx "$setting" "$unit" || fail "missing $setting"
done
# ProtectKernelLogs=yes removes CAP_SYSLOG, which /proc/kallsyms' addresses need.
! grep -Eq '^ProtectKernelLogs=(yes|true|on|1)' "$unit" ||
  fail "ProtectKernelLogs= takes away CAP_SYSLOG, which the unit grants for kernel frame names"
grep -qx 'SystemCallFilter=~syslog' "$unit" || fail "syslog(2) is not denied"
# The agent installs its own seccomp filter: the unit's must let it.
grep -Eq '^SystemCallFilter=@system-service( [a-z_0-9]+)* seccomp( |$)' "$unit" ||
  fail "SystemCallFilter does not allow seccomp, which the agent's own filter needs"
# The same memory bound as the Helm chart's limit.
chart_limit=$(sed -n '/^  limits:/,/^[^ ]/s/^    memory: //p' "$(dirname "$unit")/../helm/ember/values.yaml")
[[ $chart_limit =~ ^([0-9]+)Gi$ ]] || fail "the chart's memory limit '$chart_limit' is not in Gi"
# systemd's G is 1024^3 bytes, the chart's Gi.
grep -qx "MemoryMax=${BASH_REMATCH[1]}G" "$unit" ||
  fail "MemoryMax=${BASH_REMATCH[1]}G (the chart's memory limit, $chart_limit) missing"
# Nothing may hide other processes' /proc entries from the agent.
! grep -Eq '^(ProtectProc=(invisible|noaccess|ptraceable)|ProcSubset=pid)' "$unit" ||
  fail "ProtectProc/ProcSubset hide /proc from the agent"
# The example environment file: comments and KEY=value lines only, every EMBER_ key one the unit uses.
while IFS= read -r line; do
  [[ -z $line || $line == \#* ]] && continue
  [[ $line =~ ^[A-Z_]+= ]] || fail "$defaults: not KEY=value: $line"
done <"$defaults"
for key in $(grep -o 'EMBER_[A-Z_]*' "$defaults" | sort -u); do
  grep -q "\${\?$key" "$unit" || fail "$defaults names $key, which ember.service does not use"
done
echo "check_systemd_unit: ok"
