"""ONNX's backend node-test models, every opset: each one ONNX Runtime runs goes through `taso optimize` and must come
out written (optimized or unchanged) and equal to its reference outputs.

For each of the node test cases the installed onnx ships (``onnx.backend.test.case.node``: one operator, or a function's
expansion, at the opset its case names, 1 to 28 today) with its reference inputs and outputs:

1. ONNX Runtime runs the case's model on its inputs; a case it cannot run, or whose outputs it gets wrong, is outside the
   bar and counted as ``ort-cannot``.
2. ``taso optimize CASE.onnx -o OUT.onnx --cost analytic`` runs in this process (``taso.cli.main``); an exception that
   escapes it is a ``traceback``, exit 2 a ``refused`` (its one line kept), exit 3 a ``mismatch``.
3. ONNX Runtime runs OUT.onnx on the same inputs; it must match the reference outputs (``written``) or the case is
   ``wrong``.
4. The import-export round trip (of a model taso can import: one it calls Unsupported is written unchanged above), without the search's "nothing paid, copy the input" shortcut: ``taso.load_onnx``
   then ``taso.onnx.to_onnx_model``, run on ONNX Runtime against the references (``roundtrip-wrong`` when it differs;
   a TasoError there is ``roundtrip-refused``).

Prints a line per outcome with counts and the first few cases of each, and the refusal rate over the cases ONNX Runtime
runs (the bar: 0 tracebacks, 0 wrong, refusals at most 2%). ``--json FILE`` keeps every case's outcome.

Run: python benchmarks/end_to_end/bench_node_conformance.py [--jobs 2] [--only SUBSTRING] [--json FILE]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import json
import multiprocessing
import os
import signal
import sys
import tempfile
import traceback
import warnings

import numpy as np
import onnx

_TOLERANCE = (1e-3, 1e-4)  # rtol, atol: the cases' own are tighter, but taso's check is this one's order


def _cases(only: str | None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from onnx.backend.test.case.node import collect_testcases

        cases = collect_testcases(None)
    return [c for c in cases if only is None or only in c.name]


def _arrays(values) -> list:
    out = []
    for value in values:
        if isinstance(value, onnx.TensorProto):
            value = onnx.numpy_helper.to_array(value)
        out.append(value)
    return out


def _ort_outputs(model_bytes: bytes, model: onnx.ModelProto, inputs: list) -> list:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 4
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])
    names = [i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
    feeds = dict(zip(names, inputs))
    return session.run(None, feeds)


def _equal(got: list, want: list) -> bool:
    if len(got) != len(want):
        return False
    for g, w in zip(got, want):
        if isinstance(w, list) or isinstance(g, list):  # a sequence output
            if not isinstance(g, list) or not isinstance(w, list) or not _equal(g, w):
                return False
            continue
        if w is None or g is None:
            if g is not w:
                return False
            continue
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape:
            return False
        if w.dtype.kind in "fc":
            if not np.allclose(g.astype(np.float64), w.astype(np.float64), rtol=_TOLERANCE[0], atol=_TOLERANCE[1], equal_nan=True):
                return False
        elif w.dtype.kind in "OSU":
            if not np.array_equal(g.astype(str), w.astype(str)):
                return False
        elif not np.array_equal(g.astype(w.dtype), w):
            return False
    return True


def _run_case(case) -> dict:
    from taso.cli import main
    from taso.errors import TasoError, Unsupported
    from taso.onnx import load_onnx, to_onnx_model

    name, model = case.name, case.model
    version = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    row = {"case": name, "opset": version, "domains": sorted({o.domain for o in model.opset_import if o.domain not in ("", "ai.onnx")})}
    if not case.data_sets:
        return {**row, "outcome": "no-data"}
    data_sets = [(_arrays(i), _arrays(o)) for i, o in case.data_sets]
    model_bytes = model.SerializeToString()
    try:
        for inputs, expected in data_sets:
            if not _equal(_ort_outputs(model_bytes, model, inputs), expected):
                return {**row, "outcome": "ort-cannot", "why": "ONNX Runtime's outputs differ from the references"}
    except Exception as e:  # noqa: BLE001 - whatever ONNX Runtime raises
        return {**row, "outcome": "ort-cannot", "why": str(e).splitlines()[0][:160] if str(e) else type(e).__name__}
    with tempfile.TemporaryDirectory() as tmp:
        source, target = os.path.join(tmp, "case.onnx"), os.path.join(tmp, "out.onnx")
        with open(source, "wb") as f:
            f.write(model_bytes)
        stderr = io.StringIO()
        try:
            with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
                code = main(["optimize", source, "-o", target, "--cost", "analytic", "--quiet", "--budget", "20"])
        except _Hang:
            raise
        except BaseException:  # noqa: BLE001 - a traceback is what this counts
            return {**row, "outcome": "traceback", "why": traceback.format_exc().strip().splitlines()[-1][:200]}
        said = [line for line in stderr.getvalue().splitlines() if line.startswith("taso: error")]
        row["notes"] = [line for line in stderr.getvalue().splitlines() if line.startswith("taso: note: written unchanged")]
        if code == 2:
            return {**row, "outcome": "refused", "why": said[0] if said else f"exit {code}"}
        if code == 3:
            return {**row, "outcome": "mismatch", "why": said[0] if said else f"exit {code}"}
        if code != 0:
            return {**row, "outcome": "traceback", "why": f"exit {code}: {said}"}
        written = open(target, "rb").read()
        written_model = onnx.load_from_string(written)
        row["unchanged"] = written == model_bytes
        try:
            for inputs, expected in data_sets:
                if not _equal(_ort_outputs(written, written_model, inputs), expected):
                    return {**row, "outcome": "wrong", "why": "the written file's outputs differ from the references"}
        except Exception as e:  # noqa: BLE001
            return {**row, "outcome": "wrong", "why": f"ONNX Runtime cannot run the written file: {str(e).splitlines()[0][:160]}"}
    try:
        exported = to_onnx_model(load_onnx(model))
    except Unsupported as e:
        return {**row, "outcome": "written", "roundtrip": f"unsupported: {str(e)[:200]}"}
    except TasoError as e:
        try:
            onnx.checker.check_model(model, full_check=True)
        except Exception:  # noqa: BLE001 - the case's own model fails the checker that taso's export runs
            return {**row, "outcome": "written", "roundtrip": f"the original fails onnx.checker too: {str(e)[:160]}"}
        return {**row, "outcome": "roundtrip-refused", "why": str(e)[:200]}
    except Exception:  # noqa: BLE001
        return {**row, "outcome": "roundtrip-traceback", "why": traceback.format_exc().strip().splitlines()[-1][:200]}
    try:
        for inputs, expected in data_sets:
            if not _equal(_ort_outputs(exported.SerializeToString(), exported, inputs), expected):
                return {**row, "outcome": "roundtrip-wrong", "why": "the re-exported graph's outputs differ from the references"}
    except Exception as e:  # noqa: BLE001
        return {**row, "outcome": "roundtrip-wrong", "why": f"ONNX Runtime cannot run the re-exported graph: {str(e).splitlines()[0][:160]}"}
    return {**row, "outcome": "written"}


_CASE_SECONDS = 120  # a case still running after this is a hang


class _Hang(BaseException):
    pass


def _alarm(signum, frame):
    raise _Hang()


def _guarded(case) -> dict:
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(_CASE_SECONDS)
    try:
        return _run_case(case)
    except _Hang:
        return {"case": case.name, "outcome": "hang", "why": f"still running after {_CASE_SECONDS} s"}
    except BaseException:  # noqa: BLE001 - the harness itself must not stop
        return {"case": case.name, "outcome": "traceback", "why": "harness: " + traceback.format_exc().strip().splitlines()[-1][:200]}
    finally:
        signal.alarm(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", help="only the cases whose name contains this")
    parser.add_argument("--json", help="write every case's outcome here")
    parser.add_argument("--show", type=int, default=6, help="cases listed per outcome")
    args = parser.parse_args()
    cases = _cases(args.only)
    os.environ.setdefault("TASO_SPOT_CHECKS", "0")
    warnings.simplefilter("ignore")
    import onnxruntime

    onnxruntime.set_default_logger_severity(4)  # the cases ONNX Runtime refuses are counted, not logged
    if args.jobs > 1:
        with multiprocessing.get_context("fork").Pool(args.jobs, maxtasksperchild=50) as pool:
            rows = pool.map(_guarded, cases, chunksize=4)
    else:
        rows = [_guarded(c) for c in cases]
    by_outcome = collections.defaultdict(list)
    for row in rows:
        by_outcome[row["outcome"]].append(row)
    runnable = len(rows) - len(by_outcome["ort-cannot"]) - len(by_outcome["no-data"])
    print(f"{len(rows)} node test cases (onnx {onnx.__version__}); ONNX Runtime runs {runnable} of them with their reference outputs")
    for outcome in ("written", "refused", "mismatch", "wrong", "traceback", "hang", "roundtrip-refused", "roundtrip-wrong", "roundtrip-traceback", "ort-cannot", "no-data"):
        rows_of = by_outcome.get(outcome, [])
        if not rows_of:
            continue
        print(f"{outcome:>20}: {len(rows_of)}")
        for row in rows_of[: args.show] if outcome != "written" else ():
            print(f"{'':>22}{row['case']} (opset {row.get('opset')}): {row.get('why', '')}")
    passed = [row for row in rows if row.get("notes")]
    if passed:
        reasons = collections.Counter(row["notes"][0].split(":")[3].strip().split(" (")[0][:90] for row in passed)
        print(f"written unchanged with a note: {len(passed)}")
        for reason, count in reasons.most_common(args.show):
            print(f"{count:>22}  {reason}")
    refused = len(by_outcome["refused"]) + len(by_outcome["mismatch"])
    print(f"refusals {refused}/{runnable} = {100 * refused / max(runnable, 1):.1f}% (bar 2%); tracebacks {len(by_outcome['traceback'])}; "
          f"hangs {len(by_outcome['hang'])}; wrong {len(by_outcome['wrong'])}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
