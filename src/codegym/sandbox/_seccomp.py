"""The seccomp deny-list applied to every sandboxed program.

Built on the host with libseccomp (through ``pyseccomp``) and exported as raw BPF; the
program process loads it with ``prctl`` just before running untrusted code. A deny-list
keeps ordinary programs (threads, subprocesses, compilers) working while closing the
kernel surfaces that matter for escape or for reaching outside: raw sockets, tracing,
namespaces, mounts, kernel keyrings, BPF, io_uring and module loading; and the two calls
by which a run could reach past its own processes to its pid namespace's init or the
zygote: another process's resource limits (``prlimit64`` with a pid) and ``CLONE_PARENT``.
"""

from __future__ import annotations

import errno
import functools
import socket
import tempfile

DENIED = (
    # other processes and the kernel's debugging surface
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "pidfd_getfd",
    "kcmp",
    "perf_event_open",
    "userfaultfd",
    # file systems and namespaces
    "mount",
    "umount2",
    "unshare",
    "setns",
    "chroot",
    "pivot_root",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "open_by_handle_at",
    "name_to_handle_at",
    "quotactl",
    "swapon",
    "swapoff",
    # kernel objects, modules, the machine
    "bpf",
    "keyctl",
    "add_key",
    "request_key",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "acct",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "syslog",
    "ioperm",
    "iopl",
    "modify_ldt",
    "uselib",
    "fanotify_init",
    "lookup_dcookie",
    "vhangup",
    "personality",
)

# a child of the caller's parent: from a run's first process, a child of the zygote's,
# outside what its pid namespace's init reaps (a zombie for the worker's life)
CLONE_PARENT = 0x00008000
NAMESPACE_FLAGS = (
    0x00020000,  # CLONE_NEWNS
    0x02000000,  # CLONE_NEWCGROUP
    0x04000000,  # CLONE_NEWUTS
    0x08000000,  # CLONE_NEWIPC
    0x10000000,  # CLONE_NEWUSER
    0x20000000,  # CLONE_NEWPID
    0x40000000,  # CLONE_NEWNET
)


@functools.cache
def deny_list_bpf() -> bytes:
    """The filter as raw BPF bytes (``struct sock_filter`` array)."""
    import pyseccomp as sc

    f = sc.SyscallFilter(sc.ALLOW)
    for name in DENIED:
        try:
            f.add_rule(sc.ERRNO(errno.EPERM), name)
        except (RuntimeError, ValueError, OSError):
            continue  # not a syscall on this architecture
    # only local (unix) sockets: no TCP, UDP, raw, netlink or packet sockets
    f.add_rule(sc.ERRNO(errno.EACCES), "socket", sc.Arg(0, sc.NE, socket.AF_UNIX))
    for flag in (*NAMESPACE_FLAGS, CLONE_PARENT):
        f.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    # another process's limits: a run shares its uid with its pid namespace's init, which
    # a CPU limit of 0 would kill (and every run after it would be infra); one's own
    # limits (pid 0, as setrlimit sends them) stay the program's to set
    f.add_rule(sc.ERRNO(errno.EPERM), "prlimit64", sc.Arg(0, sc.NE, 0))
    # clone3 passes its flags in memory the filter cannot read; ENOSYS makes libc fall
    # back to clone(), whose flags we can check.
    f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    with tempfile.TemporaryFile() as tmp:
        f.export_bpf(tmp)
        tmp.seek(0)
        return tmp.read()
