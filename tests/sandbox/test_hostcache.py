"""The host answers kept between processes this boot (sandbox/hostcache.py): kept under a key
of the boot and every binary they came from, only in the user's own 0700 runtime dir, never
through a link, and used by the next process instead of bwrap's trial, the overlays' trial
and libseccomp's load (which runs `ldconfig -p`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox import hostcache
from tests.supervisor.daemonkit import REPO


def cache_dir() -> Path:
    return Path(os.environ["XDG_RUNTIME_DIR"]) / "vinos-routine"


def test_an_answer_is_kept_under_its_key_in_a_private_file() -> None:
    hostcache.store("probe", {"bwrap": [1]}, {"ok": True})
    assert hostcache.load("probe", {"bwrap": [1]}) == {"ok": True}
    assert hostcache.load("probe", {"bwrap": [2]}) is None  # another binary: computed again
    entry = cache_dir() / "sandbox-probe.json"
    assert entry.stat().st_mode & 0o777 == 0o600
    assert cache_dir().stat().st_mode & 0o777 == 0o700
    assert json.loads(entry.read_text())["value"] == {"ok": True}


def test_a_changed_binary_makes_a_new_key(tmp_path: Path) -> None:
    binary = tmp_path / "bwrap"
    binary.write_bytes(b"one")
    before = hostcache.file_id(str(binary))
    hostcache.store("probe", {"bwrap": before}, {"ok": True})
    binary.write_bytes(b"other")  # an upgrade rewrites it: size, mtime (and often inode) change
    after = hostcache.file_id(str(binary))
    assert after != before
    assert hostcache.load("probe", {"bwrap": after}) is None


def test_a_reboot_forgets_every_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    hostcache.store("probe", {"k": 1}, {"ok": True})
    # A test cannot reboot the machine: another boot id stands in for one.
    monkeypatch.setattr(hostcache, "boot_id", lambda: "another-boot")
    assert hostcache.load("probe", {"k": 1}) is None


def test_no_link_is_followed_and_no_foreign_or_open_file_is_read(tmp_path: Path) -> None:
    hostcache.store("probe", {"k": 1}, {"ok": True})
    entry = cache_dir() / "sandbox-probe.json"
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(entry.read_text())
    elsewhere.chmod(0o600)
    entry.unlink()
    entry.symlink_to(elsewhere)
    assert hostcache.load("probe", {"k": 1}) is None  # a planted link is not read through
    hostcache.store("probe", {"k": 2}, {"ok": True})
    assert not entry.is_symlink()  # replaced by a file of ours, its target left alone
    assert json.loads(elsewhere.read_text())["key"] != json.loads(entry.read_text())["key"]
    entry.chmod(0o644)  # readable by others: not ours to trust
    assert hostcache.load("probe", {"k": 2}) is None


def test_nothing_is_kept_in_a_runtime_dir_others_may_enter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o755)
    runtime.chmod(0o755)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    hostcache.store("probe", {"k": 1}, {"ok": True})
    assert not (runtime / "vinos-routine").exists()
    assert hostcache.load("probe", {"k": 1}) is None
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    hostcache.store("probe", {"k": 1}, {"ok": True})  # no runtime dir: nothing kept, no error
    assert hostcache.load("probe", {"k": 1}) is None


def _python(code: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out: dict[str, object] = json.loads(done.stdout)
    return out


SECCOMP = """
import json, sys
from sandbox import seccomp
data = seccomp.bpf()
print(json.dumps({"len": len(data), "sum": sum(data), "loaded": "pyseccomp" in sys.modules}))
"""


def test_the_next_process_takes_the_compiled_filter_without_loading_libseccomp() -> None:
    first = _python(SECCOMP)
    assert first["loaded"] is True  # compiled: the binding (and its ldconfig runs) loaded
    second = _python(SECCOMP)
    assert second["loaded"] is False  # taken as kept: no binding, no ldconfig
    assert (second["len"], second["sum"]) == (first["len"], first["sum"])


PROBE = """
import json, sys
import sandbox
probe = sys.modules["sandbox.probe"]  # the module: `sandbox.probe` is also its function
from sandbox import overlay
ran = []
real_trial = probe._trial
def counted(*a):
    ran.append("trial")
    return real_trial(*a)
# Counts the trial runs and the overlays built; the probes themselves are the real ones.
probe._trial = counted
real_build = overlay.Overlays.build
def build(self):
    ran.append("overlay")
    return real_build(self)
overlay.Overlays.build = build
result = probe.probe()
reason = overlay.overlay_unavailable()
print(json.dumps({"ok": result.ok, "reason": result.reason, "trials": len(ran),
                  "overlay": reason}))
"""


def test_the_next_process_takes_the_probe_that_passed_this_boot(not_root: None) -> None:
    first = _python(PROBE)
    # The first process runs bwrap's trial and builds the overlays once; the next neither.
    assert (first["ok"], first["trials"], first["overlay"]) == (True, 2, None), first
    second = _python(PROBE)
    assert (second["ok"], second["trials"], second["overlay"]) == (True, 0, None), second
