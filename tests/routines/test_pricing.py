"""Pricing: Anthropic's published $/MTok, dated snapshot ids, config overrides, and an unknown
premium model refused with a message that says how to price it (never counted as $0)."""

from __future__ import annotations

from pathlib import Path

import pytest

from routines.pricing import UnknownModelPrice, cost, dollar_pair, is_priced, price_of
from routines.spec.config import load_config


@pytest.mark.parametrize(
    ("model", "price"),
    [
        # Anthropic's list price, $ per million tokens (input, output).
        ("claude-opus-4-6", (5.0, 25.0)),
        ("claude-opus-4-5", (5.0, 25.0)),
        ("claude-opus-4-1", (15.0, 75.0)),
        ("claude-opus-4-0", (15.0, 75.0)),
        ("claude-sonnet-4-6", (3.0, 15.0)),
        ("claude-sonnet-4-5", (3.0, 15.0)),
        ("claude-sonnet-4-0", (3.0, 15.0)),
        ("claude-haiku-4-5", (1.0, 5.0)),
        ("claude-3-5-haiku", (0.8, 4.0)),
    ],
)
def test_known_models(model: str, price: tuple[float, float]) -> None:
    assert price_of(model) == price
    assert is_priced(model)


@pytest.mark.parametrize(
    ("model", "price"),
    [
        ("claude-sonnet-4-20250514", (3.0, 15.0)),
        ("claude-opus-4-20250514", (15.0, 75.0)),
        ("claude-opus-4-1-20250805", (15.0, 75.0)),
        ("claude-sonnet-4-5-20250929", (3.0, 15.0)),
        ("claude-haiku-4-5-20251001", (1.0, 5.0)),
        ("claude-opus-4-5-20251101", (5.0, 25.0)),
        ("claude-3-5-haiku-20241022", (0.8, 4.0)),
    ],
)
def test_dated_snapshot_ids_are_priced_as_their_alias(
    model: str, price: tuple[float, float]
) -> None:
    assert price_of(model) == price


def test_cost_in_dollars() -> None:
    assert cost("claude-sonnet-4-6", 1_000_000, 1_000_000) == pytest.approx(18.0)
    assert cost("claude-sonnet-4-6", 20_000, 1_000) == pytest.approx(0.075)
    assert cost("claude-haiku-4-5-20251001", 0, 0) == 0.0


def test_overrides_win_over_the_table() -> None:
    overrides = {"claude-sonnet-4-6": (1.5, 7.5)}
    assert price_of("claude-sonnet-4-6", overrides) == (1.5, 7.5)
    assert cost("claude-sonnet-4-6", 1_000_000, 0, overrides) == pytest.approx(1.5)
    # An override of an alias covers its dated snapshots too; lists (IPC's form) are fine.
    assert price_of("claude-opus-4-1-20250805", {"claude-opus-4-1": [10, 50]}) == (10.0, 50.0)
    # An override for one dated snapshot does not change the alias.
    assert price_of("claude-opus-4-1", {"claude-opus-4-1-20250805": (1, 2)}) == (15.0, 75.0)


def test_a_model_the_table_does_not_know_is_priced_from_config(vinos_env: Path) -> None:
    cfg = vinos_env / "routines" / "config.toml"
    cfg.write_text('[pricing."claude-next-5"]\ninput = 2\noutput = 10\n')
    pricing = load_config(cfg).pricing
    assert price_of("claude-next-5", pricing) == (2.0, 10.0)
    assert price_of("claude-next-5-20270101", pricing) == (2.0, 10.0)
    assert cost("claude-next-5", 500_000, 100_000, pricing) == pytest.approx(2.0)


@pytest.mark.parametrize("model", ["claude-next-5", "claude-sonnet-4-6-2026", "gpt-4o", ""])
def test_unknown_model_is_refused_never_zero(model: str) -> None:
    assert not is_priced(model)
    with pytest.raises(UnknownModelPrice) as info:
        cost(model, 1000, 1000)
    assert info.value.model == model
    assert str(info.value) == (
        f'no price known for model "{model}": add it to config.toml, e.g.\n'
        f'  [pricing."{model}"]\n'
        "  input = 3.0    # $ per million input tokens\n"
        "  output = 15.0  # $ per million output tokens"
    )


def test_the_refusal_message_is_a_config_that_works(vinos_env: Path) -> None:
    # Paste the example from the message into config.toml: the model is then priced.
    with pytest.raises(UnknownModelPrice) as info:
        price_of("claude-next-5")
    example = str(info.value).split("\n", 1)[1]
    cfg = vinos_env / "routines" / "config.toml"
    cfg.write_text(example + "\n")
    assert price_of("claude-next-5", load_config(cfg).pricing) == (3.0, 15.0)


@pytest.mark.parametrize(
    ("a", "b", "shown"),
    [
        (0.014, 0.01, ("$0.014", "$0.010")),
        (0.0140, 0.0139, ("$0.0140", "$0.0139")),
        (0.5, 0.4, ("$0.50", "$0.40")),
        (0.5, 0.5, ("$0.50", "$0.50")),
        (1234.5, 1000.0, ("$1,234.50", "$1,000.00")),
    ],
)
def test_dollar_pair_shows_enough_digits_to_tell_them_apart(
    a: float, b: float, shown: tuple[str, str]
) -> None:
    assert dollar_pair(a, b) == shown
