"""Red team, credential names below a declared folder: the policy masks every file named
like a credential (`*token*`, `credentials*`, `*.pem`) that it finds by listing the folder,
and skipped a folder it could not list, on the grounds that the sandbox (same uid) cannot
list it either. But a folder with x and no r (mode 0311) is entered by name: the model
guesses `token.txt` and reads it. What cannot be listed is now masked whole."""

from __future__ import annotations

from tests.sandbox.sandbox_testkit import Box


def test_a_token_in_a_folder_that_cannot_be_listed_stays_hidden(box: Box) -> None:
    notes = box.home / "notes"
    box_dir = notes / "dropbox"
    box_dir.mkdir(parents=True)
    (box_dir / "token.txt").write_text(f"ghp_{box.marker}\n")
    (notes / "plain.md").write_text("hello\n")
    box_dir.chmod(0o311)
    try:
        r = box.run(
            f"cat {notes}/plain.md; cat {box_dir}/token.txt; ls {box_dir}; echo end",
            declared=("~/notes",),
        )
        assert box.marker not in r.stdout + r.stderr
        assert r.stdout.startswith("hello\n") and r.stdout.endswith("end\n"), r.stdout
        # Control: the host can read it by name, as the sandbox could on main.
        assert box.marker in (box_dir / "token.txt").read_text()
    finally:
        box_dir.chmod(0o700)
