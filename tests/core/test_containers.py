"""nn.Sequential, ModuleList, ModuleDict and ParameterDict edited as in PyTorch: replacing an
entry keeps its place, deleting renumbers, insert shifts, pop returns what it removed; the
same edits on torch.nn's containers give the same keys and order."""

from __future__ import annotations

import pytest

import flowserve as flow
import flowserve.nn as nn

torch = pytest.importorskip("torch")


def _names(container) -> list:
    return [(key, type(m).__name__) for key, m in container._modules.items()]


def _edits(lib, cls):
    c = cls([lib.ReLU(), lib.Tanh(), lib.Sigmoid()]) if cls is getattr(lib, "ModuleList") else cls(
        lib.ReLU(), lib.Tanh(), lib.Sigmoid())
    c[0] = lib.GELU()
    c[-1] = lib.ELU()
    c.insert(1, lib.Softplus())
    c.insert(-1 if cls is getattr(lib, "Sequential") else 3, lib.Identity())  # torch's ModuleList: no negative
    c.append(lib.SiLU())
    popped = c.pop(2)
    del c[0]
    del c[1:3]
    c.extend([lib.Mish()])
    return c, type(popped).__name__


@pytest.mark.parametrize("name", ["Sequential", "ModuleList"])
def test_list_edits_match_pytorch(name):
    ours, our_pop = _edits(nn, getattr(nn, name))
    theirs, their_pop = _edits(torch.nn, getattr(torch.nn, name))
    assert _names(ours) == [(k, type(m).__name__) for k, m in theirs._modules.items()]
    assert our_pop == their_pop


def test_out_of_range_indices_are_index_errors():
    seq = nn.Sequential(nn.ReLU(), nn.Tanh())
    for bad in (lambda: seq[2], lambda: seq.__setitem__(-3, nn.ReLU()), lambda: seq.insert(3, nn.ReLU())):
        with pytest.raises(IndexError, match="out of range"):
            bad()
    with pytest.raises(TypeError, match="expects an nn.Module, got int"):
        seq.insert(0, 3)


def test_a_replaced_parameter_keeps_its_place_as_in_pytorch():
    ours, theirs = nn.Linear(2, 3), torch.nn.Linear(2, 3)
    ours.weight = nn.Parameter(flow.zeros(3, 2))
    theirs.weight = torch.nn.Parameter(torch.zeros(3, 2))
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()] == ["weight", "bias"]
    assert list(ours.state_dict()) == list(theirs.state_dict())


def test_sequential_forward_follows_an_edit():
    seq = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    seq[1] = nn.Tanh()
    seq.insert(0, nn.Identity())
    x = flow.randn(4, 2)
    assert flow.allclose(seq(x), seq[1](x).tanh())
    assert flow.allclose((seq + nn.Sequential(nn.Sigmoid()))(x), seq(x).sigmoid())


def test_module_dict_pop_update_clear_and_parameter_dict_delete():
    d = nn.ModuleDict({"a": nn.ReLU(), "b": nn.Tanh()})
    d.update({"c": nn.Sigmoid(), "a": nn.GELU()})
    assert list(d.keys()) == ["a", "b", "c"] and isinstance(d["a"], nn.GELU)
    assert isinstance(d.pop("b"), nn.Tanh) and list(d) == ["a", "c"]
    with pytest.raises(KeyError):
        del d["b"]
    d.clear()
    assert len(d) == 0
    p = nn.ParameterDict({"w": flow.ones(2), "v": flow.zeros(1)})
    del p["w"]
    assert list(p.keys()) == ["v"] and [n for n, _ in p.named_parameters()] == ["v"]
