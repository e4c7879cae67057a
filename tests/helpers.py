"""Small shared helpers for the tests: ONNX text models, ORT runs, random feeds."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import onnxruntime as ort

ort.set_default_logger_severity(3)


def model_from_text(text: str) -> onnx.ModelProto:
    """An ONNX model from ONNX's textual syntax (onnx.parser), checked."""
    model = onnx.parser.parse_model(text)
    onnx.checker.check_model(model)
    return model


def run_ort(model: onnx.ModelProto | str, feeds: dict[str, np.ndarray], optimize: bool = False) -> list[np.ndarray]:
    """The model's outputs on ONNX Runtime (a model file, external data and all, or a model)."""
    options = ort.SessionOptions()
    options.log_severity_level = 3
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model if isinstance(model, str) else model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    return session.run(None, {k: v for k, v in feeds.items() if k in names})


def random_feeds(graph, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, t in graph.inputs.items():
        if t.dtype.startswith("float"):
            feeds[name] = rng.standard_normal(t.shape).astype(t.dtype)
        elif t.dtype == "bool":
            feeds[name] = rng.integers(0, 2, t.shape).astype(bool)
        else:
            feeds[name] = rng.integers(0, 3, t.shape).astype(t.dtype)
    return feeds


def assert_close(got, want, rtol: float = 1e-4, what: str = "") -> None:
    """Relative closeness scaled by the reference's magnitude (robust to values near zero)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    if want.dtype.kind not in "fc":
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    scale = max(float(np.max(np.abs(want))) if want.size else 0.0, 1e-6)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * scale, err_msg=what)


def fake_timer(series, by_label: bool = False):
    """A stand-in for taso.measure.timing.InterleavedTimer whose series give what ``series(models)`` returns for the models
    timed (the input first), or ``series(labels)`` with ``by_label``; it may raise TimingError as a real session would."""

    class FakeTimer:
        def __init__(self, models, feeds, threads=1, labels=None, **options):
            self.models, self.labels = list(models), list(labels or [f"model {i}" for i in range(len(models))])
            self.sessions = self.models  # what an output check runs on: here the models themselves

        def replace(self, position, model, label=None):
            self.models[position] = model
            if label is not None:
                self.labels[position] = label

        def close(self, position):
            self.models[position] = None

        def times(self, rounds=7, decided=None, positions=None):
            chosen = range(len(self.models)) if positions is None else positions
            return series([(self.labels if by_label else self.models)[k] for k in chosen])

    return FakeTimer


def library_rewrites(graph, target: str | None = None):
    """(rule, plan, child) for every place a rule of the shipped library (with ``target``'s rules too, as
    :func:`taso.pipeline.library.for_target` adds them) rewrites ``graph`` into a graph it can build: what the tests
    that hold a rewrite's price from its parent to the built child's own walk over."""
    from taso.pipeline.library import for_target, load_rules
    from taso.search.rewrite import CompiledRule, plans

    present = {n.op.name for n in graph.nodes}
    for rule in (load_rules() if target is None else for_target(load_rules(), target)):
        if not {rn.op for rn in rule.source if rn.inputs or rn.op != "fill"} <= present:  # a source's fill is a constant
            continue
        for plan in plans(graph, CompiledRule(rule)):
            child = plan.materialize()
            if child is not None:
                yield rule, plan, child


def patch_room(monkeypatch, room: str, name: str, value) -> None:
    """Replaces ``name`` in every module of the package ``room`` (``"taso.pipeline"``, ``"taso.cost"``) that looks it up: a
    test's stand-in for a timer, an export or a threshold, wherever the room's parts call it."""
    import importlib
    import pkgutil

    package = importlib.import_module(room)
    modules = [package] + [importlib.import_module(f"{room}.{info.name}") for info in pkgutil.iter_modules(package.__path__)]
    patched = [m for m in modules if hasattr(m, name)]
    assert patched, f"no module of {room} has {name!r}"
    for module in patched:
        monkeypatch.setattr(module, name, value)


def patch_pipeline(monkeypatch, name: str, value) -> None:
    """:func:`patch_room` for the pipeline (:mod:`taso.pipeline`)."""
    patch_room(monkeypatch, "taso.pipeline", name, value)
