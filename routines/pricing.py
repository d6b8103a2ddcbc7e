"""What a model call costs, in dollars.

Prices are $ per million tokens (input, output), from Anthropic's published list. Ollama
models, and providers declared `local = true`, cost $0 (electricity only). A paid provider
declared in config.toml is priced from its own `prices` only. An Anthropic model this table
does not know is priced from config.toml's [pricing] or refused: counting it as $0 would let a
routine spend without limit.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["PRICES", "UnknownModelPrice", "cost", "dollar_pair", "is_priced", "price_of"]

# $ per MTok: (input, output). Dated snapshots (claude-opus-4-1-20250805) match their alias.
PRICES: dict[str, tuple[float, float]] = {
    "claude-opus-4-7": (5.0, 25.0),
    "claude-opus-4-6": (5.0, 25.0),
    "claude-opus-4-5": (5.0, 25.0),
    "claude-opus-4-1": (15.0, 75.0),
    "claude-opus-4-0": (15.0, 75.0),
    "claude-opus-4": (15.0, 75.0),
    "claude-sonnet-4-6": (3.0, 15.0),
    "claude-sonnet-4-5": (3.0, 15.0),
    "claude-sonnet-4-0": (3.0, 15.0),
    "claude-sonnet-4": (3.0, 15.0),
    "claude-haiku-4-5": (1.0, 5.0),
    "claude-3-5-haiku": (0.8, 4.0),
    "claude-3-haiku": (0.25, 1.25),
}

_DATED = re.compile(r"-\d{8}$")


class UnknownModelPrice(LookupError):
    """A premium model with no known price: refused rather than counted as free."""

    def __init__(self, model: str, *, provider: str | None = None) -> None:
        self.model = model
        if provider is not None:  # a provider declared in config.toml prices its own models
            super().__init__(
                f'no price known for model "{model}" on provider "{provider}": add it to '
                f"config.toml, e.g.\n  [providers.{provider}]\n"
                f'  prices = {{ "{model}" = {{ input = 3.0, output = 15.0 }} }}   '
                "# $ per million tokens"
            )
            return
        super().__init__(
            f'no price known for model "{model}": add it to config.toml, e.g.\n'
            f'  [pricing."{model}"]\n  input = 3.0    # $ per million input tokens\n'
            "  output = 15.0  # $ per million output tokens"
        )


def price_of(
    model: str,
    overrides: Mapping[str, tuple[float, float] | list[float]] | None = None,
    *,
    builtin: bool = True,
    provider: str | None = None,
) -> tuple[float, float]:
    """($/MTok in, $/MTok out) for an Anthropic model; config overrides win.

    `builtin=False` (a provider declared in config.toml, whose `prices` are `overrides`):
    only those prices count. Anthropic's list says nothing of what OpenRouter or OpenAI
    charge, and a model name they share must not borrow its price."""
    for table in (overrides or {}, PRICES) if builtin else (overrides or {},):
        for key in (model, _DATED.sub("", model)):
            if key in table:
                pin, pout = table[key]
                return float(pin), float(pout)
    raise UnknownModelPrice(model, provider=provider)


def is_priced(
    model: str,
    overrides: Mapping[str, tuple[float, float] | list[float]] | None = None,
    *,
    builtin: bool = True,
) -> bool:
    try:
        price_of(model, overrides, builtin=builtin)
    except UnknownModelPrice:
        return False
    return True


def cost(
    model: str,
    input_tokens: int,
    output_tokens: int,
    overrides: Mapping[str, tuple[float, float] | list[float]] | None = None,
    *,
    builtin: bool = True,
    provider: str | None = None,
) -> float:
    """Dollars for one premium call; raises UnknownModelPrice for an unpriced model."""
    pin, pout = price_of(model, overrides, builtin=builtin, provider=provider)
    return (input_tokens * pin + output_tokens * pout) / 1_000_000


def dollar_pair(a: float, b: float) -> tuple[str, str]:
    """Two amounts with as many decimals as it takes to tell them apart (2 to 6):
    ("$0.50", "$0.40"), ("$0.014", "$0.010"), never ("$0.01", "$0.01") for different ones."""
    for digits in range(2, 7):
        left, right = f"${a:,.{digits}f}", f"${b:,.{digits}f}"
        if left != right:
            return left, right
    return f"${a:,.2f}", f"${b:,.2f}"  # equal to the micro-dollar: say so plainly
