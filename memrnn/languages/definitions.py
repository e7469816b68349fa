"""The languages that Delétang et al.'s (2023) transduction tasks (:mod:`memrnn.languages.chomsky`)
and Butoi et al.'s (2025) FLaRe recognizers (:mod:`memrnn.languages.recognizers`) share, defined
once; both modules build their same-named tasks on these definitions.

The two benchmarks frame a language differently: a transduction task maps an input to an output
(``EvenPairs``: a binary string to the class "first and last differ"), a recognizer accepts or
rejects a whole string (``EvenPairs``: the strings whose first and last symbols are equal).  Their
alphabets, token orders and samplers differ too (each follows its own paper and public code, and
their data must not change), so what is shared is the definition of the language: the function or
membership test below, with each module's own encoding around it.

Names that both modules define but whose languages differ (so they share nothing here), by design
of the two public codes (:data:`DIFFERENT`):
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

#: task names both modules define for different languages: name -> how they differ
DIFFERENT: dict[str, str] = {
    "modular_arithmetic": "Delétang et al.: * binds first (operator precedence), no '= r' in the string; "
    "FLaRe: evaluated left to right, the string ends with '= r'",
    "odds_first": "Delétang et al.: the public code's x[1::2] + x[::2] (0-based odd positions first); "
    "FLaRe: w[0::2] + w[1::2] (1-based odd positions first)",
    "missing_duplicate": "Delétang et al.: any symbol masked, '#' pads odd lengths, the class is the masked "
    "symbol; FLaRe: only a 1 masked, no padding",
    "compute_sqrt": "Delétang et al.: big-endian, the exact root; FLaRe: little-endian 'x = z', the public "
    "code's float root by default (sqrt='public')",
    "stack_manipulation": "Delétang et al.: POP on an empty stack does nothing; FLaRe: never drawn, and a "
    "string with one is rejected",
}
__doc__ += "".join(f"\n* ``{name}``: {why}." for name, why in DIFFERENT.items()) + "\n"

#: the moves of cycle navigation on its 5-cycle
CYCLE_LENGTH = 5


def first_equals_last(x: Sequence[int]) -> bool:
    """Even pairs: ``x`` has as many ``01`` as ``10`` pairs, that is it is empty or its first and
    last symbols are equal (Delétang et al. 2023; Butoi et al. 2025)."""
    return not x or x[0] == x[-1]


def cycle_position(moves: Iterable[int]) -> int:
    """Cycle navigation: the position reached on a 5-cycle from position 0 by ``moves`` (each
    ``-1``, ``0`` or ``+1``)."""
    return sum(moves) % CYCLE_LENGTH


def bucket_sort(w: Sequence[int]) -> tuple[int, ...]:
    """Bucket sort: the symbols of ``w`` in increasing order."""
    return tuple(sorted(w))


def binary_addition(x: int, y: int) -> int:
    """Binary addition's result ``x + y``."""
    return x + y


def binary_multiplication(x: int, y: int) -> int:
    """Binary multiplication's result ``x y``."""
    return x * y


def little_endian(x: int, width: int | None = None) -> list[int]:
    """``x >= 0`` in binary, least significant bit first (the encoding of both benchmarks' binary
    arithmetic); at least one bit (``[0]`` for 0); zero-padded to ``width``, a ``ValueError`` if
    ``x`` needs more."""
    out = [int(c) for c in reversed(bin(x)[2:])]
    if width is not None:
        if len(out) > width:
            raise ValueError(f"{x} does not fit in {width} bits")
        out += [0] * (width - len(out))
    return out


def little_endian_value(bits: Sequence[int]) -> int:
    """The number whose bits, least significant first, are ``bits`` (0 for none)."""
    return sum(b << i for i, b in enumerate(bits))
