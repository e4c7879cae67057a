"""The generator: rediscovers known substitutions, emits only sound and general ones, deterministically.

Runs are CI-sized: small op subsets over reduced pools (two tensors per class instead of
TASO's three), up to three operators.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import assert_close
from taso.generator import STAGES, Settings, ShapeClass, generate, parse_ops
from taso.generator import enumerate as enumeration
from taso.generator.enumerate import GraphSpec
from taso.generator.graphs import Decoded
from taso.generator.pairing import Candidate, FloatCheck, pair_graphs
from taso.generator.parallel import Workers, shared_graphs
from taso.generator.prune import dedupe_renamings

from taso.cli import main
from taso.errors import TasoError
from taso.ir import Params
from taso.ops import get as get_op
from taso.ops.base import FINGERPRINT_PRIME
from taso.rules import Library, Rule, format_rule

MATMUL_POOL = (ShapeClass("act", "x", (2, 4), 2, "data"), ShapeClass("mat", "w", (4, 4), 2, "weight"))
CONV_POOL = (
    ShapeClass("img", "i", (2, 4, 5, 5), 1, "data"),
    ShapeClass("kernel3x3", "k", (4, 4, 3, 3), 2, "weight"),
    ShapeClass("kernel1x3", "kh", (4, 4, 1, 3), 1, "weight"),
)
MATMUL_SETTINGS = Settings(max_ops=3, ops=parse_ops("matmul,add,concat,split,transpose"), classes=MATMUL_POOL)
CONV_SETTINGS = Settings(max_ops=3, ops=parse_ops("conv2d,add,concat,split,enlarge,relu"), classes=CONV_POOL)


@pytest.fixture(scope="module")
def matmul_result():
    return generate(MATMUL_SETTINGS)


@pytest.fixture(scope="module")
def conv_result():
    return generate(CONV_SETTINGS)


def _texts(result) -> set[str]:
    return {format_rule(rule) for rule in result.library}


SAME = "pads=(1,1,1,1), strides=(1,1)"


@pytest.mark.parametrize("text", [
    # associativity
    "matmul(x1, matmul(w1, w2)) ⇒ matmul(matmul(x1, w1), w2)",
    # two matmuls sharing an input: one matmul over concatenated weights, then split (Q/K/V)
    "[matmul(x1, w1), matmul(x1, w2)] ⇒ [split(matmul(x1, concat(w1, w2, axis=1)), axis=1, sizes=(4,4))[0], "
    "split(matmul(x1, concat(w1, w2, axis=1)), axis=1, sizes=(4,4))[1]]",
    # the sum of two matmuls: one matmul of concatenations
    "matmul(concat(x1, x2, axis=1), concat(w1, w2, axis=0)) ⇒ add(matmul(x1, w1), matmul(x2, w2))",
    # transpose of a product
    "transpose(matmul(x1, w1), perm=(1,0)) ⇒ matmul(transpose(w1, perm=(1,0)), transpose(x1, perm=(1,0)))",
])
def test_generator_rediscovers_matmul_substitutions(matmul_result, text):
    assert text in _texts(matmul_result)


@pytest.mark.parametrize("text", [
    # two convolutions sharing an input: one convolution over concatenated kernels, then split
    f"[conv2d(i1, k1, {SAME}), conv2d(i1, k2, {SAME})] ⇒ [split(conv2d(i1, concat(k1, k2, axis=0), {SAME}), axis=1, sizes=(4,4))[0], "
    f"split(conv2d(i1, concat(k1, k2, axis=0), {SAME}), axis=1, sizes=(4,4))[1]]",
    # convolution distributes over addition
    f"conv2d(i1, add(k1, k2), {SAME}) ⇒ add(conv2d(i1, k1, {SAME}), conv2d(i1, k2, {SAME}))",
    # relu after a convolution is its fused activation
    f"conv2d(i1, k1, activation=relu, {SAME}) ⇒ relu(conv2d(i1, k1, {SAME}))",
    # a 1x3 convolution enlarged to 3x3 merges with a 3x3 convolution
    f"conv2d(i1, add(k1, enlarge(kh1, kernel=(3,3))), {SAME}) ⇒ add(conv2d(i1, k1, {SAME}), conv2d(i1, kh1, pads=(0,1,0,1), strides=(1,1)))",
    f"conv2d(i1, concat(k1, enlarge(kh1, kernel=(3,3)), axis=0), {SAME}) ⇒ concat(conv2d(i1, k1, {SAME}), conv2d(i1, kh1, pads=(0,1,0,1), strides=(1,1)), axis=1)",
])
def test_generator_rediscovers_convolution_substitutions(conv_result, text):
    assert text in _texts(conv_result)


@pytest.mark.parametrize("fixture", ["matmul_result", "conv_result"])
def test_every_emitted_rule_validates_and_its_sides_agree_in_float(fixture, request):
    rng = np.random.default_rng(123)
    library = request.getfixturevalue(fixture).library
    assert len(library) > 20
    for rule in library:
        rule.validate()
        feeds = {i.name: rng.standard_normal(i.type.shape).astype(np.float32) for i in rule.inputs}
        source, target = rule.side_graph("source").run(feeds), rule.side_graph("target").run(feeds)
        for s, t in rule.outputs:
            assert_close(target[t], source[s], rtol=1e-4, what=format_rule(rule))


def _rule(result, text: str) -> Rule:
    return next(rule for rule in result.library if format_rule(rule) == text)


def _agree_at(rule: Rule, shapes: dict) -> None:
    assert rule.constraints_hold(shapes)
    rng = np.random.default_rng(7)
    feeds = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}
    source, target = rule.side_graph("source", shapes).run(feeds), rule.side_graph("target", shapes).run(feeds)
    for s, t in rule.outputs:
        assert_close(target[t], source[s], rtol=1e-4)


def test_split_sizes_follow_the_shapes_the_rule_is_applied_to(matmul_result, conv_result):
    qkv = next(r for r in matmul_result.library if format_rule(r).startswith("[matmul(x1, w1), matmul(x1, w2)] ⇒ [split("))
    target = qkv.side_graph("target", {"x1": (3, 8), "w1": (8, 5), "w2": (8, 7)})
    assert [n.params["sizes"] for n in target.nodes if n.op.name == "split"] == [(5, 7)]
    _agree_at(qkv, {"x1": (3, 8), "w1": (8, 5), "w2": (8, 7)})
    convs = next(r for r in conv_result.library if format_rule(r).startswith(f"[conv2d(i1, k1, {SAME}), conv2d(i1, k2, {SAME})]"))
    _agree_at(convs, {"i1": (1, 6, 7, 9), "k1": (3, 6, 3, 3), "k2": (5, 6, 3, 3)})


def test_constant_sizes_follow_the_shapes_the_rule_is_applied_to():
    result = generate(Settings(max_ops=2, ops=parse_ops("matmul,relu,eye"), classes=MATMUL_POOL))
    rule = _rule(result, "relu(x1) ⇒ matmul(x1, eye(n=4), activation=relu)")
    assert rule.params == ({"side": "target", "node": 0, "param": "n", "value": {"dim": ["x1", 1]}},)
    _agree_at(rule, {"x1": (3, 6)})


def test_constraints_say_which_dimensions_a_rule_needs_equal(conv_result):
    rule = _rule(conv_result, f"conv2d(i1, add(k1, k2), {SAME}) ⇒ add(conv2d(i1, k1, {SAME}), conv2d(i1, k2, {SAME}))")
    shapes = {"i1": (1, 6, 7, 7), "k1": (3, 6, 3, 3), "k2": (3, 6, 3, 3)}
    assert rule.constraints_hold(shapes)
    assert not rule.constraints_hold({**shapes, "k2": (5, 6, 3, 3)})  # the kernels must have the same shape
    assert not rule.constraints_hold({**shapes, "k1": (3, 6, 5, 5), "k2": (3, 6, 5, 5)})  # the literal pads fit 3x3 kernels only


def test_a_rule_needing_more_equal_sizes_than_types_show_gets_them_as_constraints():
    """A grouped convolution type-checks for any two kernels, but splits into two convolutions only if they have equal outputs."""
    pool = (ShapeClass("img", "i", (2, 4, 5, 5), 2, "data"), ShapeClass("kernel3x3", "k", (4, 4, 3, 3), 2, "weight"))
    result = generate(Settings(max_ops=3, ops=parse_ops("conv2d,concat"), classes=pool))
    rule = _rule(result, f"conv2d(concat(i1, i2, axis=1), concat(k1, k2, axis=0), groups=2, {SAME}) ⇒ "
                         f"concat(conv2d(i1, k1, {SAME}), conv2d(i2, k2, {SAME}), axis=1)")
    shapes = {"i1": (3, 6, 7, 9), "i2": (3, 6, 7, 9), "k1": (6, 6, 3, 3), "k2": (6, 6, 3, 3)}
    _agree_at(rule, shapes)  # batch, height and width stay free
    assert not rule.constraints_hold({**shapes, "k2": (8, 6, 3, 3)})


@pytest.mark.parametrize("activation", ["relu", "sigmoid", "tanh"])
@pytest.mark.parametrize("op_name, shapes, params", [
    ("matmul", [(2, 4), (4, 4)], {}),
    ("conv2d", [(2, 4, 5, 5), (4, 4, 3, 3)], {"pads": (1, 1, 1, 1)}),
])
def test_a_fused_activation_is_the_activation_op_after_the_linear_op_in_exact_arithmetic(op_name, shapes, params, activation):
    """The generator's evaluator relies on this to share the linear part between fused variants."""
    op, rng = get_op(op_name), np.random.default_rng(0)
    args = [rng.integers(0, FINGERPRINT_PRIME, size=shape, dtype=np.int64) for shape in shapes]
    fused = op.evaluate_exact(args, op.make_params(activation=activation, **params))[0]
    linear = op.evaluate_exact(args, op.make_params(activation="none", **params))
    assert np.array_equal(fused, get_op(activation).evaluate_exact(linear, Params())[0])


def test_no_two_emitted_rules_are_renamings_of_each_other(matmul_result, conv_result):
    for result in (matmul_result, conv_result):
        texts = [format_rule(rule) for rule in result.library]
        assert len(texts) == len(set(texts))


def _leaf_ops(nodes, inputs) -> set:
    return {(n.op, json.dumps(n.params, sort_keys=True, default=list), n.inputs) for n in nodes if set(n.inputs) <= inputs}


def test_no_emitted_rule_shares_an_operator_over_inputs_between_its_sides(matmul_result, conv_result):
    for result in (matmul_result, conv_result):
        for rule in result.library:
            inputs = {i.name for i in rule.inputs}
            assert not _leaf_ops(rule.source, inputs) & _leaf_ops(rule.target, inputs), format_rule(rule)


def test_a_rule_with_two_inputs_unified_is_dropped_for_the_general_one():
    result = generate(Settings(max_ops=2, ops=parse_ops("concat"), classes=(ShapeClass("act", "x", (2, 4), 3, "data"),)))
    texts = _texts(result)
    assert "concat(x1, concat(x2, x3, axis=0), axis=0) ⇒ concat(concat(x1, x2, axis=0), x3, axis=0)" in texts
    assert "concat(x1, concat(x2, x1, axis=0), axis=0) ⇒ concat(concat(x1, x2, axis=0), x1, axis=0)" not in texts
    assert result.counts["instances"] < result.counts["float_checked"]


def test_the_float_recheck_drops_pairs_whose_sides_differ():
    with Workers(MATMUL_SETTINGS) as workers:
        context = workers.context
    matmul = next(v.index for v in context.variants if v.label == "matmul")
    x1, w1, w2 = 0, 2, 3
    one = Decoded(GraphSpec(((matmul, (), (x1, w1)),), (4,)), context)
    other = Decoded(GraphSpec(((matmul, (), (x1, w2)),), (4,)), context)
    check = FloatCheck(context, seed=0)
    assert check.holds(Candidate(0, one, one))
    assert not check.holds(Candidate(0, one, other))


def test_the_stages_after_renaming_take_picklable_candidates_and_agree_with_the_in_process_functions():
    """Workers (a process pool, Ray) get candidates as specs (prune.Found) and decode them; the verdicts are the parent's."""
    import pickle

    from taso.generator.pairing import Decoder, holds_in_float, pair_specs
    from taso.generator.prune import (
        Found,
        drop_instances,
        first_per_form,
        instance_facts,
        no_common_subgraph,
        select_non_instances,
        shares_subgraph,
        summarize,
    )

    settings = Settings(max_ops=3, ops=parse_ops("matmul,add,transpose"))  # three tensors a class: instances to drop
    with Workers(settings) as workers:
        _, graphs = shared_graphs(workers)
        pairs = pair_specs(graphs)
        summaries = summarize(pairs)
        found = [Found(pairs[i], *summaries[i]) for i in first_per_form(s[0] for s in summaries)]
        assert len(found) > 20 and pickle.loads(pickle.dumps(found)) == found
        decode = Decoder(workers.context)
        canonical = [f.decode(decode) for f in found]
        clear = no_common_subgraph([f.pair for f in found])
        assert clear == [not shares_subgraph(c.candidate) for c in canonical]
        found, canonical = [f for f, ok in zip(found, clear) if ok], [c for c, ok in zip(canonical, clear) if ok]
        check = FloatCheck(workers.context, settings.seed)
        assert holds_in_float([f.pair for f in found]) == [check.holds(c.candidate) for c in canonical]
        remaining, special, unions = select_non_instances([f.form for f in found], instance_facts(found))
        kept, special_here, unions_here = drop_instances(canonical)
        assert [found[i].form for i in remaining] == [k.form for k in kept] and (special, unions) == (special_here, unions_here)
        assert 0 < len(kept) < len(found)


def test_class_order_pruning_loses_no_candidate(monkeypatch):
    """Recording only graphs whose inputs form prefixes (x1, x2 but never x2 alone) finds every pair up to renaming."""
    settings = Settings(max_ops=2, ops=parse_ops("matmul,add,concat,split,transpose"), classes=MATMUL_POOL)

    def forms() -> tuple[int, set]:
        with Workers(settings) as workers:
            key_pass, graphs = shared_graphs(workers)
            return sum(key_pass.per_depth), {k.form for k in dedupe_renamings(pair_graphs(graphs, workers.context))}

    pruned_graphs, pruned = forms()
    monkeypatch.setattr(enumeration.Enumerator, "inputs_in_class_order", False)
    all_graphs, everything = forms()
    assert pruned_graphs < all_graphs and pruned == everything


def test_four_operator_graphs_are_enumerated_with_a_keys_only_first_pass():
    """Beyond three operators the first pass keeps only keys and a second pass collects the pairing graphs."""
    pool = (ShapeClass("act", "x", (2, 4), 1, "data"), ShapeClass("mat", "w", (4, 4), 2, "weight"))
    result = generate(Settings(max_ops=4, ops=parse_ops("matmul,transpose"), classes=pool))
    assert result.per_depth[4] > 0 and len(result.library.header["counts"]["graphs_by_ops"]) == 4
    assert "matmul(x1, w1) ⇒ transpose(matmul(transpose(w1, perm=(1,0)), transpose(x1, perm=(1,0))), perm=(1,0))" in _texts(result)


def test_stage_counts_shrink_and_the_header_records_settings_and_counts(matmul_result):
    counts = [matmul_result.counts[name] for name in STAGES]
    assert counts == sorted(counts, reverse=True) and counts[-1] == len(matmul_result.library)
    header = matmul_result.library.header
    assert header["generator"]["max_ops"] == 3 and header["generator"]["ops"] == list(MATMUL_SETTINGS.ops)
    assert header["generator"]["seed"] == 0 and [c["class"] for c in header["generator"]["pool"]] == ["act", "mat"]
    assert header["counts"]["graphs"] == sum(matmul_result.per_depth)
    assert all(rule.status == "candidate" and len(rule.fingerprint) == 16 for rule in matmul_result.library)


def test_the_same_seed_gives_the_same_file_byte_for_byte_whatever_the_workers(matmul_result):
    assert generate(MATMUL_SETTINGS, jobs=2).library.dumps() == matmul_result.library.dumps()


def test_another_seed_finds_the_same_rules(matmul_result):
    other = generate(Settings(max_ops=3, ops=MATMUL_SETTINGS.ops, classes=MATMUL_POOL, seed=5))
    assert {r.id for r in other.library} == {r.id for r in matmul_result.library}


def test_one_operator_graphs_are_enumerated_without_growing_past_the_root(tmp_path):
    """`taso generate --max-ops 1` stopped with an IndexError: a root alone already fills the budget."""
    enumerator = enumeration.Enumerator(Settings(max_ops=1, ops=parse_ops("matmul,transpose")))
    sizes = []
    for root in enumerator.roots():
        enumerator.walk(root, lambda key, ops, last, outputs: sizes.append(len(ops) + (last is not None)))
    assert sizes and set(sizes) == {1}
    assert main(["generate", "--max-ops", "1", "--ops", "matmul,transpose", "--quiet", "-o", str(tmp_path / "one.json")]) == 0


def test_cli_generate_writes_a_library_that_loads_back(tmp_path, capsys):
    path = tmp_path / "candidates.json"
    assert main(["generate", "--max-ops", "2", "--ops", "matmul,transpose", "--quiet", "-o", str(path)]) == 0
    out = capsys.readouterr().out
    assert "renaming" in out and "common_subgraph" in out and f"to {path}" in out
    library = Library.load(path)
    assert len(library) > 0 and library.header["generator"]["ops"] == ["matmul", "transpose"]
    assert Library.from_json(json.loads(library.dumps())).rules == library.rules
    assert "matmul(x1, matmul(w1, w2)) ⇒ matmul(matmul(x1, w1), w2)" in {format_rule(r) for r in library}
    assert main(["info", str(path)]) == 0


@pytest.mark.parametrize("argv, message", [
    (["--ops", "matmul,nosuchop"], "unknown operator 'nosuchop'"),
    (["--ops", "div"], "no exact (modular) semantics"),
    (["--ops", "reshape"], "no enumeration policy"),
    (["--max-ops", "0"], "--max-ops"),
    (["-j", "0"], "-j"),
])
def test_cli_generate_rejects_bad_arguments_with_exit_2(tmp_path, capsys, argv, message):
    assert main(["generate", *argv, "--quiet", "-o", str(tmp_path / "out.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("taso: error:") and message in err and err.count("\n") == 1


def test_cli_generate_refuses_an_unwritable_output_before_running(tmp_path, capsys):
    assert main(["generate", "--quiet", "-o", str(tmp_path / "missing" / "out.json")]) == 2
    assert "no such directory" in capsys.readouterr().err
    assert main(["generate", "--quiet", "-o", str(tmp_path)]) == 2


def test_parse_ops_expands_presets_and_keeps_canonical_order():
    assert parse_ops("relu,matmul") == ("matmul", "relu")
    assert set(parse_ops("taso,sigmoid")) == set(parse_ops("taso")) | {"sigmoid"}
    with pytest.raises(TasoError):
        parse_ops("")


def test_every_policy_refuses_the_ranks_its_variant_does_not_declare():
    """The enumerator tries only the ranks a variant declares (generator.opset ``ranks``): a policy that could accept
    another rank would lose candidates silently. Every variant of the default set, on every tuple of shapes of ranks
    0 to 5 built from the pool's sizes, accepts only declared ranks."""
    import itertools

    from taso.generator.opset import build_variants
    from taso.generator.pool import InputPool

    settings = Settings(max_ops=3)
    pool = InputPool(settings.classes)
    sizes = sorted({d for t in pool.types for d in t.shape} | {1, 2})[:4]
    shapes = [()] + [tuple(s) for r in range(1, 6) for s in itertools.product(sizes, repeat=r)][:400]
    shapes += [t.shape for t in pool.types]
    checked = 0
    for v in build_variants(settings.ops, pool):
        if v.ranks is None or v.splits:
            continue
        for position, allowed in enumerate(v.ranks):
            if allowed is None:
                continue
            others = [sorted({t.shape for t in pool.types}) for _ in range(v.arity)]
            for wrong in (s for s in shapes if len(s) not in allowed):
                for rest in itertools.islice(itertools.product(*others), 50):
                    args = list(rest)
                    args[position] = wrong
                    assert v.policy(tuple(args), ()) is None, (v.label, position, args)
                    checked += 1
    assert checked > 1000


def test_enumerating_only_the_possible_shapes_visits_the_same_graphs():
    """bench_enumerate.py measures the prefilter; this is its exactness, on a root of each kind at depth 2."""
    keys = {}
    for prefilter in (True, False):
        enumerator = enumeration.Enumerator(Settings(max_ops=2), prefilter_shapes=prefilter)
        visited = []
        for root in enumerator.roots()[::40]:
            enumerator.walk(root, lambda key, ops, last, outputs: visited.append((key, tuple(ops), last)))
        keys[prefilter] = visited
    assert keys[True] == keys[False] and len(keys[True]) > 500
