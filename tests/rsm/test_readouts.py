"""The reservoir stack machine's readouts and the echo state network (Paaßen et al. 2021, section 3.2)."""

import io
import pickle
import sys

import pytest
import torch

from memrnn.layers.reservoir import Reservoir
from memrnn.ops.ridge import ridge_reference
from memrnn.rsm.esn import EchoStateNetwork
from memrnn.rsm.experiment import _MovedModules
from memrnn.rsm.readouts import LogisticClassifier, RidgeClassifier, SVMClassifier


def test_readout_classifiers(gen):
    x = torch.randn(300, 4, generator=gen, dtype=torch.float64)
    y = (x[:, 0] > 0).long() + 2 * (x[:, 1] > 0.5).long()
    for clf in (RidgeClassifier(1e-3, features=512, standardize=True), LogisticClassifier(1e-4)):
        pred = clf.fit(x, y).predict(x)
        assert pred.dtype == torch.long and set(pred.tolist()) <= {0, 1, 2, 3}
        assert (pred == y).float().mean() > 0.93, type(clf).__name__
    const = RidgeClassifier().fit(x, torch.full((300,), 4))
    assert torch.equal(const.predict(x[:5]), torch.full((5,), 4))
    # state_dict round trip (buffers take the fitted shapes)
    clf = RidgeClassifier(1e-3, features=64, standardize=True).fit(x, y)
    fresh = RidgeClassifier(1e-3, features=64, standardize=True)
    fresh.load_state_dict(clf.state_dict())
    assert torch.equal(fresh.predict(x), clf.predict(x))
    with pytest.raises(RuntimeError, match="not fitted"):
        RidgeClassifier().predict(x)
    with pytest.raises(ValueError, match="integer tensor"):
        RidgeClassifier().fit(x, y.double())


def test_svm_classifier(gen):
    pytest.importorskip("sklearn")
    x = torch.randn(200, 3, generator=gen, dtype=torch.float64)
    y = (x.norm(dim=1) > 1.5).long()  # not linearly separable: the RBF kernel is needed
    assert (SVMClassifier(C=10).fit(x, y).predict(x) == y).float().mean() > 0.95
    assert torch.equal(
        SVMClassifier().fit(x, torch.ones(200, dtype=torch.long)).predict(x[:3]),
        torch.ones(3, dtype=torch.long),
    )


def test_esn_readout_is_the_closed_form_on_the_states(gen):
    res = Reservoir(3, 20, "rand", seed=1, dtype=torch.float64)
    x = torch.randn(4, 15, 3, generator=gen, dtype=torch.float64)
    y = torch.randn(4, 15, 2, generator=gen, dtype=torch.float64)
    mask = torch.arange(15)[None] < torch.tensor([15, 9, 4, 12])[:, None]
    esn = EchoStateNetwork(res, 2, alpha=0.1, washout=2)
    esn.partial_fit(x[:2], y[:2], mask[:2])  # two batches
    esn.partial_fit(x[2:], y[2:], mask[2:])
    esn.solve()
    h, _ = res(x, mask=mask)
    keep = mask.clone()
    keep[:, :2] = False
    w, b = ridge_reference(h[keep], y[keep], 0.1)
    torch.testing.assert_close(esn.weight, w, atol=1e-9, rtol=1e-9)
    torch.testing.assert_close(esn.bias, b, atol=1e-9, rtol=1e-9)
    out = esn(x, mask)
    torch.testing.assert_close(out[mask], h[mask] @ w.T + b)
    assert (out[~mask] == 0).all()
    with pytest.raises(ValueError, match="targets must be"):
        esn.partial_fit(x, y[..., :1])


def test_classifiers_pickled_under_their_old_module_still_load(gen, monkeypatch):
    """Checkpoints written before the reservoir stack machine moved to ``memrnn.rsm`` pickle their
    classifiers as ``memrnn.layers.readouts.*``; ``RSMModule`` loads them under the new module."""
    import memrnn.rsm.readouts as readouts

    x = torch.randn(50, 3, generator=gen, dtype=torch.float64)
    clf = RidgeClassifier(1e-3).fit(x, (x[:, 0] > 0).long())
    monkeypatch.setitem(sys.modules, "memrnn.layers.readouts", readouts)
    monkeypatch.setattr(RidgeClassifier, "__module__", "memrnn.layers.readouts")
    blob = pickle.dumps(clf)
    monkeypatch.undo()
    assert b"memrnn.layers.readouts" in blob and "memrnn.layers.readouts" not in sys.modules
    with pytest.raises(ModuleNotFoundError):
        pickle.loads(blob)
    loaded = _MovedModules(io.BytesIO(blob)).load()
    assert type(loaded) is RidgeClassifier
    assert torch.equal(loaded.predict(x), clf.predict(x))
