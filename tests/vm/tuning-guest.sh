# Guest side of the tuning audit's test (issue 19), sourced by nodemedic-guest.sh after the
# probe test (uses its check, wait_for, http_get and $nic, the virtio-net NIC with 4 queue
# pairs). nodemedic reads the NIC's channels and rings through ethtool netlink; the test
# changes them with ethtool(8) and checks that the gauges and the nic_channels finding follow.
# Only settings change here (no traffic), so the finding is the setting alone: info. The
# warning needs its symptom (NET_RX concentrated, softnet drops) and hysteresis: the fixture
# trees tuning-nic-channels{,-later} cover it (crates/nodemedic-detect/tests/tuning_fixtures.rs).

series() { # name label=value... -> the value of the one series with those labels, or "absent"
    local name=$1
    shift
    http_get /metrics | awk -v name="$name" -v want="$*" '
        index($0, name "{") == 1 {
            n = split(want, w, " "); ok = 1
            for (i = 1; i <= n; i++) {
                split(w[i], kv, "=")
                if (index($0, kv[1] "=\"" kv[2] "\"") == 0) ok = 0
            }
            if (ok) { v = $NF; found = 1 }
        }
        END { if (found) print v; else print "absent" }'
}
ethtool_value() { # -l|-g section field -> the number ethtool prints
    ethtool "$1" "$nic" | awk -v sec="$2" -v f="$3:" '
        index($0, sec) == 1 { p = 1; next }
        p && $1 == f { print $2; exit }'
}
is() { # expected name label=value...
    local want=$1
    shift
    [ "$(series "$@")" = "$want" ]
}

echo "== the tuning audit: $nic's channels and rings through ethtool netlink"
cat >>/etc/nodemedic/nodemedic.toml <<'TOML'

[reader]
rescan_interval = "1s"

[tuning]
# Re-read the settings at every rescan, so an ethtool change shows within seconds.
settings_interval = "1s"
TOML
systemctl restart nodemedic
check tuning_restarted wait_for 30 "nodemedic serving again" bash -c "$(declare -f http_get); http_get /readyz | grep -q ok"
max=$(ethtool_value -l "Pre-set maximums" Combined)
cur=$(ethtool_value -l "Current hardware settings" Combined)
echo "ethtool -l $nic: combined $cur of $max"
check tuning_multiqueue [ "${max:-0}" -ge 4 ]
check tuning_channels_read wait_for 30 "nodemedic_net_channels = ethtool -l ($cur of $max)" bash -c \
    "$(declare -f http_get series is); is '$max' nodemedic_net_channels interface=$nic kind=combined limit=max &&
     is '$cur' nodemedic_net_channels interface=$nic kind=combined limit=current"
check tuning_no_channel_finding is absent nodemedic_tuning_finding rule=nic_channels subject="$nic"

ethtool -L "$nic" combined 1
echo "ethtool -L $nic combined 1: now $(ethtool_value -l "Current hardware settings" Combined)"
check tuning_channels_follow wait_for 30 "nodemedic_net_channels current 1" bash -c \
    "$(declare -f http_get series is); is 1 nodemedic_net_channels interface=$nic kind=combined limit=current"
check tuning_channel_rule wait_for 30 "the nic_channels finding for $nic" bash -c \
    "$(declare -f http_get series is); is 1 nodemedic_tuning_finding rule=nic_channels subject=$nic severity=info"
http_get /status | tr ',' '\n' | grep -m1 "receives on 1 of its $max channels" ||
    echo "(no evidence line with 'receives on 1 of its $max channels' on /status)"
check tuning_channel_evidence bash -c "$(declare -f http_get); http_get /status | grep -q 'receives on 1 of its $max channels'"

rx_max=$(ethtool_value -g "Pre-set maximums" RX)
rx=$(ethtool_value -g "Current hardware settings" RX)
echo "ethtool -g $nic: rx $rx of $rx_max"
check tuning_rings_read wait_for 30 "nodemedic_net_ring_entries = ethtool -g" bash -c \
    "$(declare -f http_get series is); is '$rx_max' nodemedic_net_ring_entries interface=$nic direction=rx limit=max &&
     is '$rx' nodemedic_net_ring_entries interface=$nic direction=rx limit=current"
half=$((rx_max / 2))
if out=$(ethtool -G "$nic" rx "$half" 2>&1); then
    echo "ethtool -G $nic rx $half: now $(ethtool_value -g "Current hardware settings" RX)"
    check tuning_rings_follow wait_for 30 "nodemedic_net_ring_entries current $half" bash -c \
        "$(declare -f http_get series is); is '$half' nodemedic_net_ring_entries interface=$nic direction=rx limit=current"
    ethtool -G "$nic" rx "$rx" || true
else
    # virtio-net resizes rings only when the device offers VIRTIO_F_RING_RESET.
    echo "ethtool -G $nic rx $half refused by this virtio-net device: $out"
    check tuning_rings_unchanged is "$rx" nodemedic_net_ring_entries interface="$nic" direction=rx limit=current
fi

ethtool -L "$nic" combined "$max"
echo "ethtool -L $nic combined $max: now $(ethtool_value -l "Current hardware settings" Combined)"
check tuning_channel_rule_clears wait_for 30 "the nic_channels finding gone" bash -c \
    "$(declare -f http_get series is); is '$max' nodemedic_net_channels interface=$nic kind=combined limit=current &&
     is absent nodemedic_tuning_finding rule=nic_channels subject=$nic"
