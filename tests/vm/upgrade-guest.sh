# Sourced by nodemedic-guest.sh (its check, wait_for and http_get) before the fresh install:
# an upgrade and a downgrade that lose nothing (issue 36, point 6). The previous release's .deb
# (tests/previous-version.sh) is installed and started, its configuration (a conffile) edited;
# then this commit's .deb is installed over it, and the previous one over that, each the way
# apt installs a package, while /metrics is scraped every SCRAPE_EVERY seconds. Each way:
#   - the edit is kept, and the package's own configuration is set beside it (.dpkg-dist);
#   - the service restarted once: one new process answered the scrapes, one new invocation in
#     systemd's journal, a new main PID, no automatic restart (NRestarts);
#   - /metrics answers within two samples of the new process: its first answer counts at most
#     two samples (nodemedic_samples_total), counted by the daemon's own sampler, so that the
#     check holds the daemon to its own clock and not to how fast TCG runs the guest (a cold
#     CI's busy host once took 4.9 s from the process's start to its first answer, with a
#     2-s interval); the wall-clock time is printed beside it;
#   - no scrape failed outside the restart (from the old process's last answer to the new one's
#     first), and the old one answered until at most two intervals before the new one started
#     (stopped for the restart, not for the whole unpacking);
#   - the binary and the serving process are the package's version, and run with the edit.
# Then the package is purged: the test proper starts from a fresh install.

CONF=/etc/nodemedic/nodemedic.toml
# The edited sample_interval (the packaged one is 5 s): the unit of "within two samples".
EDIT_INTERVAL=2
SCRAPE_EVERY=0.25
# As apt runs dpkg for an unattended upgrade (unattended-upgrades; `apt-get -o
# Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold`): the configuration
# changed between the releases and was edited here, so dpkg would ask what to do, and with no
# one to answer (stdin not a terminal) it fails. --force-confold keeps the edited file and
# writes the package's as nodemedic.toml.dpkg-dist; --force-confdef takes dpkg's own choice
# where it has one (it has none here). Not --force-confnew or --force-confmiss: those would lose
# the edit or bring back a deleted file. A downgrade needs no option: dpkg allows it, saying so.
DPKG_AS_APT=(dpkg --force-confdef --force-confold -i)
URL=http://127.0.0.1:9847

deb_version() { # .deb -> the nodemedic version it carries (cargo-deb's VERSION-1)
    local v
    v=$(dpkg-deb -f "$1" Version)
    echo "${v%-*}"
}
deb_conffile() { # .deb -> its nodemedic.toml on stdout
    dpkg-deb --fsys-tarfile "$1" | tar -xO ./etc/nodemedic/nodemedic.toml
}
# The answers are read whole before grep: under pipefail, `curl | grep -q` fails when grep
# exits at its match while curl still writes (SIGPIPE, curl's exit 23).
# downgrade_edit_in_effect failed once (warm CI of 7c26531) although the journal shows the
# process running at the edited interval; this race is the one cause found that fits.
running_version() { # version -> the installed binary says it, and so does the serving process
    local body
    nodemedic --version | head -n1 | awk -v v="$1" '$1 == "nodemedic" && $2 == v { f = 1 } END { exit !f }' &&
        body=$(curl -sf -m 5 "$URL/metrics") &&
        grep -Eq "^nodemedic_build_info\{(.*,)?version=\"$1\"[,}]" <<<"$body"
}
edit_in_effect() { # the daemon samples at the edited interval (/status)
    local body
    body=$(curl -sf -m 5 "$URL/status") &&
        grep -Eq "\"sample_interval_seconds\": ?$EDIT_INTERVAL(\.0)?[,}]" <<<"$body"
}
scrape_loop() { # LOG: "<time> ok <process start> <samples>" or "<time> fail -" per scrape, until told
    local start
    while [ ! -e /run/nodemedic-scrape.stop ]; do
        # ok: a 200 within 2 s with the process series (which process answered).
        if start=$(curl -sf -m 2 "$URL/metrics" |
            awk '$1 == "process_start_time_seconds" { s = $2 } $1 == "nodemedic_samples_total" { c = $2 }
                 END { if (s == "") exit 1; print s, (c == "" ? "-" : c) }'); then
            echo "$EPOCHREALTIME ok $start"
        else
            echo "$EPOCHREALTIME fail -"
        fi >>"$1"
        sleep "$SCRAPE_EVERY"
    done
}
journal_cursor() {
    journalctl -n 1 -o export --no-pager | sed -n 's/^__CURSOR=//p'
}
new_invocations() { # CURSOR OLD_ID -> the invocations of nodemedic in the journal after
    # CURSOR other than OLD_ID (systemd's own lines carry INVOCATION_ID, the daemon's
    # _SYSTEMD_INVOCATION_ID)
    journalctl --after-cursor="$1" -u nodemedic -o export --no-pager |
        sed -n 's/^_\{0,1\}SYSTEMD_INVOCATION_ID=//p; s/^INVOCATION_ID=//p' | sort -u | grep -vxF "$2"
}
# judge_scrapes LOG INTERVAL: the scrapes' summary as shell assignments: processes (distinct
# process starts that answered), new_start (the last one's start), last_old and first_new (the
# old process's last answer, the new one's first), first_samples (the samples the new one had
# counted at its first answer), ok_old and ok_new (answers of each), fails, and fails_outside
# (failed scrapes before last_old or after first_new).
judge_scrapes() {
    awk '
        $2 == "ok" {
            if (!($3 in seen)) { seen[$3] = 1; n++; proc[n] = $3 }
            which[NR] = $3; samples[NR] = $4
        }
        { t[NR] = $1; kind[NR] = $2 }
        END {
            old = proc[1]; new = proc[n]
            for (i = 1; i <= NR; i++) {
                if (kind[i] != "ok") { fails++; continue }
                if (which[i] == old && n >= 2) { ok_old++; last_old = t[i] }
                if (which[i] == new && first_new == "") { first_new = t[i]; first_samples = samples[i] }
                if (which[i] == new) ok_new++
            }
            for (i = 1; i <= NR; i++)
                if (kind[i] != "ok" && (t[i] <= last_old || (first_new != "" && t[i] >= first_new))) outside++
            printf "processes=%d new_start=%s last_old=%s first_new=%s first_samples=%s ok_old=%d ok_new=%d fails=%d fails_outside=%d\n",
                n, new, last_old, first_new, first_samples, ok_old, ok_new, fails, outside
        }' "$1"
}
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 <= b + 0) }'; }

# upgrade_step NAME DEB: installs DEB over the running package as apt would, scraping through
# it, and checks what the header says.
upgrade_step() {
    local name=$1 deb=$2 want log=/run/nodemedic-$1.scrapes inv0 pid0 nr0 cursor spid
    local inv1 pid1 nr1 invs processes new_start last_old first_new first_samples ok_old ok_new fails fails_outside
    want=$(deb_version "$deb")
    echo "== $name to nodemedic $want ($(basename "$deb")), scraped every ${SCRAPE_EVERY}s"
    inv0=$(systemctl show -p InvocationID --value nodemedic)
    pid0=$(systemctl show -p MainPID --value nodemedic)
    nr0=$(systemctl show -p NRestarts --value nodemedic)
    cursor=$(journal_cursor)
    rm -f "$log" /run/nodemedic-scrape.stop "$CONF.dpkg-dist"
    scrape_loop "$log" &
    spid=$!
    wait_for 30 "4 answers before the $name" bash -c "[ \$(grep -c ' ok ' $log) -ge 4 ]"
    check "${name}_dpkg" env DEBIAN_FRONTEND=noninteractive "${DPKG_AS_APT[@]}" "$deb" </dev/null
    # dpkg returns once the restart is done (systemctl waits for READY=1): the new process
    # answers for three intervals more, or the test waits 30 s for it.
    wait_for 30 "answers of the new process" bash -c \
        "[ \$(awk '\$2 == \"ok\" && !(\$3 in s) { s[\$3] = 1; n++ } END { print n + 0 }' $log) -ge 2 ]"
    sleep $((3 * EDIT_INTERVAL))
    touch /run/nodemedic-scrape.stop
    wait "$spid"
    inv1=$(systemctl show -p InvocationID --value nodemedic)
    pid1=$(systemctl show -p MainPID --value nodemedic)
    nr1=$(systemctl show -p NRestarts --value nodemedic)
    invs=$(new_invocations "$cursor" "$inv0" | wc -l)
    eval "$(judge_scrapes "$log")"
    echo "systemd: invocation ${inv0:0:8}… -> ${inv1:0:8}…, $invs new in the journal; main PID $pid0 -> $pid1; NRestarts $nr0 -> $nr1"
    echo "scrapes: $(wc -l <"$log") ($fails failed, $fails_outside outside the restart); $processes processes answered;" \
        "old one last at $last_old ($ok_old answers), new one started at $new_start, first answer $first_new" \
        "after $first_samples samples ($ok_new answers)"
    check "${name}_conffile_kept" cmp "$CONF" /run/nodemedic-edited.toml
    # The package's own configuration beside it when it differs from the one it replaces.
    if deb_conffile "$deb" | cmp -s - /run/nodemedic-packaged.toml; then
        check "${name}_no_dpkg_dist" [ ! -e "$CONF.dpkg-dist" ]
    else
        check "${name}_dpkg_dist_is_the_package_s" bash -c "$(declare -f deb_conffile); deb_conffile '$deb' | cmp - '$CONF.dpkg-dist'"
    fi
    deb_conffile "$deb" >/run/nodemedic-packaged.toml
    check "${name}_restarted_once" bash -c "[ '$processes' -eq 2 ] && [ '$invs' -eq 1 ] && [ '$inv1' != '$inv0' ] && [ '$pid1' != '$pid0' ] && [ '$nr1' = '$nr0' ]"
    check "${name}_scraped_through" bash -c "[ '$ok_old' -ge 4 ] && [ '$ok_new' -ge 4 ]"
    check "${name}_answers_within_2_samples" bash -c "$(declare -f le); [ -n '$first_new' ] && [ '$first_samples' != - ] && le '$first_samples' 2"
    check "${name}_no_failed_scrape_outside_restart" bash -c "$(declare -f le); [ '$fails_outside' -eq 0 ] && [ -n '$last_old' ] && le \$(awk 'BEGIN { print $new_start - $last_old }') $((2 * EDIT_INTERVAL))"
    check "${name}_version" running_version "$want"
    check "${name}_edit_in_effect" edit_in_effect
    rm -f "$CONF.dpkg-dist"
}

echo "== upgrade and downgrade: the previous release's .deb, edited, upgraded to this one's and back"
PREV_DEB=$H/nodemedic-previous.deb
check prev_installs dpkg -i "$PREV_DEB"
deb_conffile "$PREV_DEB" >/run/nodemedic-packaged.toml
# The edit: what an administrator changes, in the packaged file.
sed -i "s/^sample_interval = .*/sample_interval = \"${EDIT_INTERVAL}s\"/" "$CONF"
echo "# Edited on this node: kept through every upgrade and downgrade." >>"$CONF"
cp "$CONF" /run/nodemedic-edited.toml
check prev_edited grep -qx "sample_interval = \"${EDIT_INTERVAL}s\"" "$CONF"
check prev_starts systemctl enable --now nodemedic
# Waited for, not asked once: on a loaded host the first scrape of the new process can take
# longer than curl's 5 s (it failed so once, with two TCG guests on 2 cores).
check prev_version wait_for 30 "the previous release serving its version" running_version "$(deb_version "$PREV_DEB")"
upgrade_step upgrade "$H/nodemedic.deb"
upgrade_step downgrade "$PREV_DEB"
# 0.1.0's package has no prerm to stop the service on removal: stopped here first, or the
# fresh install below would find the old process still serving.
systemctl disable --now nodemedic
check upgrade_test_purged dpkg --purge nodemedic
rm -f /run/nodemedic-edited.toml /run/nodemedic-packaged.toml
