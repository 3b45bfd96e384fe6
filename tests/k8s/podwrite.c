// podwrite PID [PREFIX]: what a process of PID's container could write of the host.
//
// Enters PID's mount namespace with PID's uid, gids and capabilities (bounding, permitted,
// effective, inheritable sets, read from /proc/PID/status) -- what `nsenter -m -t PID` with
// `setpriv` would do, but the container's image has no shell or setpriv to exec into -- and
// opens for writing `cgroup.procs` at the top of every cgroup mount under PREFIX (default
// /host) that PID's mountinfo lists. Opening for writing is the attempt: nothing is written.
// Every other mount under PREFIX (but autofs, which an access would trigger) is asked whether
// its top directory is writable (faccessat W_OK with the effective ids: EROFS on a read-only
// mount); a proc mount, whose top is r-x for all, by opening sys/kernel/core_pattern for
// writing. One line per mount: "MOUNTPOINT FSTYPE writable" or "MOUNTPOINT FSTYPE refused
// ERRNO-TEXT". Exit 0 when every attempt was refused, 1 when one succeeded, 2 on an error of
// its own or when nothing of the cgroup tree was tried: no cgroup mount under PREFIX and no
// mount at PREFIX/sys/fs/cgroup (a v1 node's tmpfs of mount points, bound without them).
// Static (tests/k8s and the guest node run the same binary): cc -O2 -static -o podwrite podwrite.c
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

static void die(const char *what) {
    fprintf(stderr, "podwrite: %s: %s\n", what, strerror(errno));
    exit(2);
}

// One line for an attempt on WHAT (a mount point, or the file tried in it): 1 when it
// succeeded, else the reason from errno, as the failed call left it.
static int report(const char *what, const char *fstype, int ok) {
    if (ok) {
        printf("%s %s writable\n", what, fstype);
        return 1;
    }
    printf("%s %s refused %s\n", what, fstype, strerror(errno));
    return 0;
}

// Whether FILE opens for writing (nothing is written); errno says why not.
static int opens_for_writing(const char *file) {
    int fd = open(file, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    close(fd);
    return 1;
}

static uint64_t cap_field(const char *status, const char *key) {
    const char *p = strstr(status, key);
    if (!p) {
        fprintf(stderr, "podwrite: no %s in status\n", key);
        exit(2);
    }
    return strtoull(p + strlen(key), NULL, 16);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: podwrite PID [PREFIX]\n");
        return 2;
    }
    const char *pid = argv[1];
    const char *prefix = argc > 2 ? argv[2] : "/host";
    size_t plen = strlen(prefix);
    while (plen > 0 && prefix[plen - 1] == '/') plen--; // "/" matches every mount
    char path[256];

    // The process's status (ids, capabilities) and mount table, read before entering.
    static char status[16384];
    snprintf(path, sizeof path, "/proc/%s/status", pid);
    FILE *f = fopen(path, "r");
    if (!f) die(path);
    size_t n = fread(status, 1, sizeof status - 1, f);
    status[n] = 0;
    fclose(f);
    unsigned uid = 0, gid = 0;
    const char *u = strstr(status, "\nUid:");
    const char *g = strstr(status, "\nGid:");
    if (!u || !g || sscanf(u, "\nUid:\t%*u\t%u", &uid) != 1 || sscanf(g, "\nGid:\t%*u\t%u", &gid) != 1) {
        fprintf(stderr, "podwrite: no Uid/Gid in %s\n", path);
        return 2;
    }
    gid_t groups[64];
    int ngroups = 0;
    const char *gl = strstr(status, "\nGroups:");
    if (gl) {
        gl += strlen("\nGroups:");
        while (*gl && *gl != '\n' && ngroups < 64) {
            char *end;
            unsigned long v = strtoul(gl, &end, 10);
            if (end == gl) {
                gl++;
                continue;
            }
            groups[ngroups++] = (gid_t)v;
            gl = end;
        }
    }
    uint64_t eff = cap_field(status, "CapEff:\t"), prm = cap_field(status, "CapPrm:\t");
    uint64_t inh = cap_field(status, "CapInh:\t"), bnd = cap_field(status, "CapBnd:\t");

    static char mountinfo[1 << 20];
    snprintf(path, sizeof path, "/proc/%s/mountinfo", pid);
    f = fopen(path, "r");
    if (!f) die(path);
    n = fread(mountinfo, 1, sizeof mountinfo - 1, f);
    mountinfo[n] = 0;
    fclose(f);

    snprintf(path, sizeof path, "/proc/%s/ns/mnt", pid);
    int ns = open(path, O_RDONLY | O_CLOEXEC);
    if (ns < 0) die(path);
    if (setns(ns, CLONE_NEWNS) != 0) die("setns");
    if (chdir("/") != 0) die("chdir /");

    // Become the container's process: groups, gid, uid (capabilities kept across a uid change
    // to non-zero), then its bounding set and its capabilities.
    if (setgroups((size_t)ngroups, groups) != 0) die("setgroups");
    if (setresgid(gid, gid, gid) != 0) die("setresgid");
    if (prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0) die("PR_SET_KEEPCAPS");
    if (setresuid(uid, uid, uid) != 0) die("setresuid");
    for (int c = 0; c <= 63; c++) {
        if (!(bnd & (1ULL << c)) && prctl(PR_CAPBSET_READ, c, 0, 0, 0) == 1 &&
            prctl(PR_CAPBSET_DROP, c, 0, 0, 0) != 0)
            die("PR_CAPBSET_DROP");
    }
    struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2] = {
        {(uint32_t)eff, (uint32_t)prm, (uint32_t)inh},
        {(uint32_t)(eff >> 32), (uint32_t)(prm >> 32), (uint32_t)(inh >> 32)},
    };
    if (syscall(SYS_capset, &hdr, data) != 0) die("capset");
    printf("# as uid %u gid %u, CapEff %016llx, CapBnd %016llx\n", uid, gid,
           (unsigned long long)eff, (unsigned long long)bnd);

    char tree[600];  // the cgroup tree's own mount point
    snprintf(tree, sizeof tree, "%s/sys/fs/cgroup", prefix);
    int writable = 0, seen = 0;
    for (char *line = strtok(mountinfo, "\n"); line; line = strtok(NULL, "\n")) {
        // id parent major:minor root mountpoint options [optional...] - fstype source super
        char mp[512], fstype[64];
        if (sscanf(line, "%*s %*s %*s %*s %511s", mp) != 1) continue;
        const char *sep = strstr(line, " - ");
        if (!sep || sscanf(sep + 3, "%63s", fstype) != 1) continue;
        if (strncmp(mp, prefix, plen) != 0 || (mp[plen] != '/' && mp[plen] != 0)) continue;
        int cgroup = strcmp(fstype, "cgroup") == 0 || strcmp(fstype, "cgroup2") == 0;
        if (!cgroup && strcmp(fstype, "autofs") == 0) continue;
        char file[600];
        if (strcmp(mp, tree) == 0) seen++;
        if (cgroup) {
            seen++;
            snprintf(file, sizeof file, "%s/cgroup.procs", mp);
            writable += report(mp, fstype, opens_for_writing(file));
        } else if (strcmp(fstype, "proc") == 0) {
            // /proc's top directory is r-x for all: open a sysctl for writing instead
            // (core_pattern: a writable one runs a program of the pod's as root on the
            // host), refused by a read-only mount with EROFS.
            snprintf(file, sizeof file, "%s/sys/kernel/core_pattern", mp);
            writable += report(file, fstype, opens_for_writing(file));
        } else {
            writable += report(mp, fstype, faccessat(AT_FDCWD, mp, W_OK, AT_EACCESS) == 0);
        }
    }
    if (!seen) {
        fprintf(stderr, "podwrite: no cgroup mount under %s and none at %s/sys/fs/cgroup in the container\n",
                prefix, prefix);
        return 2;
    }
    return writable ? 1 : 0;
}
