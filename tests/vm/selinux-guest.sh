#!/usr/bin/env bash
# Guest side of the SELinux experiment (issue 52, point 4), run as test.sh by tests/vm/run.sh in
# the Debian 13 guest that tests/vm/selinux-e2e.sh builds: selinux-policy-default (Debian's
# refpolicy) enforcing, its files labelled before boot, auditd, Debian's containerd 1.7 and runc.
#
# nodemedic runs in each domain it would get on such a node, and each feature's outcome is
# measured there, with the AVC denials (auditd's log) of that domain:
#   service    the .deb's layout (/usr/bin/nodemedic, its unit, /etc/nodemedic) under systemd:
#              whatever domain Debian's policy gives it
#   container  container_t with an MCS pair, under containerd (ctr run, containerd's shim and
#              runc), with the labels containerd's CRI would take from lxc_contexts (process
#              container_t, files container_file_t, the same categories) and the chart's mounts
#   spc        spc_t, the type Cilium and Datadog select (seLinuxOptions.type), same mounts
# Features: the reads (/proc/interrupts, /proc/irq, /sys, cgroups, /proc/pressure: each
# collector's nodemedic_scrape_collector_success), the eBPF probes (bpf(), perf_event_open:
# nodemedic_probe_up), irqbalance's restart over the host's system D-Bus (TryRestartUnit, in an
# incident replayed as in nodemedic-guest.sh) and native rebalancing (smp_affinity_list writes).
# Each outcome is compared with EXPECT below (what the recorded run measured): a difference is a
# FAIL line. Files expected in the share: nodemedic (static), nodemedic.service,
# native-rebalance.conf, nodemedic.toml (the VM test's windows).
set -uo pipefail
H=${HOST_DIR:-/mnt/host}
W=/var/lib/nm-selinux
# shellcheck source=tests/vm/guest-lib.sh
. "$H/guest-lib.sh"
finish() {
    echo "== the table (domain feature outcome)"
    cat "$W/results" 2>/dev/null
    echo "$pass passed, $fail failed"
    [ "$fail" -eq 0 ]
    exit
}

# What the recorded run measured, per domain and feature: allowed or denied. A domain's
# outcome that differs fails its check (the AVC lines are printed either way).
declare -A EXPECT=(
    [service:interrupts]=allowed [service:irq_read]=allowed [service:sysfs]=allowed
    [service:cgroups]=allowed [service:pressure]=allowed [service:probes]=allowed
    [service:dbus_restart]=allowed [service:affinity_write]=erofs
    [container:interrupts]=allowed [container:irq_read]=allowed [container:sysfs]=allowed
    [container:cgroups]=denied [container:pressure]=denied [container:probes]=denied
    [container:dbus_restart]=denied [container:affinity_write]=denied
    [spc:interrupts]=allowed [spc:irq_read]=allowed [spc:sysfs]=allowed
    [spc:cgroups]=allowed [spc:pressure]=allowed [spc:probes]=allowed
    [spc:dbus_restart]=denied [spc:affinity_write]=allowed
    [container:chart_mounts]=denied [spc:chart_mounts]=denied
    [service:tuning_netlink]=allowed [container:tuning_netlink]=denied [spc:tuning_netlink]=allowed
)
mkdir -p "$W"
: >"$W/results"
record() { # domain feature outcome evidence...
    local d=$1 f=$2 o=$3
    shift 3
    printf '%-10s %-15s %-8s %s\n' "$d" "$f" "$o" "$*" >>"$W/results"
    echo "  $d $f: $o ($*)"
    check "${d}_${f}_${EXPECT[$d:$f]:-unexpected}" [ "$o" = "${EXPECT[$d:$f]:-none}" ]
}

# journalctl runs in its own domain, which Debian's policy does not let read the journal
# ("No journal files were opened due to insufficient permissions", enforcing): this script's own
# copy (bin_t) runs in the script's domain.
JOURNALCTL=/usr/local/sbin/nm-journalctl
install -m 0755 /usr/bin/journalctl "$JOURNALCTL"
restorecon -F "$JOURNALCTL" 2>/dev/null

# --- the AVC log ---------------------------------------------------------------------------
# auditd keeps the kernel's AVC records and the userspace ones (USER_AVC: dbus-daemon's and
# systemd's own checks); without it they are in the kernel log.
AUDIT_LOG=/var/log/audit/audit.log
avc_mark() { # -> a position in the log
    if [ -s "$AUDIT_LOG" ]; then wc -l <"$AUDIT_LOG"; else $JOURNALCTL -k -o cat --no-pager | wc -l; fi
}
avc_since() { # mark [type] -> the AVC records since mark (of the domain type if given)
    local lines
    if [ -s "$AUDIT_LOG" ]; then
        lines=$(tail -n +"$(($1 + 1))" "$AUDIT_LOG")
    else
        lines=$($JOURNALCTL -k -o cat --no-pager | tail -n +"$(($1 + 1))")
    fi
    printf '%s\n' "$lines" | grep -E 'type=(AVC|USER_AVC|SELINUX_ERR)|avc: ' |
        grep -E "scontext=[^ ]*:${2:-[a-z_]+}:" || true
}
# The AVC lines of one feature, by what was denied (tclass, target type, path).
avc_of() { # feature (from stdin: the domain's AVC lines)
    case "$1" in
    interrupts) grep -E 'name="interrupts"|path="/(host/)?proc/interrupts"' ;;
    irq_read) grep -E 'tcontext=[^ ]*:sysctl_irq_t' | grep -vE '\{ [^}]*write' ;;
    affinity_write) grep -E 'tcontext=[^ ]*:sysctl_irq_t' | grep -E '\{ [^}]*(write|append)' ;;
    sysfs) grep -E 'tcontext=[^ ]*:sysfs[a-z_]*_t' ;;
    cgroups) grep -E 'tcontext=[^ ]*:(cgroup_t|memory_pressure_t)' ;;
    pressure) grep -E 'tcontext=[^ ]*:proc_psi_t|name="(pressure|cpu|io|memory|irq)".*tcontext=[^ ]*:proc_t|path="/(host/)?proc/pressure' ;;
    probes) grep -E 'tclass=(bpf|perf_event)|\{ (bpf|perfmon) \}|tcontext=[^ ]*:(bpf_t|tracefs_t|debugfs_t)' ;;
    tuning_netlink) grep -E 'tclass=netlink_generic_socket' ;;
    dbus_restart) grep -E 'tclass=(dbus|service|system)|tcontext=[^ ]*:(system_dbusd_t|system_dbusd_runtime_t|init_t|irqbalance_unit_t)' ;;
    esac
}

# --- the node -----------------------------------------------------------------------------
# Booted with enforcing=0 (selinux-e2e.sh's default: the harness's 9p share, where this script
# and its output live, cannot be mounted enforcing: mount_t may not mount its unlabeled_t
# filesystem, nor may files be created on it): enforcing from here to the end of the test, the
# output through tee (an initrc_t process, as the runner) to the share, permissive again only to
# let the runner write its results back.
if [ -f "$H/enforce-at-test" ] && [ -z "${NM_SELINUX_INNER:-}" ]; then
    echo "booted with enforcing=0; the share's mount at boot: $(grep -E 'type=AVC' /var/log/audit/audit.log | grep -m1 'dev="9p"' | grep -o 'avc: .*')"
    setenforce 1
    echo "setenforce 1: $(getenforce)"
    NM_SELINUX_INNER=1 bash "$H/test.sh" 2>&1 | tee /var/log/nm-selinux-test.out
    rc=${PIPESTATUS[0]}
    setenforce 0
    # For the record: the audit log and each nodemedic's log, back on the share.
    mkdir -p "$H/guest-logs"
    cp /var/log/audit/audit.log "$W"/*.log "$W"/*.json "$H/guest-logs/" 2>/dev/null
    exit "$rc"
fi
echo "guest: $(uname -r), $(. /etc/os-release && echo "$PRETTY_NAME"), $(systemctl --version | head -n1)"
sestatus | sed 's/^/  /'
check selinux_enforcing [ "$(getenforce)" = Enforcing ]
check policy_is_debians_default bash -c "sestatus | grep -Eq 'Loaded policy name: +default'"
check policy_has_mcs bash -c "sestatus | grep -Eq 'Policy MLS status: +enabled'"
echo "policy package: $(dpkg-query -W -f '${Package} ${Version}' selinux-policy-default)"
modules=$(semodule -l)
echo "modules (of $(echo "$modules" | wc -l)): $(echo "$modules" | grep -xE 'container|crio|docker|kubernetes|podman|unconfined|irqbalance|dbus' | paste -sd' ' -)"
check container_module bash -c "echo '$modules' | grep -qx container"
check unconfined_module bash -c "echo '$modules' | grep -qx unconfined"
echo "lxc_contexts:"
sed 's/^/  /' /etc/selinux/default/contexts/lxc_contexts
check lxc_contexts_container_t grep -q '^process = "system_u:system_r:container_t:s0"' /etc/selinux/default/contexts/lxc_contexts
echo "this script runs as $(cat /proc/self/attr/current)"
echo "labels: $(ls -Z /usr/bin/containerd /usr/sbin/runc /usr/bin/ctr /usr/sbin/irqbalance /run/dbus/system_bus_socket 2>&1 | paste -sd';' -)"
echo "processes: $(ps -eo label,comm | grep -E 'systemd$|dbus-daemon|irqbalance|containerd$|auditd' | awk '{print $2"="$1}' | paste -sd' ' -)"
check auditd_running systemctl -q is-active auditd
check irqbalance_running systemctl -q is-active irqbalance
# Denials from the boot (the policy's gaps for the guest itself), for the record.
boot_avcs=$(avc_since 0)
echo "AVC records before the test: $(echo "$boot_avcs" | grep -c . ) (types: $(echo "$boot_avcs" | grep -o 'scontext=[^ ]*' | cut -d: -f3 | sort | uniq -c | sort -rn | head -n 8 | awk '{print $2"×"$1}' | paste -sd' ' -))"

# --- the NIC's queue IRQs, for the incident -------------------------------------------------
nic_queue_irqs

# --- one nodemedic, its metrics and its decisions ------------------------------------------
PORT=9847
metrics() { curl -fsS --max-time 20 "http://127.0.0.1:$PORT/metrics"; }
decisions() { # -> the daemon's remediation decisions so far (its log: $1)
    grep 'remediation decision' "$1" 2>/dev/null || true
}
final() { # log action -> the first decided (not pending) result of that action: result=...
    local r
    r=$(decisions "$1" | grep "action=$2 " | grep -v 'result=pending' | head -n1 | grep -oE 'result=[a-z_]+')
    echo "${r:-result=none}"
}
outcomes() { # domain type log: the reads and the probes, from /metrics and the log
    local d=$1 t=$2 log=$3 m avcs c ok evidence
    m=$(metrics)
    echo "$m" | grep -E '^nodemedic_(scrape_collector_success|probe_up|probe_attach)' | sed 's/^/    /'
    avcs=$(avc_since "$MARK" "$t")
    # Each read feature: its collectors' success, and no AVC denial of it.
    # The collectors of each read: /proc/interrupts; /proc/irq/N/*_affinity*; sysfs (CPU
    # topology, PCI devices); the cgroup tree; /proc/pressure.
    for pair in interrupts:interrupts irq_read:irq_affinity sysfs:'topology|pci_devices' cgroups:cgroups pressure:pressure; do
        local f=${pair%%:*} re=${pair#*:}
        c=$(echo "$m" | grep -E "^nodemedic_scrape_collector_success\{collector=\"(${re})\"\}" || true)
        ok=allowed
        echo "$c" | grep -qE ' 0$' && ok=denied
        [ -n "$(echo "$avcs" | avc_of "$f")" ] && ok=denied
        [ -n "$c" ] || [ "$ok" = denied ] || ok=allowed
        evidence=$(echo "$c" | sed -E 's/nodemedic_scrape_collector_success\{collector="([^"]*)"\} /\1=/' | paste -sd, -)
        record "$d" "$f" "$ok" "collectors ${evidence:-none matched}; AVC: $(echo "$avcs" | avc_of "$f" | sed -n 1p)"
    done
    # The tuning audit's ethtool netlink requests (generic netlink): the collector falls back and
    # still succeeds, so only the AVC tells.
    ok=allowed
    [ -n "$(echo "$avcs" | avc_of tuning_netlink)" ] && ok=denied
    record "$d" tuning_netlink "$ok" "collector $(echo "$m" | grep -E '^nodemedic_scrape_collector_success\{collector="tuning"\}' | awk '{print "tuning=" $2}'); AVC: $(echo "$avcs" | avc_of tuning_netlink | sed -n 1p)"
    local up
    up=$(echo "$m" | grep -cE '^nodemedic_probe_up\{.*\} 1$' || true)
    ok=denied
    [ "$up" -ge 4 ] && ok=allowed
    record "$d" probes "$ok" "$up probes up; log: $(grep -iE 'probe' "$log" | grep -iE 'denied|permission|not permitted|EPERM|EACCES|fail' | head -n1 | cut -c1-300); AVC: $(echo "$avcs" | avc_of probes | sed -n 1p)"
}
incident() { # domain type log: irqbalance frozen, the IRQs pinned; the restart over D-Bus
    local d=$1 t=$2 log=$3 avcs res
    systemctl kill -s STOP irqbalance
    pin_to_cpu0
    echo "  pinned: $(affinities)"
    wait_for 90 "a decision (a restart, or an escalation)" bash -c "grep 'remediation decision' '$log' | grep -v result=pending | grep -qE 'action=(irqbalance_restart|escalate)'" || true
    sleep 2
    decisions "$log" | sed 's/^/    /'
    res=$(final "$log" irqbalance_restart)
    avcs=$(avc_since "$MARK" "$t")
    local ok=denied
    [ "$res" = result=done ] && ok=allowed
    record "$d" dbus_restart "$ok" "$res; first decision: $(decisions "$log" | grep -v result=pending | head -n1 | grep -oE 'action=.*' | cut -c1-400); AVC: $(echo "$avcs" | avc_of dbus_restart | sed -n 1p)"
    systemctl kill -s CONT irqbalance 2>/dev/null || true
    systemctl restart irqbalance
}
native() { # domain type log: irqbalance stopped, the IRQs pinned; nodemedic writes the affinity
    local d=$1 t=$2 log=$3 avcs res
    pin_to_cpu0
    echo "  pinned: $(affinities)"
    wait_for 90 "a decision (a native rebalance, or an escalation)" bash -c "grep 'remediation decision' '$log' | grep -v result=pending | grep -qE 'action=(native_rebalance|escalate)'" || true
    sleep 2
    decisions "$log" | sed 's/^/    /'
    res=$(final "$log" native_rebalance)
    echo "  after: $(affinities) ($(distinct) distinct)"
    avcs=$(avc_since "$MARK" "$t")
    local ok=denied
    [ "$res" = result=done ] && ok=allowed
    record "$d" affinity_write "$ok" "$res, $(distinct) CPUs after; first decision: $(decisions "$log" | grep -v result=pending | head -n1 | grep -oE 'action=.*' | cut -c1-400); AVC: $(echo "$avcs" | avc_of affinity_write | sed -n 1p)"
}
show_avcs() { # domain type: each distinct denial once (permission, class, target), with its count
    local avcs
    avcs=$(avc_since "$MARK" "$2")
    echo "  AVC records of $2 in this run: $(echo "$avcs" | grep -c .), distinct:"
    echo "$avcs" | grep . | awk '{
        key = ""
        if (match($0, /denied +\{[^}]*\}/)) key = substr($0, RSTART, RLENGTH)
        if (match($0, /tcontext=[^ ]*/)) key = key " " substr($0, RSTART, RLENGTH)
        if (match($0, /tclass=[^ ]*/)) key = key " " substr($0, RSTART, RLENGTH)
        if (!(key in n)) { order[++k] = key; first[key] = $0 }
        n[key]++
    } END { for (i = 1; i <= k; i++) printf "    %d x %s\n", n[order[i]], first[order[i]] }'
}

# The configuration, as the chart's ConfigMap makes it (host paths under /host, the container's
# own /sys on the host network, D-Bus through the mounted socket, no systemctl), with the VM
# test's windows.
container_config() { # native: true|false
    cat <<EOF
sample_interval = "1s"
[web]
listen_address = "127.0.0.1:$PORT"
[paths]
host_root = "/host"
sysfs = "/sys"
cgroupfs = "/host/sys/fs/cgroup"
[detector.collapse]
raise_after = 2
clear_after = 2
[remediation]
mode = "on"
cooldown = "60s"
verify_after = "25s"
[remediation.irqbalance]
enabled = true
dbus_socket = "/host/run/dbus/system_bus_socket"
systemctl_fallback = false
[remediation.native]
enabled = $1
require_hurting = false
[probes]
enabled = true
EOF
}
# The OCI spec containerd's CRI would give the chart's pod (hostNetwork, root without
# privileges: CAP_BPF and CAP_PERFMON only, no new privileges, read-only rootfs, the host's
# /proc, cgroup tree, /run/dbus, /etc/default and dpkg's database read-only under /host), with
# the SELinux labels set as the CRI plugin sets them: process and mount label.
spec() { # rootfs process-label mount-label native
    local irqmount='' dpkgmount=''
    [ "${DPKG_MOUNT:-true}" = true ] &&
        dpkgmount=',
    {"destination": "/host/var/lib/dpkg", "type": "bind", "source": "/var/lib/dpkg", "options": ["rbind", "ro"]}'
    [ "$4" = true ] && irqmount='{"destination": "/host/proc/irq", "type": "bind", "source": "/proc/irq", "options": ["rbind", "rw"]},'
    cat <<EOF
{
  "ociVersion": "1.0.2",
  "process": {
    "terminal": false,
    "user": {"uid": 0, "gid": 0},
    "args": ["/nodemedic", "run"],
    "env": ["PATH=/", "NODEMEDIC_CONFIG=/etc/nodemedic/nodemedic.toml"],
    "cwd": "/",
    "capabilities": {
      "bounding": ["CAP_BPF", "CAP_PERFMON"],
      "effective": ["CAP_BPF", "CAP_PERFMON"],
      "permitted": ["CAP_BPF", "CAP_PERFMON"]
    },
    "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1048576, "soft": 1048576}],
    "noNewPrivileges": true,
    "selinuxLabel": "$2"
  },
  "root": {"path": "$1", "readonly": true},
  "hostname": "nodemedic",
  "mounts": [
    {"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid", "noexec", "nodev"]},
    {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
    {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", "ro"]},
    {"destination": "/host/proc", "type": "bind", "source": "/proc", "options": ["rbind", "ro"]},
    $irqmount
    {"destination": "/host/sys/fs/cgroup", "type": "bind", "source": "/sys/fs/cgroup", "options": ["rbind", "ro"]},
    {"destination": "/host/run/dbus", "type": "bind", "source": "/run/dbus", "options": ["rbind", "ro"]},
    {"destination": "/host/etc/default", "type": "bind", "source": "/etc/default", "options": ["rbind", "ro"]}$dpkgmount
  ],
  "linux": {
    "namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}, {"type": "cgroup"}],
    "cgroupsPath": "/nm-selinux/$(basename "$1")",
    "resources": {"devices": [{"allow": false, "access": "rwm"}]},
    "maskedPaths": ["/proc/kcore", "/proc/keys", "/proc/timer_list", "/sys/firmware"],
    "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"],
    "mountLabel": "$3"
  }
}
EOF
}
# The root filesystem is a mount point, as containerd's snapshot (an overlay mount) is: runc
# makes the mount holding it private, and in containerd's domain (dockerd_t) it may only do that
# on container types; a plain directory sends it up to /var/lib (var_lib_t), which is refused.
rootfs() { # dir file-label native -> the image's content: the binary, its configuration
    umount "$1" 2>/dev/null
    rm -rf "$1"
    mkdir -p "$1"
    mount --bind "$1" "$1"
    mkdir -p "$1"/{proc,dev,sys,etc/nodemedic,host/proc,host/sys/fs/cgroup,host/run/dbus,host/etc/default,host/var/lib/dpkg}
    install -m 0755 "$H/nodemedic" "$1/nodemedic"
    container_config "$3" >"$1/etc/nodemedic/nodemedic.toml"
    chcon -R "$2" "$1"
}
# One container run: nodemedic under ctr (containerd's shim and runc), its log in $W/NAME.log.
ctr_start() { # name domain-label file-label native
    local name=$1 log="$W/$1.log"
    rootfs "$W/$name" "$3" "$4"
    spec "$W/$name" "$2" "$3" "$4" >"$W/$name.json"
    ctr -n nm-selinux run --config "$W/$name.json" "$name" >"$log" 2>&1 &
    if ! wait_for 90 "$name serving /metrics" bash -c "curl -fsS --max-time 5 http://127.0.0.1:$PORT/metrics >/dev/null 2>&1"; then
        echo "  $name's output:"
        sed 's/^/    /' "$log" | tail -n 30
        return 1
    fi
    local pid
    pid=$(ctr -n nm-selinux task ls 2>/dev/null | awk -v n="$name" '$1 == n { print $2 }')
    LABEL=$(tr -d '\0' <"/proc/$pid/attr/current" 2>/dev/null)
    echo "  $name: pid $pid, label $LABEL"
}
ctr_stop() { # name
    ctr -n nm-selinux task kill -s TERM "$1" >/dev/null 2>&1 || true
    wait_for 30 "$1 to exit" bash -c "! ctr -n nm-selinux task ls -q 2>/dev/null | grep -qx '$1'" >/dev/null ||
        ctr -n nm-selinux task kill -s KILL "$1" >/dev/null 2>&1
    sleep 1
    ctr -n nm-selinux task rm -f "$1" >/dev/null 2>&1 || true
    ctr -n nm-selinux container rm "$1" >/dev/null 2>&1 || true
}
settle() { # the IRQs spread again by a fresh irqbalance before the next run
    systemctl kill -s CONT irqbalance 2>/dev/null || true
    systemctl restart irqbalance
    wait_for 40 "irqbalance's spread" bash -c "[ \$(for i in ${IRQS[*]}; do cat /proc/irq/\$i/smp_affinity_list; done | sort -u | wc -l) -ge 2 ]" >/dev/null || true
}

# --- 1. the .deb's service -------------------------------------------------------------------
echo "== the service: the .deb's files, its unit, under systemd"
MARK=$(avc_mark)
install -m 0755 "$H/nodemedic" /usr/bin/nodemedic
install -D -m 0644 "$H/nodemedic.toml" /etc/nodemedic/nodemedic.toml
install -D -m 0644 "$H/nodemedic.service" /usr/lib/systemd/system/nodemedic.service
restorecon -RF /usr/bin/nodemedic /etc/nodemedic /usr/lib/systemd/system/nodemedic.service
echo "  files: $(ls -Z /usr/bin/nodemedic /etc/nodemedic/nodemedic.toml /usr/lib/systemd/system/nodemedic.service | paste -sd';' -)"
systemctl daemon-reload
check service_starts systemctl start nodemedic
check service_serving wait_for 60 "the service's /metrics" bash -c "curl -fsS --max-time 5 http://127.0.0.1:$PORT/metrics >/dev/null 2>&1"
spid=$(systemctl show -p MainPID --value nodemedic)
SVC_LABEL=$(tr -d '\0' <"/proc/$spid/attr/current")
SVC_TYPE=$(echo "$SVC_LABEL" | cut -d: -f3)
echo "  the service's label: $SVC_LABEL"
check service_domain_label [ -n "$SVC_TYPE" ]
$JOURNALCTL -u nodemedic -o cat --no-pager >"$W/service.log"
check service_sampled wait_for 60 "three samples" bash -c "curl -fsS http://127.0.0.1:$PORT/metrics 2>/dev/null | grep -qE '^nodemedic_samples_total [3-9]'"
check service_probes_settled wait_for 90 "the probes attached or given up" bash -c "curl -fsS http://127.0.0.1:$PORT/metrics 2>/dev/null | grep -q '^nodemedic_probe_up'"
$JOURNALCTL -u nodemedic -o cat --no-pager >"$W/service.log"
outcomes service "$SVC_TYPE" "$W/service.log"
systemctl kill -s STOP irqbalance
pin_to_cpu0
echo "  pinned: $(affinities)"
wait_for 90 "an irqbalance_restart decision" bash -c "$JOURNALCTL -u nodemedic -o cat --no-pager | grep 'remediation decision' | grep -q 'action=irqbalance_restart'" || true
sleep 2
$JOURNALCTL -u nodemedic -o cat --no-pager >"$W/service.log"
decisions "$W/service.log" | sed 's/^/    /'
res=$(final "$W/service.log" irqbalance_restart)
ok=denied
[ "$res" = result=done ] && ok=allowed
record service dbus_restart "$ok" "$res; $(decisions "$W/service.log" | grep 'action=irqbalance_restart ' | grep -v result=pending | sed -n 1p | grep -oE 'evidence=.*' | cut -c1-160); AVC: $(avc_since "$MARK" "$SVC_TYPE" | avc_of dbus_restart | sed -n 1p)"
settle
# Native rebalancing as the package's drop-in turns it on (ReadWritePaths=/proc/irq).
systemctl stop irqbalance
install -d /etc/systemd/system/nodemedic.service.d
install -m 0644 "$H/native-rebalance.conf" /etc/systemd/system/nodemedic.service.d/native-rebalance.conf
{
    cat "$H/nodemedic.toml"
    printf '\n[remediation.native]\nenabled = true\nrequire_hurting = false\n'
} >/etc/nodemedic/nodemedic.toml
restorecon -RF /etc/systemd/system/nodemedic.service.d /etc/nodemedic
systemctl daemon-reload
systemctl restart nodemedic
wait_for 60 "the service's /metrics" bash -c "curl -fsS --max-time 5 http://127.0.0.1:$PORT/metrics >/dev/null 2>&1" >/dev/null
spid=$(systemctl show -p MainPID --value nodemedic)
echo "  with the native drop-in: $(tr -d '\0' <"/proc/$spid/attr/current"), ReadWritePaths=$(systemctl show -p ReadWritePaths --value nodemedic), its /proc/irq: $(awk '$5 == "/proc/irq" { print $6 }' "/proc/$spid/mountinfo" | paste -sd' ' -)"
pin_to_cpu0
wait_for 90 "a native_rebalance decision" bash -c "$JOURNALCTL -u nodemedic -o cat --no-pager | grep 'remediation decision' | grep -q 'action=native_rebalance'" || true
sleep 2
$JOURNALCTL -u nodemedic -o cat --no-pager >"$W/service.log"
decisions "$W/service.log" | grep native | sed 's/^/    /'
res=$(final "$W/service.log" native_rebalance)
# EROFS is the unit's mount namespace (ProtectKernelTunables), not SELinux: said apart.
ok=denied
[ "$res" = result=done ] && ok=allowed
if [ "$ok" = denied ] && [ -z "$(avc_since "$MARK" "$SVC_TYPE" | avc_of affinity_write)" ] &&
    decisions "$W/service.log" | grep 'action=native_rebalance ' | grep -q 'Read-only file system'; then
    ok=erofs
fi
record service affinity_write "$ok" "$res, $(distinct) CPUs after; $(decisions "$W/service.log" | grep 'action=native_rebalance ' | grep -v result=pending | sed -n 1p | grep -oE 'evidence=.*' | cut -c1-160); AVC: $(avc_since "$MARK" "$SVC_TYPE" | avc_of affinity_write | sed -n 1p)"
# The script itself (initrc_t, the service's domain) writes the same files: SELinux allows it.
check service_domain_may_write_affinity bash -c "echo 0-3 >/proc/irq/${IRQS[0]}/smp_affinity_list"
show_avcs service "$SVC_TYPE"
show_avcs "systemd, for the service" init_t
systemctl stop nodemedic
rm -r /etc/systemd/system/nodemedic.service.d
systemctl daemon-reload
systemctl start irqbalance
settle

# --- 2. runcon: container_t straight from this script's domain ---------------------------------
echo "== runcon -t container_t -l s0:c1,c2 (no runtime)"
MARK=$(avc_mark)
rootfs "$W/runcon" system_u:object_r:container_file_t:s0:c1,c2 false
runcon_out=$(runcon -t container_t -l s0:c1,c2 "$W/runcon/nodemedic" --version 2>&1)
runcon_rc=$?
echo "  rc=$runcon_rc: $runcon_out"
echo "  AVC: $(avc_since "$MARK" | grep -E 'container_t' | head -n 3)"
check runcon_recorded true

# --- 3. containers under containerd ---------------------------------------------------------
echo "== containerd $(containerd --version | awk '{print $3}'), $(runc --version | head -n1)"
check containerd_active systemctl -q is-active containerd
echo "  containerd's label: $(ps -eo label,comm | awk '$2 == "containerd" { print $1 }')"

start_domain() { # d process-label file-label -> 0 once nodemedic serves in it
    local d=$1
    echo "== $d: $2 (files $3), $([ "$DPKG_MOUNT" = true ] && echo "the chart's mounts" || echo "the chart's mounts but /var/lib/dpkg")"
    MARK=$(avc_mark)
    ctr_start "nm-$d" "$2" "$3" false && return 0
    local why
    why=$(grep -o 'error during container init: .*' "$W/nm-$d.log" | head -n1 | cut -c1-240)
    echo "  $d did not start at $2: ${why:-$(tail -n 3 "$W/nm-$d.log" | paste -sd' ' -)}"
    echo "  every AVC record since it was started:"
    avc_since "$MARK" | head -n 30 | sed 's/^/    /'
    STARTS+=("$d $(echo "$2" | cut -d: -f4-) dpkg=$DPKG_MOUNT: ${why:-failed}; AVC: $(avc_since "$MARK" | grep -m1 -o 'avc: .*')")
    ctr_stop "nm-$d"
    return 1
}
run_domain() { # d process-label file-label: the chart's mounts, then without /var/lib/dpkg
    local d=$1 t level
    t=$(echo "$2" | cut -d: -f3)
    level=$(echo "$2" | cut -d: -f4-)
    DPKG_MOUNT=true
    if start_domain "$@"; then
        record "$d" chart_mounts allowed "the chart's mounts, /var/lib/dpkg included, at $level"
    else
        record "$d" chart_mounts denied "${STARTS[-1]}"
        DPKG_MOUNT=false
        start_domain "$@" || return 1
    fi
    check "${d}_label" [ "$(echo "$LABEL" | cut -d: -f3)" = "$t" ]
    wait_for 60 "three samples" bash -c "curl -fsS http://127.0.0.1:$PORT/metrics 2>/dev/null | grep -qE '^nodemedic_samples_total [3-9]'" >/dev/null
    wait_for 90 "the probes attached or given up" bash -c "curl -fsS http://127.0.0.1:$PORT/metrics 2>/dev/null | grep -q '^nodemedic_probe_up'" >/dev/null
    echo "  its log:"
    grep -iE 'warn|error|denied|fail' "$W/nm-$d.log" | head -n 20 | cut -c1-400 | sed 's/^/    /'
    outcomes "$d" "$t" "$W/nm-$d.log"
    incident "$d" "$t" "$W/nm-$d.log"
    ctr_stop "nm-$d"
    settle
    # Native rebalancing: /proc/irq mounted writable, irqbalance stopped.
    systemctl stop irqbalance
    if ctr_start "nm-$d-native" "$2" "$3" true; then
        native "$d" "$t" "$W/nm-$d-native.log"
    else
        echo "  $(grep -o 'error during container init: .*' "$W/nm-$d-native.log" | head -n1 | cut -c1-240)"
        record "$d" affinity_write denied "the container with /proc/irq writable did not start; AVC: $(avc_since "$MARK" | grep -m1 -o 'avc: .*')"
    fi
    ctr_stop "nm-$d-native"
    systemctl start irqbalance
    settle
    show_avcs "$d" "$t"
    return 0
}
STARTS=()
# An MCS pair, as the CRI plugin allocates one; if the policy refuses the pair, the same
# domain at s0 (the features' outcomes, whatever the categories).
run_domain container system_u:system_r:container_t:s0:c1,c2 system_u:object_r:container_file_t:s0:c1,c2 ||
    run_domain container system_u:system_r:container_t:s0 system_u:object_r:container_file_t:s0
run_domain spc system_u:system_r:spc_t:s0:c3,c4 system_u:object_r:container_file_t:s0:c3,c4 ||
    run_domain spc system_u:system_r:spc_t:s0 system_u:object_r:container_file_t:s0
echo "== containers that did not start"
printf '  %s\n' "${STARTS[@]}"

# --- containerd's own SELinux labelling -------------------------------------------------------
# The CRI plugin is what reads lxc_contexts and labels (ctr never does); with enable_selinux it
# must at least start on this policy.
echo "== containerd with the CRI plugin's enable_selinux = true"
mkdir -p /etc/containerd
containerd config default >/etc/containerd/config.toml 2>/dev/null
sed -i 's/enable_selinux = false/enable_selinux = true/' /etc/containerd/config.toml
restorecon -RF /etc/containerd
grep -n 'enable_selinux\|selinux_category_range' /etc/containerd/config.toml | sed 's/^/  /'
systemctl restart containerd
check containerd_enable_selinux_starts wait_for 30 "containerd active" systemctl -q is-active containerd
$JOURNALCTL -u containerd -o cat --no-pager -n 200 | grep -iE 'selinux|cri|error' | tail -n 10 | cut -c1-300 | sed 's/^/  /'
check cri_plugin_loaded bash -c "ctr plugins ls | grep -E 'io.containerd.grpc.v1 +cri' | grep -q ok"
ctr plugins ls | grep -E 'cri' | sed 's/^/  /'
echo "  all AVC records of the test's domains: $(avc_since 0 'container_t|spc_t|initrc_t' | grep -c .)"
finish
