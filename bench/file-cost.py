#!/usr/bin/env python3
"""What the kernel takes to generate each file a sample reads: CPU per whole read, file by file.

    bench/file-cost.py [--reads N] PATH [PATH ...]
    bench/file-cost.py [--reads N] --pid PID

Each file is opened once and read whole from offset 0 N times (default 3000) with `preadv`
into a 1 MiB buffer, as the daemon's read layer reads a kept-open file; the figure is this
process's CPU time (user + system) per read, so it includes the system call itself. With
`--pid`, the files are the regular and kernel files the running daemon PID holds open (its
kept-open fds: what it reads each sample, or at a rescan). Also printed: what the first read
returned and the whole file's size; a first read shorter than the file is a seq_file that
hands out a buffer at a time.
"""

import argparse
import os
import sys
import time


def held_files(pid):
    out = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("/") and not target.startswith("/dev/"):
            out.add(target.replace(f"/proc/{pid}/", "/proc/self/"))
    return sorted(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reads", type=int, default=3000)
    ap.add_argument("--pid", type=int)
    ap.add_argument("paths", nargs="*")
    a = ap.parse_args()
    paths = a.paths + (held_files(a.pid) if a.pid else [])
    if not paths:
        ap.error("no files: give PATHs or --pid")
    buf = bytearray(1 << 20)
    rows = []
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as e:
            print(f"{path}: {e}", file=sys.stderr)
            continue
        try:
            first = os.preadv(fd, [buf], 0)
        except OSError:  # a directory (the fd count's /proc/self/fd), a socket
            os.close(fd)
            continue
        whole = first
        while True:
            n = os.preadv(fd, [buf], whole)
            if n == 0:
                break
            whole += n
        t0 = time.process_time()
        for _ in range(a.reads):
            off = 0
            while True:
                n = os.preadv(fd, [buf], off)
                off += n
                if n == 0 or off == whole:
                    break
        us = (time.process_time() - t0) / a.reads * 1e6
        os.close(fd)
        rows.append((us, path, first, whole))
    print("| µs per whole read | first read, bytes | whole file, bytes | file |")
    print("|---|---|---|---|")
    for us, path, first, whole in sorted(rows, reverse=True):
        print(f"| {us:.1f} | {first} | {whole} | `{path}` |")
    print(f"| **{sum(r[0] for r in rows):.1f}** | | | all {len(rows)} |")


if __name__ == "__main__":
    main()
