"""What the bench scripts read of a process they started, and a port for it to listen on.
Imported by bench/memory.py, bench/daemon-cost.py and bench/k8s-pod.py (run as scripts from
any directory: Python puts bench/ on sys.path)."""

import socket
from pathlib import Path


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def status_kib(pid, key):
    """A kB field of /proc/PID/status (VmRSS, VmHWM, RssAnon, ...)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {key} for {pid}")


def task_ns(pid):
    """CPU time of every live thread of PID (schedstat, nanoseconds)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that ended between the listing and the read
    return total
