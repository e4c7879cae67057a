"""Symbolic dimensions: a size that is an int at the measurement sizes and a polynomial in size symbols.

A model as it ships has symbolic dims (``batch``, ``seq``). taso prices rewrites at one
measurement size but must write a file that runs at every size, and may apply a rule only
when the rule's shape conditions hold *for every value of the symbols*. A :class:`Dim` carries
both facts:

* it **is** an ``int`` (a subclass), worth its value at the measurement sizes, so cost models,
  executors and NumPy see ordinary shapes and need no change;
* it carries a polynomial with integer coefficients over *atoms*: size symbols (each >= 1) and
  floor quotients ``(p)//k`` of polynomials by positive ints (each >= 0). Arithmetic on dims
  (``+ - * // %``) is exact polynomial arithmetic, so ``batch*seq``, ``seq*2`` and a
  convolution's ``(h-1)//2+1`` stay symbolic through any shape rule written with operators.

Comparisons speak of *every* value of the symbols:

* ``a == b`` is True only when the polynomials are identical (then they are equal at every
  size); ``batch == 1`` is False even at batch 1. A shape rule's ``require(a == b)`` is thus a
  proof obligation, and a rule whose constraint needs a concrete size does not fire.
* ``<``, ``<=``, ``>``, ``>=`` (and so ``max``/``min``) answer only when the answer is the same
  at every size; otherwise they raise :class:`UndecidableDim` (a ShapeError), which makes the
  shape rule, and so the rewrite or the import of that node, refuse with the reason.

A polynomial that reduces to a constant is returned as a plain ``int``: an ``int`` is a
dimension that does not depend on any symbol.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Union

from ..errors import ShapeError

__all__ = ["Dim", "DimLike", "UndecidableDim", "symbol", "bare_symbol", "symbols_of", "evaluate", "prod", "floor_atom", "floordiv",
           "floor_definition", "poly_terms", "is_static_shape", "concrete", "concrete_value", "rebind_value", "holds_dims",
           "value_symbols", "other_sizes", "broadcast_dims", "decide_equal"]

Monomial = tuple[str, ...]  # atom names in sorted order, repeated for powers; () is the constant term
Poly = tuple[tuple[Monomial, int], ...]  # sorted by monomial, no zero coefficient

# Floor-quotient atoms: name -> (numerator polynomial, positive int divisor). Names are derived
# from the content, so the same quotient made twice is the same atom.
_FLOORS: dict[str, tuple[Poly, int]] = {}


class UndecidableDim(ShapeError):
    """A comparison of dims whose answer depends on the sizes of the symbols."""


class Dim(int):
    """A symbolic dimension: its value at the measurement sizes (as an int) and its polynomial."""

    poly: Poly

    def __new__(cls, value: int, poly: Poly) -> Dim:
        self = super().__new__(cls, value)
        self.poly = poly
        return self

    # ---- display: str is symbolic (people), repr is the int (cache keys, structural hashes) ----
    def __str__(self) -> str:
        return _render(self.poly)

    def __repr__(self) -> str:
        return int.__repr__(self)

    def __format__(self, spec: str) -> str:
        return str(self) if not spec else format(int(self), spec)

    def __reduce__(self):
        # the floor atoms' definitions travel with the dim: another process has not seen them made
        return (_restore, (int(self), self.poly, _floor_definitions(self.poly)))

    @property
    def symbols(self) -> frozenset[str]:
        return _poly_symbols(self.poly)

    # ---- equality: identical polynomials (and the same measured value) --------------------------
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, int):
            return NotImplemented
        return isinstance(other, Dim) and other.poly == self.poly and int(other) == int(self)

    def __ne__(self, other: object) -> bool:
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    def __hash__(self) -> int:
        return hash(self.poly)

    # ---- order: only what holds at every size ----------------------------------------------------
    def __lt__(self, other: int) -> bool:
        return _less(self, other, strict=True)

    def __le__(self, other: int) -> bool:
        return _less(self, other, strict=False)

    def __gt__(self, other: int) -> bool:
        return _less(other, self, strict=True)

    def __ge__(self, other: int) -> bool:
        return _less(other, self, strict=False)

    # ---- arithmetic --------------------------------------------------------------------------------
    def __add__(self, other):
        return _make(int(self) + int(other), _add(self.poly, _poly(other))) if isinstance(other, int) else NotImplemented

    __radd__ = __add__

    def __sub__(self, other):
        return _make(int(self) - int(other), _add(self.poly, _scale(_poly(other), -1))) if isinstance(other, int) else NotImplemented

    def __rsub__(self, other):
        return _make(int(other) - int(self), _add(_poly(other), _scale(self.poly, -1))) if isinstance(other, int) else NotImplemented

    def __mul__(self, other):
        return _make(int(self) * int(other), _mul(self.poly, _poly(other))) if isinstance(other, int) else NotImplemented

    __rmul__ = __mul__

    def __neg__(self):
        return _make(-int(self), _scale(self.poly, -1))

    def __pos__(self):
        return self

    def __floordiv__(self, other):
        return floordiv(self, other) if isinstance(other, int) else NotImplemented

    def __rfloordiv__(self, other):
        return floordiv(other, self) if isinstance(other, int) else NotImplemented

    def __mod__(self, other):
        return self - other * floordiv(self, other) if isinstance(other, int) else NotImplemented

    def __rmod__(self, other):
        return other - self * floordiv(other, self) if isinstance(other, int) else NotImplemented

    def __abs__(self):
        return self if _lower_bound(self.poly) is not None and _lower_bound(self.poly) >= 0 else _undecidable(f"the sign of {self}")


DimLike = Union[int, Dim]


def _floor_definitions(p: Poly) -> dict[str, tuple[Poly, int]]:
    found: dict[str, tuple[Poly, int]] = {}
    for m, _ in p:
        for atom in m:
            if atom in _FLOORS:
                found[atom] = _FLOORS[atom]
                found.update(_floor_definitions(_FLOORS[atom][0]))
    return found


def _restore(value: int, poly: Poly, floors: dict[str, tuple[Poly, int]]) -> Dim:
    for atom, definition in floors.items():
        _FLOORS.setdefault(atom, definition)
    return Dim(value, poly)


# ---- construction ----------------------------------------------------------------------------------

def symbol(name: str, value: int) -> Dim:
    """The size symbol ``name`` (>= 1 at every size), worth ``value`` at the measurement sizes."""
    if value < 1:
        raise ShapeError(f"symbol {name!r}: a measurement size must be at least 1, got {value}")
    return Dim(value, (((name,), 1),))


def _make(value: int, poly: Poly) -> DimLike:
    """A Dim, or a plain int when the polynomial is a constant (which then must be the value)."""
    if not poly:
        return 0 if value == 0 else _inconsistent(value, poly)
    if len(poly) == 1 and poly[0][0] == ():
        return poly[0][1] if poly[0][1] == value else _inconsistent(value, poly)
    return Dim(value, poly)


def _inconsistent(value: int, poly: Poly):
    raise ShapeError(f"internal: dimension {_render(poly)} measured as {value}")


def _poly(x: int) -> Poly:
    if isinstance(x, Dim):
        return x.poly
    return (((), int(x)),) if int(x) else ()


def _add(p: Poly, q: Poly) -> Poly:
    terms = dict(p)
    for m, c in q:
        terms[m] = terms.get(m, 0) + c
    return tuple(sorted((m, c) for m, c in terms.items() if c))


def _scale(p: Poly, k: int) -> Poly:
    return tuple((m, c * k) for m, c in p) if k else ()


def _mul(p: Poly, q: Poly) -> Poly:
    terms: dict[Monomial, int] = {}
    for m1, c1 in p:
        for m2, c2 in q:
            m = tuple(sorted(m1 + m2))
            terms[m] = terms.get(m, 0) + c1 * c2
    return tuple(sorted((m, c) for m, c in terms.items() if c))


def floordiv(a: int, b: int) -> DimLike:
    """``a // b`` for dims: exact when the division is, else a floor-quotient atom (b a positive int)."""
    if not isinstance(a, Dim) and not isinstance(b, Dim):
        return int(a) // int(b)
    value = int(a) // int(b)
    if isinstance(b, Dim):
        quotient = _exact_quotient(_poly(a), b.poly)
        if quotient is None:
            raise UndecidableDim(f"{a} // {b} is not a polynomial in the symbols")
        return _make(value, quotient)
    k = int(b)
    if k <= 0:
        raise UndecidableDim(f"{a} // {k}: only positive divisors of symbolic dims are supported")
    # Whole multiples of k leave the quotient exactly: (k*q + r)//k = q + r//k.
    lead = tuple((m, c // k) for m, c in a.poly if m != () and c // k)
    rest = _add(a.poly, _scale(lead, -k))
    if all(m == () for m, _ in rest):
        return _make(value, _add(lead, _poly(evaluate_poly(rest, {}) // k)))
    low = _lower_bound(rest)
    if low is None or low < 0:
        raise UndecidableDim(f"{a} // {k}: the remainder {_render(rest)} may be negative at some sizes")
    return _make(value, _add(lead, (((floor_atom(rest, k),), 1),)))


def floor_atom(numerator: Poly, k: int) -> str:
    """The atom standing for ``numerator // k`` (numerator >= 0 at every size)."""
    name = f"({_render(numerator)})//{k}"
    _FLOORS.setdefault(name, (numerator, k))
    return name


def _exact_quotient(p: Poly, q: Poly) -> Poly | None:
    """``p / q`` when q is a single term that divides every term of p, else None."""
    if len(q) != 1:
        return None
    (mq, cq), = q
    out = []
    for m, c in p:
        rest = list(m)
        for atom in mq:
            if atom not in rest:
                return None
            rest.remove(atom)
        if c % cq:
            return None
        out.append((tuple(rest), c // cq))
    return tuple(sorted(out))


# ---- valuation ------------------------------------------------------------------------------------

def evaluate_poly(p: Poly, env: Mapping[str, int]) -> int:
    total = 0
    for m, c in p:
        term = c
        for atom in m:
            term *= _atom_value(atom, env)
        total += term
    return total


def _atom_value(atom: str, env: Mapping[str, int]) -> int:
    if atom in _FLOORS:
        numerator, k = _FLOORS[atom]
        return evaluate_poly(numerator, env) // k
    try:
        return int(env[atom])
    except KeyError:
        raise ShapeError(f"no size given for symbol {atom!r}") from None


def evaluate(x: int, env: Mapping[str, int]) -> int:
    """The value of a dim when each symbol takes the size ``env`` gives it."""
    return evaluate_poly(x.poly, env) if isinstance(x, Dim) else int(x)


def _poly_symbols(p: Poly) -> frozenset[str]:
    out: set[str] = set()
    for m, _ in p:
        for atom in m:
            out |= _poly_symbols(_FLOORS[atom][0]) if atom in _FLOORS else {atom}
    return frozenset(out)


def symbols_of(dims: Iterable[int]) -> frozenset[str]:
    """The size symbols the dims depend on."""
    out: frozenset[str] = frozenset()
    for d in dims:
        if isinstance(d, Dim):
            out |= d.symbols
    return out


def bare_symbol(x: int) -> str | None:
    """The symbol a dim is, when it is one symbol alone (``batch``, not ``2*batch`` or ``batch*seq``): a
    Shape -> Gather of a value with that dim reads its size at run time."""
    if isinstance(x, Dim) and len(x.poly) == 1:
        (monomial, coefficient), = x.poly
        if coefficient == 1 and len(monomial) == 1 and monomial[0] not in _FLOORS:
            return monomial[0]
    return None


def is_static_shape(shape: Sequence[int]) -> bool:
    return not any(isinstance(d, Dim) for d in shape)


def concrete(shape: Sequence[int]) -> tuple[int, ...]:
    """The shape at the measurement sizes, as plain ints."""
    return tuple(int(d) for d in shape)


def prod(dims: Iterable[int]) -> DimLike:
    """The product of dims, symbolic where they are (``np.prod`` would give the measured value only)."""
    out: DimLike = 1
    for d in dims:
        out = out * d
    return out


def poly_terms(x: int) -> Poly:
    """A dim's polynomial: ((monomial, coefficient), ...); an int is a constant polynomial."""
    return _poly(x)


def floor_definition(atom: str) -> tuple[Poly, int] | None:
    """``(numerator, k)`` when ``atom`` is a floor quotient, None for a size symbol."""
    return _FLOORS.get(atom)


# ---- order ----------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=1 << 14)
def _lower_bound(p: Poly) -> int | None:
    """A lower bound of the polynomial over every size, or None when this simple test finds none.

    Each symbol s >= 1 is written 1 + t with t >= 0 (floor atoms are >= 0 as they are); when every
    non-constant coefficient of the expanded polynomial is >= 0, its constant term is a lower
    bound (``batch*seq - seq`` = ``t_b + t_b*t_s`` >= 0).
    """
    shifted: Poly = ()
    for m, c in p:
        term: Poly = (((), c),)
        for atom in m:
            term = _mul(term, (((atom,), 1),) if atom in _FLOORS else (((), 1), ((atom,), 1)))
        shifted = _add(shifted, term)
    bound = 0
    for m, c in shifted:
        if m == ():
            bound = c
        elif c < 0:
            return None
    return bound


def _less(a: int, b: int, strict: bool) -> bool:
    """``a < b`` (or ``<=``) at every size; raises UndecidableDim when it holds at some sizes only."""
    diff = _add(_poly(b), _scale(_poly(a), -1))  # b - a
    low = _lower_bound(diff)
    if low is not None and low >= (1 if strict else 0):
        return True
    neg_low = _lower_bound(_scale(diff, -1))  # a - b
    if neg_low is not None and neg_low >= (0 if strict else 1):
        return False
    return _undecidable(f"whether {a} {'<' if strict else '<='} {b}")


def _undecidable(what: str):
    raise UndecidableDim(f"{what} depends on the sizes of the symbols")


# ---- rendering ---------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=1 << 14)
def _render(p: Poly) -> str:
    if not p:
        return "0"
    parts = []
    for m, c in sorted(p, key=lambda t: (-len(t[0]), t[0])):
        if m == ():
            parts.append(str(c))
            continue
        body = "*".join(m)
        parts.append(body if c == 1 else f"-{body}" if c == -1 else f"{c}*{body}")
    text = "+".join(parts)
    return text.replace("+-", "-")


# ---- whole values: params and shapes that may hold dims -------------------------------------------

def concrete_value(value):
    """``value`` with every dim replaced by its measured int (tuples walked): what a measurement runs on."""
    if isinstance(value, Dim):
        return int(value)
    if isinstance(value, tuple):
        return tuple(concrete_value(v) for v in value)
    return value


def rebind_value(value, sizes: Mapping[str, int]):
    """``value`` with every dim re-measured at other sizes of the symbols (same polynomials)."""
    if isinstance(value, Dim):
        return Dim(evaluate(value, sizes), value.poly)
    if isinstance(value, tuple):
        return tuple(rebind_value(v, sizes) for v in value)
    return value


def holds_dims(value) -> bool:
    """Whether a value (a dim, or tuples of them) depends on a size symbol."""
    if isinstance(value, Dim):
        return True
    return isinstance(value, tuple) and any(holds_dims(v) for v in value)


def value_symbols(value) -> frozenset[str]:
    if isinstance(value, Dim):
        return value.symbols
    if isinstance(value, tuple):
        return frozenset().union(*(value_symbols(v) for v in value)) if value else frozenset()
    return frozenset()


def other_sizes(symbols: Iterable[str]) -> dict[str, int]:
    """A second valuation of the symbols, away from usual measurement sizes (odd, 5 to 83, fixed per name):
    the shape rules are re-run there to catch one that computed a dim through ``int()`` or NumPy."""
    return {s: 5 + 2 * (zlib.crc32(s.encode()) % 40) for s in symbols}


def decide_equal(a: int, b: int) -> bool | None:
    """Whether two dims are equal at every size (True), at none (False), or it depends (None)."""
    if a == b:
        return True
    if not isinstance(a, Dim) and not isinstance(b, Dim):
        return False
    try:
        return False if (a < b or a > b) else None
    except UndecidableDim:
        return None


def broadcast_dims(*shapes: Sequence[int]) -> tuple[int, ...]:
    """NumPy broadcasting of shapes whose dims may be symbolic.

    A dim broadcasts against a literal 1 or an identical dim; two dims that are equal only at some
    sizes (``batch`` against ``seq``, or ``batch`` against 3) do not, since the result's shape
    would depend on the sizes.
    """
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for axis in range(rank):
        dims = [s[axis - rank + len(s)] for s in shapes if axis - rank + len(s) >= 0]
        real = [d for d in dims if not (type(d) is int and d == 1)]
        if not real:
            out.append(1)
            continue
        first = real[0]
        for d in real[1:]:
            if not d == first:
                listed = " and ".join(f"[{','.join(map(str, s))}]" for s in shapes)
                raise ShapeError(f"shapes {listed} do not broadcast (dims {first} and {d}"
                                 + (" are equal at some sizes only)" if isinstance(d, Dim) or isinstance(first, Dim) else ")"))
        out.append(first)
    return tuple(out)
