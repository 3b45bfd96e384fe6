# shellcheck shell=bash
# Sourced by nodemedic-guest.sh when the host put the container image's archive in the share
# (nodemedic-image.tar: the OCI image index of deploy/container/build-image.sh, both
# platforms; the arm64 run does): the image's binary for this guest's architecture runs under
# containerd (Debian's containerd, ctr and runc), mounted as the DaemonSet mounts the host
# (the host's /proc and /sys under /host, read-only; the configuration at /etc/nodemedic),
# and sees the host as the .deb's binary does: the same version, and `nodemedic check` finds
# the same IRQ groups, with the same IRQs, and the same collapsed ones.
# Run in the collapsed state the guest test sets up last (nodemedic and irqbalance stopped,
# the NIC's queue IRQs pinned to CPU 0): nothing moves between the two checks.
image_checks() {
    local arch ns=nodemedic img run_opts
    arch=$(dpkg --print-architecture)
    echo "== the container image's linux/$arch binary under containerd"
    check image_containerd_starts systemctl start containerd
    echo "containerd: $(ctr version 2>/dev/null | awk '/Version:/ { print $2 }' | paste -sd/ -), runc: $(runc --version | head -n1)"
    # The index names both platforms; ctr takes this guest's from it (as the kubelet would).
    check image_imports ctr -n "$ns" images import --platform "linux/$arch" "$H/nodemedic-image.tar"
    img=$(ctr -n "$ns" images ls -q | head -n1)
    echo "imported: $img"
    check image_index_has_both bash -c "ctr -n $ns images ls | grep -F '$img' | grep -q 'linux/amd64,linux/arm64'"
    # The configuration as the chart gives it: mounted at /etc/nodemedic, named by
    # NODEMEDIC_CONFIG, so that `check` reads what `run` would.
    run_opts=(--rm --env NODEMEDIC_CONFIG=/etc/nodemedic/nodemedic.toml
        --mount "type=bind,src=/proc,dst=/host/proc,options=rbind:ro"
        --mount "type=bind,src=/sys,dst=/host/sys,options=rbind:ro"
        --mount "type=bind,src=/etc/nodemedic,dst=/etc/nodemedic,options=rbind:ro")
    local want got
    want=$(/usr/bin/nodemedic --version)
    got=$(ctr -n "$ns" run "${run_opts[@]}" "$img" nm-version /usr/bin/nodemedic --version 2>&1)
    echo "the .deb: $want; the image: $got"
    check image_same_version [ "$got" = "$want" ]
    local rc_deb=0 rc_image=0
    /usr/bin/nodemedic check --config /etc/nodemedic/nodemedic.toml --format json >/tmp/check-deb.json || rc_deb=$?
    ctr -n "$ns" run "${run_opts[@]}" "$img" nm-check \
        /usr/bin/nodemedic check --host-root /host --format json >/tmp/check-image.json || rc_image=$?
    echo "check exited $rc_deb (the .deb) and $rc_image (the image): 1 is a collapse found"
    check image_check_exit_1 [ "$rc_deb:$rc_image" = 1:1 ]
    # Each check's groups as `name irqs collapsed` lines, sorted: the image's must equal the
    # .deb's, and name the NIC's device collapsed.
    groups() {
        python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))
for g in sorted(r["irq"]["groups"], key=lambda g: g["name"]):
    print(g["name"], ",".join(str(i) for i in sorted(g["irqs"])), g["collapsed"])' "$1"
    }
    groups /tmp/check-deb.json >/tmp/groups-deb.txt
    groups /tmp/check-image.json >/tmp/groups-image.txt
    echo "the .deb's groups:"
    sed 's/^/  /' /tmp/groups-deb.txt
    check image_check_groups_equal bash -c "[ -s /tmp/groups-deb.txt ] && cmp /tmp/groups-deb.txt /tmp/groups-image.txt"
    check image_check_finds_nic_collapsed grep -q "^$vdev [0-9,]* True\$" /tmp/groups-image.txt
    ctr -n "$ns" images rm "$img" >/dev/null 2>&1 || true
    systemctl stop containerd
}
