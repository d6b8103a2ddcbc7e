"""Red team, the quota walk: it held a descriptor open for every folder still to visit, so a
folder with more subfolders than the worker may open files (1024 here; node_modules often
has more) ran it out of descriptors. The folders past that were neither counted during the
call (the poll under-counted: files in them could pass the quota) nor after it, and every
later call failed with "folder(s) that cannot be opened", which was false. The walk now
holds one descriptor per level of depth."""

from __future__ import annotations

import resource

from sandbox import Limits
from tests.sandbox.sandbox_testkit import Box


def test_more_sibling_folders_than_open_files_are_all_counted(box: Box) -> None:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    many = soft + 200
    make = f"mkdir -p {box.workspace}/w && cd {box.workspace}/w && seq 1 {many} | xargs mkdir"
    r = box.run(make + " && echo made", limits=Limits(workspace_mb=16), timeout=120)
    assert r.stdout == "made\n", r.stdout + r.stderr
    assert r.error is None, r.error
    # 20 MB in the last folders, over the 16 MB quota: found, whichever folders the walk
    # reaches last.
    fill = (
        f"cd {box.workspace}/w && for i in $(seq {many - 19} {many}); do "
        "head -c 1M /dev/urandom > $i/f; done"
    )
    r = box.run(fill, limits=Limits(workspace_mb=16), timeout=120)
    assert r.error is not None and "over max_workspace_mb = 16" in r.error, r.error
    assert "cannot be opened" not in r.error
