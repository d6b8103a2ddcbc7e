"""The host probe, its diagnoses, the seccomp filter's make-up, and what the package exports."""

from __future__ import annotations

import errno

import pytest

import sandbox
from sandbox import probe
from sandbox.probe import diagnose
from sandbox.seccomp import RULES, bpf


@pytest.mark.parametrize(
    ("stderr", "reason", "fix"),
    [
        (  # Debian before 11 / kernels with the unprivileged_userns_clone switch off
            "bwrap: No permissions to creating new namespace, likely because the kernel does "
            "not allow non-privileged user namespaces. On e.g. debian this can be enabled with "
            "'sysctl kernel.unprivileged_userns_clone=1'.",
            "cannot create user namespaces",
            "user namespaces",
        ),
        (  # Ubuntu 24.04's AppArmor restriction
            "bwrap: setting up uid map: Permission denied",
            "cannot create user namespaces",
            "",
        ),
        (  # a container without userns (or our own sandbox)
            "bwrap: Creating new namespace failed: Operation not permitted",
            "cannot create user namespaces",
            "",
        ),
        (  # a container whose /proc cannot be mounted again
            "bwrap: Can't mount proc on /newroot/proc: Operation not permitted",
            "cannot mount a fresh /proc",
            "never used instead",
        ),
        ("bwrap: Unknown option --disable-userns", "too old", "bubblewrap >= 0.8.0"),
        ("", "failed a trial run (no message)", ""),
    ],
)
def test_diagnose_names_the_cause_and_the_fix(stderr: str, reason: str, fix: str) -> None:
    p = diagnose(stderr)
    assert not p.ok
    assert reason in p.reason
    assert fix in p.fix and p.fix


def test_this_machine_can_sandbox_and_the_answer_is_cached(not_root: None) -> None:
    first = probe()
    assert first.ok, f"{first.reason}; fix: {first.fix}"
    assert probe() is first


def test_the_filter_compiles_to_bpf_for_this_machine() -> None:
    program = bpf()
    assert program and len(program) % 8 == 0  # struct sock_filter is 8 bytes
    assert bpf() is program


def test_the_denylist_covers_design_md() -> None:
    denied = {r.syscall: r.errnum for r in RULES}
    for name in (
        "keyctl",
        "add_key",
        "request_key",
        "mount",
        "umount2",
        "pivot_root",
        "chroot",
        "unshare",
        "setns",
        "clone",
        "perf_event_open",
        "ptrace",
        "process_vm_readv",
        "process_vm_writev",
        "ioctl",
        "open_tree",
        "fsopen",
        "io_uring_setup",
        "io_uring_enter",
        "io_uring_register",
        "userfaultfd",
        "bpf",
        "kcmp",
        "name_to_handle_at",
        "open_by_handle_at",
    ):
        assert name in denied, name
    assert denied["clone3"] == errno.ENOSYS
    ioctl = [r.arg for r in RULES if r.syscall == "ioctl"]
    assert ioctl == [(1, "masked_eq", 0x5412, 0xFFFFFFFF), (1, "masked_eq", 0x541C, 0xFFFFFFFF)]


def test_the_package_exports() -> None:
    assert sorted(sandbox.__all__) == sorted(
        [
            "ROOT_REFUSAL",
            "STDERR_CAP",
            "STDOUT_CAP",
            "Host",
            "Limits",
            "PathKind",
            "Probe",
            "ReadBudget",
            "SeccompUnavailable",
            "ShellPolicy",
            "ShellResult",
            "UnsafeValue",
            "build_argv",
            "check_read",
            "check_shell",
            "make_overlays_in_process",
            "open_dir_nofollow",
            "probe",
            "read_files",
            "refuse_if_root",
            "routine_policy",
            "run_shell",
        ]
    )
    for name in sandbox.__all__:
        assert getattr(sandbox, name) is not None


def test_the_sandbox_refuses_root_in_the_products_words() -> None:
    """One message for the product: the sandbox may import nothing of ours and the supervisor
    may not import the sandbox, so the text stands in both packages and this pins them equal."""
    from routines.product import ROOT_REFUSAL

    assert sandbox.ROOT_REFUSAL == ROOT_REFUSAL
