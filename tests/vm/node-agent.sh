#!/usr/bin/env bash
# The guest's side of tests/vm/run.sh --node (copied to DIR/test.sh, run as root by the
# image's runner from /mnt/host): brings the virtio-net NIC up with the address in
# DIR/net.env and the host's address as the default gateway, says so in DIR/agent-ready
# (the guest's uptime), then runs every DIR/cmd/ID.sh that run.sh --exec drops there, each
# in the background (cwd /mnt/host), writing DIR/cmd/ID.out (stdout and stderr) and then
# DIR/cmd/ID.rc. It ends when DIR/cmd/stop appears (the runner then powers off), but
# run.sh --stop does not wait for that: the VM runs on a snapshot, nothing is kept.
# The share is 9p with cache=none: every poll sees the host's files as they are.
set -u
H=${HOST_DIR:-/mnt/host}
# shellcheck disable=SC1091
. "$H/net.env"
# The runner may start before udev has loaded virtio_net (Debian 13's boot, on a loaded
# host, ran it 112 s into the boot with no NIC yet): load it, and wait for the NIC.
modprobe virtio_net 2>/dev/null || true
nic=
for _ in $(seq 1 600); do
    for d in /sys/class/net/*; do
        if [ "$(basename "$(readlink -f "$d/device/driver" 2>/dev/null)")" = virtio_net ]; then
            nic=$(basename "$d")
            break 2
        fi
    done
    sleep 0.1
done
if [ -z "$nic" ]; then
    echo "no virtio-net NIC within 60 s: $(ls /sys/class/net)" >&2
    exit 1
fi
ip link set lo up
ip addr add "$GUEST_ADDR" dev "$nic"
ip link set "$nic" up
ip route add default via "$GATEWAY" dev "$nic"
echo "$nic" >"$H/nic"
echo $$ >"$H/agent.pid"
read -r up _ </proc/uptime
echo "$up" >"$H/agent-ready.tmp"
mv "$H/agent-ready.tmp" "$H/agent-ready"
mkdir -p "$H/cmd"
while [ ! -e "$H/cmd/stop" ]; do
    for f in "$H"/cmd/*.sh; do
        [ -e "$f" ] || continue
        b=${f%.sh}
        mv "$f" "$b.run" 2>/dev/null || continue
        (
            cd "$H" || exit
            bash "$b.run" >"$b.out" 2>&1 </dev/null
            echo $? >"$b.rc.tmp"
            mv "$b.rc.tmp" "$b.rc"
        ) &
    done
    sleep 0.1
done
wait
