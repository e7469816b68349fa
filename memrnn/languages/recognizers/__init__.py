"""The 18 languages of FLaRe, the recognizer benchmark of Butoi, Khalighinejad, Svete, Valvoda,
Cotterell & DuSell (2025), "Training neural networks as recognizers of formal languages" (ICLR),
with its sampling protocol.

A *recognizer* reads a whole string and says whether it is in the language.  Each language here
gives membership (:meth:`RecognitionLanguage.accepts`), a sampler of positive strings in a length
window (:meth:`RecognitionLanguage.sample`, each language's own length law, below) and the
benchmark's negatives (:func:`sample_negative`).  Strings are tuples of symbol ids
``0 .. len(alphabet) - 1``; ``alphabet`` names them.

The languages (level in the Chomsky hierarchy; alphabet):

========================  =====  ===================================================================
``even_pairs``            R      {0,1}: empty, or first symbol = last symbol
``repeat_01``             R      {0,1}: (01)*
``parity``                R      {0,1}: an odd number of 1s
``cycle_navigation``      R      {>,<,=,0..4}: moves on a 5-cycle from 0, then the position reached
``modular_arithmetic``    R      {0..4,+,-,*,=}: ``d (op d)* = r``, evaluated left to right mod 5
``dyck_2_3``              R      {(,),[,]}: balanced, nesting depth at most 3
``first``                 R      {0,1}: the first symbol is 1
``majority``              DCF    {0,1}: more 1s than 0s
``stack_manipulation``    DCF    {0,1,PUSH,POP,#}: a stack (bottom first), operations ``PUSH b`` /
                                 ``POP`` (never on an empty stack), ``#``, the final stack top first
``marked_reversal``       DCF    {0,1,#}: ``w # reverse(w)``
``unmarked_reversal``     CF     {0,1}: ``w reverse(w)``
``marked_copy``           CS     {0,1,#}: ``w # w``
``missing_duplicate``     CS     {0,1,_}: ``w w`` with one 1 replaced by ``_``
``odds_first``            CS     {0,1,#}: ``w # w[0::2] w[1::2]``
``binary_addition``       CS     {0,1,+,=}: ``x + y = z``, little-endian binary, ``z = x + y``
``binary_multiplication`` CS     {0,1,×,=}: ``x × y = z``, little-endian binary, ``z = x y``
``compute_sqrt``          CS     {0,1,=}: ``x = z``, little-endian binary, ``z = floor(sqrt(x))``
``bucket_sort``           CS     {1..5,#}: ``w # sorted(w)``
========================  =====  ===================================================================

Binary numbers are written least significant bit first, any length >= 1 (zeros pad the high end).

Positive strings (the benchmark's length laws, section 4 and appendix of the paper):

* regular languages: the length uniform over the lengths in the window that have a string, then the
  string drawn from the automaton made probabilistic with uniform probabilities over each state's
  actions (its arcs, and accepting when the state is final), conditioned on that length: Butoi et
  al.'s Algorithm 1 and the public code's sampler (``sampling="pdfa"``, the default).  A string's
  probability given its length is then proportional to ``prod 1 / actions(q)`` over the states of
  its run, so for ``parity``, ``even_pairs`` and ``dyck_2_3`` the strings of a length are *not*
  equally likely (``parity`` favours the runs that stay in the even state, 2 actions against 3);
  for the other four every string of a length has the same product.  ``sampling="uniform"``
  draws the string uniformly among that length's strings instead (memrnn's law before it followed
  the code).  Both are exact (Python integers over the automaton); the public code computes the
  same law in float16 log weights, whose rounding moves each step's probability by up to about
  0.002 at length 40 and 0.02 at length 500 (``parity``);
* ``w``-based languages (reversals, copy, odds first, bucket sort): ``|w|`` uniform over what the
  window allows, symbols uniform;
* ``majority``: length ``n`` uniform in ``[max(lo, 1), hi]``, the count of 1s uniform in
  ``[n // 2 + 1, n]``, shuffled;
* ``stack_manipulation``: the initial stack size ``s`` and the number of pushes ``p`` uniform
  (``2s + 3p + 1 <= hi``), then push or pop with equal chance (pop only on a non-empty stack)
  until a push is drawn after the ``p``-th;
* arithmetic: the total length uniform, split among the operands by a Dirichlet draw (weights
  1, 1, 1 for addition; 1, 1, 2 for multiplication; 2, 1 for the square root), the numbers
  uniform among those that fit (the public code bounds multiplication's ``y`` by the float
  ``floor(max_z / x)``, which rounding can put above the exact bound memrnn uses: at most about
  one draw in ``2**53``).

``compute_sqrt``'s root (``sqrt``): the public code computes ``z`` as ``floor(sqrt(x))`` in
floating point (``math.floor(math.sqrt(x))``), which for ``x`` beyond 2**52 or so is not the
integer square root: ``x`` is rounded to 53 bits first, so ``z``'s low bits come out zero.  Its
membership test, its positives and its next-symbol sets all use that ``z``, so its language is
``x = floor(float sqrt(x))``; ``sqrt="public"`` (the default) is that language and
``sqrt="exact"`` the mathematical one (``math.isqrt``).  They agree on every ``x`` below 2**52 and
differ on about a third of the positives of lengths 0–500 (696, 729 and 742 of 2,000 exact
positives fail the public test, three seeds).  The public convention cannot read an ``x`` of 1,025 bits or more (floats end there;
the public code raises ``OverflowError``): a ``ValueError`` says so.

Negatives (:func:`sample_negative`): with probability ``perturbation_probability`` (0.5) a positive
string with ``Geometric(1/2)`` random edits (insert, replace or delete a symbol, each uniform
among those that keep the length in the window), else a uniformly random string of uniform length;
redrawn (up to 100 times) until it is not in the language.  By default, as the public code by
default, each redraw decides afresh between an edited positive and a random string and draws a new
number of edits, so the rejection favours whichever kind is more often negative.  ``strict_edits``
is the public code's ``--strict-num-edits-distribution``: the kind and the number of edits are
drawn once per negative and only the strings are redrawn, so that the negatives keep exactly the
share ``perturbation_probability`` of edited strings and the ``Geometric(1/2)`` law of edits.
:func:`sample_labelled` gives the benchmark's splits: each string positive or negative with
probability 1/2 (:data:`FLARE_SPLITS`), optionally none of them among ``excluded`` strings (the
public code's held-out test set ``test-short-held-out``: 1,000 strings of lengths 0–40, none of
them a training, short-validation or long-validation string, positives redrawn up to 100 times).

Next-symbol sets (:meth:`RecognitionLanguage.next_symbols`, the targets of the paper's
next-symbol-prediction loss): after each prefix of a string of the language, every symbol with
which the prefix can still be completed to a string of the language, and end-of-string
(:attr:`RecognitionLanguage.eos`) when the prefix is one.  The public code computes the same sets
but for ``stack_manipulation``, whose sets depend on how its sampler made the string
(``convention="public"``: ``POP`` offered on the empty initial stack, ``PUSH`` withheld after the
string's last push).

Symbol ids follow the order of ``alphabet``; the public code numbers each language's symbols by
their sorted names (e.g. ``cycle_navigation``: ``0 1 2 3 4 < = >``).  The strings are the same;
only which embedding row a symbol gets differs.  The released public code's
``cycle_navigation_dfa`` calls a function it does not define (``NameError``); memrnn's automaton
is the one its ``cycle_navigation()`` builds.
"""

from __future__ import annotations

from memrnn.languages.recognizers.arithmetic import BinaryAddition, BinaryMultiplication, ComputeSqrt
from memrnn.languages.recognizers.base import (
    SAMPLINGS,
    SQRTS,
    AutomatonRecognitionLanguage,
    RecognitionLanguage,
    Window,
    uniform_int,
)
from memrnn.languages.recognizers.benchmark import (
    FLARE_LANGUAGES,
    FLARE_SPLITS,
    flare_language,
    random_edit,
    sample_labelled,
    sample_negative,
    sample_negative_with_edits,
    sample_positive,
)
from memrnn.languages.recognizers.regular import (
    CycleNavigation,
    Dyck23,
    EvenPairs,
    First,
    ModularArithmetic,
    Parity,
    Repeat01,
)
from memrnn.languages.recognizers.words import (
    MARK,
    POP,
    PUSH,
    BucketSort,
    Majority,
    MarkedCopy,
    MarkedReversal,
    MissingDuplicate,
    OddsFirst,
    StackManipulation,
    UnmarkedReversal,
)

__all__ = [
    "FLARE_LANGUAGES",
    "FLARE_SPLITS",
    "MARK",
    "POP",
    "PUSH",
    "SAMPLINGS",
    "SQRTS",
    "AutomatonRecognitionLanguage",
    "BinaryAddition",
    "BinaryMultiplication",
    "BucketSort",
    "ComputeSqrt",
    "CycleNavigation",
    "Dyck23",
    "EvenPairs",
    "First",
    "Majority",
    "MarkedCopy",
    "MarkedReversal",
    "MissingDuplicate",
    "ModularArithmetic",
    "OddsFirst",
    "Parity",
    "RecognitionLanguage",
    "Repeat01",
    "StackManipulation",
    "UnmarkedReversal",
    "Window",
    "flare_language",
    "random_edit",
    "sample_labelled",
    "sample_negative",
    "sample_negative_with_edits",
    "sample_positive",
    "uniform_int",
]
