"""Automata -> exact weights, and weights -> automata (extraction).

Every encoder is ``encode_<automaton>`` and returns a :class:`Construction`
(:mod:`memrnn.constructions.result`: layer, vocabulary, readout, source automaton, unit names;
``ids``, ``accepts``, ``log_prob`` for generators, ``to_torch``); every reader is
``extract_<automaton>``:

=============================  ===================================  ==================
automaton                      encoder (network; task)              reader
=============================  ===================================  ==================
DFA                            ``encode_dfa`` (second-order RNN;    ``extract_dfa``
                               acceptor)
deterministic PDA              ``encode_pda`` (nnPDA; acceptor)     ``extract_pda``
deterministic PDA              ``encode_superposition_pda``         none
                               (superposition-stack RNN; acceptor)
PFSA (Minsky's construction)   ``encode_pfsa`` (Elman RNN;          ``extract_pfsa``
                               generator)
real-time counter machine      ``encode_counter_machine`` (ReLU     none;
                               RNN, LSTM, counter LSTM; acceptor)   ``counter_values``
                                                                    decodes a run
Dyck-(k,m) stacks              ``encode_dyck`` (LSTM, Simple RNN;   none
(Hewitt et al. 2020)           generator)
=============================  ===================================  ==================
"""

from memrnn.constructions.counters import (
    CounterProgram,
    counter_magnitudes,
    counter_program,
    counter_values,
    encode_counter_machine,
)
from memrnn.constructions.dfa import encode_dfa, extract_dfa
from memrnn.constructions.hewitt import (
    HewittLSTM,
    HewittSimpleRNN,
    encode_dyck,
    hewitt_init_,
)
from memrnn.constructions.hewitt_spec import (
    GAMMA,
    HewittSpec,
    StackCodes,
    construction_sizes,
    dyck_state_count,
    hewitt_constants,
    hewitt_spec,
    hewitt_units,
    ideal_states,
    stack_codes,
)
from memrnn.constructions.minsky import (
    TightnessReport,
    dyck_pfsa,
    encode_pfsa,
    extract_pfsa,
    finite_mass,
    minimize_pfsa,
    naive_dyck_generator,
    tightness,
)
from memrnn.constructions.pda import (
    IdealRun,
    PDAInitializedNNPDA,
    encode_pda,
    extract_pda,
    ideal_pda_run,
)
from memrnn.constructions.result import AcceptingState, Construction, TorchConstruction
from memrnn.constructions.stack_rnn import encode_superposition_pda

__all__ = [
    "GAMMA",
    "AcceptingState",
    "Construction",
    "CounterProgram",
    "HewittLSTM",
    "HewittSimpleRNN",
    "HewittSpec",
    "IdealRun",
    "PDAInitializedNNPDA",
    "StackCodes",
    "TightnessReport",
    "TorchConstruction",
    "construction_sizes",
    "counter_magnitudes",
    "counter_program",
    "counter_values",
    "dyck_pfsa",
    "dyck_state_count",
    "encode_counter_machine",
    "encode_dfa",
    "encode_dyck",
    "encode_pda",
    "encode_pfsa",
    "encode_superposition_pda",
    "extract_dfa",
    "extract_pda",
    "extract_pfsa",
    "finite_mass",
    "hewitt_constants",
    "hewitt_init_",
    "hewitt_spec",
    "hewitt_units",
    "ideal_pda_run",
    "ideal_states",
    "minimize_pfsa",
    "naive_dyck_generator",
    "stack_codes",
    "tightness",
]
