"""The Anthropic key lookup: the environment first, then the 0600 file, warning on loose modes."""

from __future__ import annotations

from pathlib import Path

import pytest

from worker import keys


def test_api_key_precedence_and_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    warnings: list[str] = []
    key_file = tmp_path / "anthropic-key"
    assert keys.find_api_key(key_file, warnings.append) is None
    key_file.write_text("  file-key \n")
    key_file.chmod(0o600)
    assert keys.find_api_key(key_file, warnings.append) == "file-key" and warnings == []
    key_file.chmod(0o640)
    assert keys.find_api_key(key_file, warnings.append) == "file-key"
    assert len(warnings) == 1 and "0640" in warnings[0] and "file-key" not in warnings[0]
    monkeypatch.setenv("ANTHROPIC_API_KEY", "env-key")
    assert keys.find_api_key(key_file, warnings.append) == "env-key"
