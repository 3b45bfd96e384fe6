#!/usr/bin/env python3
"""The rules of an SELinux policy module (CIL, as a policy package installs it in the module
store) that concern nodemedic's features, for the domains given, each with the boolean it depends
on: `[if NAME] (allow ...)`. Used by tests/vm/selinux-e2e.sh on Debian's selinux-policy-default.

    bzcat .../modules/100/container/cil | selinux-cil-rules.py container_t:container_domain,...
"""

import re
import sys

# What the features touch: /proc/irq (sysctl_irq_t), /proc/interrupts and /proc/pressure
# (proc_t), sysfs, cgroups, the eBPF probes (bpf, perf_event, CAP_BPF/CAP_PERFMON) and the system
# bus (dbus-daemon's socket and its send_msg checks, systemd as init_t).
FEATURE = re.compile(
    r"sysctl_irq_t|[( ]self \((bpf|perf_event|capability2) |dbus|system_dbusd|init_t \((dbus|bpf)"
    r"|cgroup_types \(file|sysfs_t \(file|proc_t \(file"
)


def statements(text):
    """(conditions, statement) for each allow/dontaudit rule, conditions from booleanif/true/false."""
    depth = 0
    stack = []  # (depth at which the block opened, condition text)
    for line in text.splitlines():
        t = line.strip()
        m = re.match(r"\(booleanif \(?(.+?)\)?$", t)
        if m:
            stack.append((depth, m.group(1).strip("() ")))
        elif t in ("(true", "(false"):
            cond = stack[-1][1] if stack else "?"
            stack.append((depth, cond if t == "(true" else "not " + cond))
        elif t.startswith(("(allow ", "(dontaudit ")):
            conds = [c for d, c in stack if not c.startswith("_")]
            # A true/false block repeats its booleanif's condition: keep the innermost one.
            yield (conds[-1] if conds else ""), t
        depth += t.count("(") - t.count(")")
        while stack and depth <= stack[-1][0]:
            stack.pop()


def main():
    text = sys.stdin.read()
    rules = list(statements(text))
    for spec in sys.argv[1:]:
        domain, _, attrs = spec.partition(":")
        subjects = [domain] + [a for a in attrs.split(",") if a]
        print(f"-- {domain} (rules of {', '.join(subjects)})")
        seen = set()
        for cond, rule in rules:
            parts = rule.split()
            if len(parts) < 2 or parts[1] not in subjects or not FEATURE.search(rule):
                continue
            line = (f"[if {cond}] " if cond else "") + rule
            if line not in seen:
                seen.add(line)
                print("   " + line)


if __name__ == "__main__":
    main()
