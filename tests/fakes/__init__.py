"""Fake providers for tests: real HTTP servers on 127.0.0.1, scripted per request.

    from tests.fakes import FakeAnthropic, FakeOllama, anthropic_replies as A, ollama_replies as O

    with FakeOllama([O.tool_calls(("run_shell", {"command": "date"})), O.text("Done")]) as fake:
        ...  # point the worker at fake.url; assert on fake.chats / fake.requests

The real `anthropic` SDK talks to FakeAnthropic through ANTHROPIC_BASE_URL; FakeOpenAI is
any OpenAI-compatible server (a config.toml [providers.NAME] base_url).
(`tests/` is on sys.path under pytest; from the repo root use `tests.fakes`.)
"""

from . import fake_anthropic as anthropic_replies
from . import fake_ollama as ollama_replies
from . import fake_openai as openai_replies
from .fake_anthropic import FakeAnthropic
from .fake_ntfy import FakeNtfy
from .fake_ollama import FakeOllama
from .fake_openai import FakeOpenAI
from .server import FakeServer, Recorded, Reply, Script

__all__ = [
    "FakeAnthropic",
    "FakeNtfy",
    "FakeOllama",
    "FakeOpenAI",
    "FakeServer",
    "Recorded",
    "Reply",
    "Script",
    "anthropic_replies",
    "ollama_replies",
    "openai_replies",
]
