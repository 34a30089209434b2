"""A small size for a problem file that declares none (KernelBench's own files), derived from its module-level shape
constants by reading the code: the parent never runs problem code.

Every integer constant of at least SCALED_FROM (batch, channels, lengths, features) is divided by the same power of
two, rounded down and never below SCALED_FROM; smaller ones (kernel sizes, strides, axes, heads, groups) keep their
values. One value always becomes the same one and a larger one never a smaller one, so equal constants stay equal
and their order holds. Constants computed from others (`bias_shape = (out_channels, 1, 1)`) are computed again
from the scaled ones. The least power that brings the inputs get_inputs makes within INPUT_BUDGET elements and
every constant within MAX_CONSTANT is the small size. A constant the model is not told (get_inputs reads it, get_init_inputs does not) keeps its value where the
code is built for that value: a default argument holds it (`img_size=224`), or the model pools by a fixed window
(`nn.AvgPool2d(7)`: a global pool of the one image size its layers bring to 7). The model runs at the result on
every KernelBench file whose inputs' sizes are read from its constants; whether it does is found by its
reference, which is kforge's side: a failure there is `reference_error`, never the candidate's."""

from __future__ import annotations

import ast
import math
import operator
from typing import Any

SCALED_FROM = 16
INPUT_BUDGET = 2**20  # elements of all inputs together (4 MiB in fp32): what the declared small sizes hold
MAX_CONSTANT = 1024  # parameters follow their dimensions: a 16384-wide Linear holds 1 GiB whatever the batch
REFUSED_OVER = 16  # inputs still this many times the budget: no small size (their sizes are written into the code)
_SHIFTS = 24
_FACTORIES = {"rand", "randn", "zeros", "ones", "empty", "full", "randint"}
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
        ast.Div: operator.truediv, ast.Mod: operator.mod, ast.Pow: operator.pow}


class Unknown(Exception):
    """An expression this reading does not evaluate (a call, an attribute, a name bound elsewhere)."""


def _value(node: ast.AST, env: dict[str, Any]) -> Any:
    """A literal expression's value: numbers, names already bound, arithmetic, tuples and lists."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.Name) and node.id in env:
        return env[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _value(node.left, env), _value(node.right, env)
        if isinstance(node.op, ast.Pow) and abs(right) > 64:
            raise Unknown("a power too large to be a size")
        return _OPS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_value(node.operand, env)
    if isinstance(node, (ast.Tuple, ast.List)):
        items = [_value(e, env) for e in node.elts]
        return tuple(items) if isinstance(node, ast.Tuple) else items
    raise Unknown(ast.dump(node)[:80])


def _shrunk(value: Any, shift: int) -> Any:
    """An integer of at least SCALED_FROM divided by 2**shift (rounded down), never below SCALED_FROM: one value
    always becomes the same one, and a larger one never a smaller one."""
    if isinstance(value, bool) or not isinstance(value, int) or value < SCALED_FROM:
        return value
    return max(SCALED_FROM, value >> shift)


def _scaled(node: ast.AST, env: dict[str, Any], shift: int) -> Any:
    """The expression at the smaller size: a literal integer (or arithmetic on literals only) shrunk, a tuple or
    list element by element, anything that names other constants computed from their scaled values."""
    if isinstance(node, (ast.Tuple, ast.List)):
        items = [_scaled(e, env, shift) for e in node.elts]
        return tuple(items) if isinstance(node, ast.Tuple) else items
    if not any(isinstance(n, ast.Name) for n in ast.walk(node)):
        return _shrunk(_value(node, {}), shift)
    return _value(node, env)


def _assignments(tree: ast.Module) -> list[tuple[list[str], ast.AST]]:
    """Module-level assignments to plain names, in order: `a = b = value`, and `a, b = x, y` as one each."""
    found = []
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            found.append(([node.target.id], node.value))
        if not isinstance(node, ast.Assign):
            continue
        if all(isinstance(t, ast.Name) for t in node.targets):
            found.append(([t.id for t in node.targets], node.value))
        elif (len(node.targets) == 1 and isinstance(node.targets[0], ast.Tuple) and isinstance(node.value, ast.Tuple)
              and len(node.targets[0].elts) == len(node.value.elts)
              and all(isinstance(t, ast.Name) for t in node.targets[0].elts)):
            found += [([t.id], v) for t, v in zip(node.targets[0].elts, node.value.elts)]
    return found


def constants(tree: ast.Module, shift: int = 0, kept: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The module's shape constants at a shift (0: as written), those named in `kept` as written; one that cannot be
    read is left out, and so is anything computed from it."""
    env: dict[str, Any] = {}
    for names, node in _assignments(tree):
        try:
            value = _scaled(node, env, 0 if kept & set(names) else shift)
        except (Unknown, ArithmeticError, TypeError, ValueError):
            for name in names:
                env.pop(name, None)
            continue
        env.update(dict.fromkeys(names, value))
    return env


def _function(tree: ast.Module, name: str) -> ast.FunctionDef | None:
    return next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def _names(function: ast.FunctionDef | None) -> set[str]:
    return {n.id for n in ast.walk(function) if isinstance(n, ast.Name)} if function else set()


def _int(node: ast.AST | None) -> int | None:
    ok = isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool)
    return node.value if ok else None


def _defaults(tree: ast.Module) -> set[int]:
    """The integers the file's functions and methods take by default (`img_size=224`)."""
    return {v for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.Lambda))
            for v in map(_int, [*f.args.defaults, *f.args.kw_defaults]) if v is not None}


def _pools_by_fixed_window(tree: ast.Module) -> bool:
    """Whether a layer pools by a window written into the code, wider than the 2 and 3 that pool locally and
    stepping by itself (`nn.AvgPool2d(7)`): a global pool of the size the layers before it make of one input size."""
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and "Pool" in call.func.attr
                and not call.func.attr.startswith("Adaptive")):
            continue
        given = {k.arg: k.value for k in call.keywords}
        window = _int(call.args[0] if call.args else given.get("kernel_size"))
        if window is not None and window > 3 and len(call.args) < 2 and "stride" not in given:
            return True
    return False


def _spatial(tree: ast.Module) -> set[str]:
    """The names that size get_inputs' tensors past their first two dimensions (batch, channels): what a pool reads."""
    function = _function(tree, "get_inputs")
    names: set[str] = set()
    for call in (n for n in ast.walk(function) if isinstance(n, ast.Call)) if function else ():
        dims = call.args[0].elts if len(call.args) == 1 and isinstance(call.args[0], (ast.Tuple, ast.List)) else call.args
        names |= {n.id for d in dims[2:] for n in ast.walk(d) if isinstance(n, ast.Name)}
    return names


def kept_as_written(tree: ast.Module, full: dict[str, Any]) -> frozenset[str]:
    """The constants the model is not told (get_inputs reads them, get_init_inputs does not) that its code is built
    for: each whose value a default argument holds, and where the model pools by a fixed window, each that sizes
    what it pools."""
    untold = _names(_function(tree, "get_inputs")) - _names(_function(tree, "get_init_inputs"))
    sizes = {k for k in untold & full.keys() if isinstance(full[k], int) and full[k] >= SCALED_FROM}
    pooled = _spatial(tree) if _pools_by_fixed_window(tree) else set()
    return frozenset(k for k in sizes if full[k] in _defaults(tree) or k in pooled)


def _shape(call: ast.Call, env: dict[str, Any]) -> tuple[int, ...]:
    """The shape a torch factory call makes: its size arguments (one sequence, or several ints, starred or not)."""
    name = call.func.attr
    size = next((k.value for k in call.keywords if k.arg == "size"), None)
    args = call.args[-1:] if name == "randint" else call.args[:1] if name == "full" else call.args
    nodes = [size] if size is not None else args
    dims: list[int] = []
    for node in nodes:
        value = _value(node.value if isinstance(node, ast.Starred) else node, env)
        dims += list(value) if isinstance(value, (tuple, list)) else [value]
    if not all(isinstance(d, int) and not isinstance(d, bool) for d in dims):
        raise Unknown("a size that is not integers")
    return tuple(dims)


def input_elements(tree: ast.Module, env: dict[str, Any]) -> int:
    """Elements of the tensors get_inputs makes with torch's factories, as far as their sizes read from the
    constants; raises Unknown when none can be read."""
    function = _function(tree, "get_inputs")
    calls = [n for n in ast.walk(function) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
             and n.func.attr in _FACTORIES] if function else []
    shapes = []
    for call in calls:
        try:
            shapes.append(_shape(call, env))
        except (Unknown, ArithmeticError, TypeError):
            continue
    if not shapes:
        raise Unknown("no input size read from get_inputs")
    return sum(math.prod(s) for s in shapes)


def _ints(env: dict[str, Any]) -> list[int]:
    return [v for value in env.values() for v in (value if isinstance(value, (tuple, list)) else [value])
            if isinstance(v, int) and not isinstance(v, bool)]


def _listed(value: Any) -> Any:
    """As the child receives it (JSON): a tuple as a list."""
    return list(value) if isinstance(value, tuple) else value


def derive(tree: ast.Module) -> dict[str, Any]:
    """The constants of the least scaling that fits the budget: each changed one, and each kept as written
    (kept_as_written) that it would have changed; raises Unknown with why there is none: nothing to scale, input
    sizes that are not read from the constants, or inputs that stay over REFUSED_OVER times the budget however far
    the constants shrink (sizes written into the code)."""
    full = constants(tree)
    if max(_ints(full), default=0) < SCALED_FROM:
        raise Unknown(f"no module-level integer constant of at least {SCALED_FROM} to scale")
    input_elements(tree, full)  # raises where the inputs' sizes are not read from the constants
    kept = kept_as_written(tree, full)
    env, elements = full, 0
    for shift in range(_SHIFTS + 1):
        env = constants(tree, shift, kept)
        elements = input_elements(tree, env)
        if elements <= INPUT_BUDGET and max(_ints(env), default=0) <= MAX_CONSTANT:
            break
    if elements > REFUSED_OVER * INPUT_BUDGET:
        raise Unknown(f"its inputs keep {elements:,} elements at the smallest its constants go")
    held = {k for k in kept if _shrunk(full[k], shift) != full[k]}  # named: the size says what it kept
    return {k: _listed(v) for k, v in env.items() if full.get(k) != v or k in held}


def derive_small(tree: ast.Module) -> tuple[dict[str, Any], str]:
    """(overrides, '') for a derived small size, or ({}, why none could be derived)."""
    try:
        return derive(tree), ""
    except Unknown as exc:
        return {}, str(exc)
