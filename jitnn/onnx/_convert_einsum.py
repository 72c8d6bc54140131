"""ONNX Einsum as jitnn transposes, reshapes, matmuls, products and sums.

The equations exporters write are batched products (``"bhid,bhjd->bhij"``,
``"bhij,bhjd->bhid"``, ``"bid,jd->bij"``), transposes (``"ij->ji"``),
reductions (``"ij->i"``) and diagonals (``"ii->i"``). Each lowers to:

1. per operand: a letter repeated in its term (``"ii"``) takes the diagonal
   (the two axes moved last, flattened, every ``n + 1``-th element sliced);
   a letter that no other operand and not the output has is summed away;
2. operands combined left to right, two at a time: the letters both have
   and a later operand or the output needs are batch axes, the ones both
   have and nothing later needs are contracted, the others are the rows
   (left) and columns (right): one ``matmul`` of ``(batch.., rows,
   contracted) @ (batch.., contracted, columns)``, or a broadcast ``mul``
   when nothing is contracted (``"ij,ij->ij"``, ``"i,j->ij"``);
3. a transpose to the output's order.

Each transpose or reshape that would not move anything is left out, so
``"bhij,bhjd->bhid"`` is one ``matmul``. A constant operand is rearranged
with numpy at load time (a weight of ``"bid,jd->bij"`` is transposed once).
``...`` stands for the leading axes an operand has beyond its letters
(aligned from the right, broadcast as numpy does). Computes in float32; an
equation that is not well formed for its operands is a broken model.
"""

from __future__ import annotations

import math

import numpy as np

from ..graph import Operand
from ._common import Const, Converter, rank_of, shape_of


def parse_equation(cv: Converter, equation: str, ranks: list[int]
                   ) -> tuple[list[list[str]], list[str]]:
    """The letters of each input term and of the output, ``...`` spelled
    out as placeholder letters (one per broadcast axis, shared across
    terms from the right); the output of an implicit equation (no ``->``)
    is the broadcast axes, then the letters used once, in alphabetical order."""
    text = equation.replace(" ", "")
    if text.count("->") > 1:
        raise cv.invalid(f"equation {equation!r} has more than one '->'")
    left, arrow, right = text.partition("->")
    terms = left.split(",")
    if len(terms) != len(ranks):
        raise cv.invalid(f"equation {equation!r} has {len(terms)} input term(s) for "
                         f"{len(ranks)} input(s)")
    extra = []                              # how many axes each term's '...' stands for
    for term, rank in zip(terms, ranks):
        _check_term(cv, equation, term)
        named = len(term.replace("...", ""))
        if "..." in term:
            if rank < named:
                raise cv.invalid(f"equation {equation!r}: term {term!r} names {named} axes, "
                                 f"its input has {rank}")
            extra.append(rank - named)
        elif named != rank:
            raise cv.invalid(f"equation {equation!r}: term {term!r} names {named} axes, its "
                             f"input has {rank}")
        else:
            extra.append(0)
    broadcast = [chr(0x3B1 + i) for i in range(max(extra, default=0))]   # Greek: no clash

    def spell(term: str, count: int) -> list[str]:
        head, dots, tail = term.partition("...")
        return list(head) + (broadcast[len(broadcast) - count:] if dots else []) + list(tail)

    inputs = [spell(term, count) for term, count in zip(terms, extra)]
    if arrow:
        _check_term(cv, equation, right)
        if "..." not in right and any(extra):
            output = list(right)          # the broadcast axes summed away
        else:
            output = spell(right, len(broadcast))
        if len(set(output)) != len(output):
            raise cv.invalid(f"equation {equation!r}: the output repeats a letter")
        used = {letter for term in inputs for letter in term}
        missing = [letter for letter in output if letter not in used]
        if missing:
            raise cv.invalid(f"equation {equation!r}: output letter {missing[0]!r} is in no "
                             "input")
    else:
        counts: dict[str, int] = {}
        for term in inputs:
            for letter in term:
                counts[letter] = counts.get(letter, 0) + 1
        output = broadcast + sorted(letter for letter, n in counts.items()
                                    if n == 1 and letter not in broadcast)
    return inputs, output


def _check_term(cv: Converter, equation: str, term: str) -> None:
    letters = term.replace("...", "", 1)
    if "." in letters or any(not (c.isascii() and c.isalpha()) for c in letters):
        raise cv.invalid(f"equation {equation!r}: term {term!r} may hold letters and one "
                         "'...' only")


class _Term:
    """An operand while lowering: its value (a Const or an operand) and the letter of
    each axis."""

    def __init__(self, value, letters: list[str]):
        self.value, self.letters = value, list(letters)

    @property
    def shape(self) -> tuple[int, ...]:
        return shape_of(self.value)


def _transpose(cv: Converter, value, perm: list[int]):
    if perm == list(range(len(perm))):
        return value
    if isinstance(value, Const):
        return Const(np.ascontiguousarray(value.array.transpose(perm)))
    return cv.op("transpose", value, perm)


def _reshape(cv: Converter, value, shape: tuple[int, ...]):
    if tuple(shape) == shape_of(value):
        return value
    if isinstance(value, Const):
        return Const(value.array.reshape(shape))
    return cv.op("reshape", value, tuple(shape))


def _sum(cv: Converter, value, axes: list[int]):
    if not axes:
        return value
    if isinstance(value, Const):
        return Const(value.array.sum(axis=tuple(axes), dtype=np.float32))
    return cv.op("reduce_sum", value, axes=axes, keep_dimensions=False)


def _diagonal(cv: Converter, term: _Term, letter: str, equation: str) -> None:
    """The diagonal of the first two axes of ``letter`` (one axis ``letter``, last)."""
    first = term.letters.index(letter)
    second = term.letters.index(letter, first + 1)
    shape = term.shape
    if shape[first] != shape[second]:
        raise cv.invalid(f"equation {equation!r}: letter {letter!r} is on axes of sizes "
                         f"{shape[first]} and {shape[second]}")
    n = shape[first]
    others = [i for i in range(len(shape)) if i not in (first, second)]
    value = _transpose(cv, term.value, others + [first, second])
    lead = tuple(shape[i] for i in others)
    if isinstance(value, Const):
        value = Const(np.ascontiguousarray(np.diagonal(value.array, axis1=-2, axis2=-1)))
    else:
        flat = _reshape(cv, value, lead + (n * n,))
        if n > 1:
            flat = cv.op("slice", flat, [0] * len(lead) + [0],
                         list(lead) + [(n - 1) * (n + 1) + 1],
                         strides=[1] * len(lead) + [n + 1])
        value = flat
    term.value = value
    term.letters = [term.letters[i] for i in others] + [letter]


def _sum_away(cv: Converter, term: _Term, needed: set[str]) -> None:
    """Sum the axes whose letters nothing else needs."""
    axes = [i for i, letter in enumerate(term.letters) if letter not in needed]
    term.value = _sum(cv, term.value, axes)
    term.letters = [letter for letter in term.letters if letter in needed]


def _combine(cv: Converter, a: _Term, b: _Term, needed: set[str], equation: str) -> _Term:
    """One term for ``a`` and ``b`` (see the module docstring, step 2)."""
    size = {}
    for term in (a, b):
        for letter, n in zip(term.letters, term.shape):
            if size.get(letter, 1) != 1 and n != 1 and n != size[letter]:
                raise cv.invalid(f"equation {equation!r}: letter {letter!r} is on axes of sizes "
                                 f"{size[letter]} and {n}")
            size[letter] = max(size.get(letter, 1), n)
    batch = [x for x in a.letters if x in b.letters and x in needed]
    contracted = [x for x in a.letters if x in b.letters and x not in needed]
    rows = [x for x in a.letters if x not in b.letters]
    columns = [x for x in b.letters if x not in a.letters]
    for letter in contracted:
        if a.shape[a.letters.index(letter)] != b.shape[b.letters.index(letter)]:
            raise cv.unsupported(f"equation {equation!r}: letter {letter!r} is summed over "
                                 f"axes of sizes "
                                 f"{a.shape[a.letters.index(letter)]} and "
                                 f"{b.shape[b.letters.index(letter)]} (broadcast while summed)")

    def arranged(term: _Term, order: list[str], split: tuple[list[str], list[str]]):
        value = _transpose(cv, term.value, [term.letters.index(x) for x in order])
        sizes = shape_of(value)
        lead = sizes[:len(batch)]
        first = math.prod(sizes[len(batch):len(batch) + len(split[0])])
        second = math.prod(sizes[len(batch) + len(split[0]):])
        return _reshape(cv, value, tuple(lead) + (first, second))

    if not contracted:
        # nothing summed: a broadcast product, batch + rows + ones times batch + ones + columns
        left = _transpose(cv, a.value, [a.letters.index(x) for x in batch + rows])
        left = _reshape(cv, left, shape_of(left) + (1,) * len(columns))
        right = _transpose(cv, b.value, [b.letters.index(x) for x in batch + columns])
        if batch:                        # (without batch axes numpy's broadcast adds the ones)
            sizes = shape_of(right)
            right = _reshape(cv, right, sizes[:len(batch)] + (1,) * len(rows)
                             + sizes[len(batch):])
        product = cv.op("mul", cv.float_operand(left), cv.float_operand(right))
        return _Term(product, batch + rows + columns)
    left = arranged(a, batch + rows + contracted, (rows, contracted))
    right = arranged(b, batch + contracted + columns, (contracted, columns))
    product = cv.op("matmul", cv.float_operand(left), cv.float_operand(right))
    lead = shape_of(product)[:len(batch)]
    shape = tuple(lead) + tuple(size[x] for x in rows) + tuple(size[x] for x in columns)
    return _Term(_reshape(cv, product, shape), batch + rows + columns)


def op_einsum(cv: Converter, inputs, attrs):
    """ONNX Einsum (see the module docstring)."""
    equation = attrs["equation"]
    values = [v for v in inputs if v is not None]
    for value in values:
        if isinstance(value, Operand) and value.dtype != np.float32:
            raise cv.unsupported(f"equation {equation!r} on {np.dtype(value.dtype)} tensors "
                                 "(jitnn's Einsum computes in float32)")
    letters, output = parse_equation(cv, equation, [rank_of(v) for v in values])
    terms = [_Term(v, t) for v, t in zip(values, letters)]
    for k, term in enumerate(terms):
        for letter in dict.fromkeys(term.letters):
            while term.letters.count(letter) > 1:
                _diagonal(cv, term, letter, equation)
        others = {x for j, t in enumerate(terms) if j != k for x in t.letters}
        _sum_away(cv, term, others | set(output))
    result = terms[0]
    for k in range(1, len(terms)):
        later = {x for t in terms[k + 1:] for x in t.letters} | set(output)
        result = _combine(cv, result, terms[k], later, equation)
    missing = [x for x in output if x not in result.letters]
    if missing:                       # a broadcast axis of size 1 everywhere, say
        raise cv.unsupported(f"equation {equation!r}: output letter {missing[0]!r} lost")
    value = _transpose(cv, result.value, [result.letters.index(x) for x in output])
    if isinstance(value, Const):
        value = Const(value.array.astype(np.float32, copy=False))
    return [cv.float_operand(value) if isinstance(value, Const) else value]


def fold_einsum(cv: Converter, arrays, attrs, outputs):
    """Einsum of constants, with numpy."""
    equation = attrs["equation"].replace(" ", "")
    return [np.asarray(np.einsum(equation, *[a for a in arrays if a is not None]))]


OPS = {"Einsum": op_einsum}
