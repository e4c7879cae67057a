"""`taso import-taso graph_subst.pb -o CANDIDATES`: TASO's published substitutions as candidate rules (:mod:`taso.verifier.taso_import`)."""

from __future__ import annotations

import argparse

from .main import add_input_shape_option, parse_input_shapes

__all__ = ["add_parser", "run"]


def add_parser(sub) -> None:
    taso_import = sub.add_parser("import-taso", help="import TASO's published substitutions (graph_subst.pb) as candidate rules")
    taso_import.add_argument("file", help="TASO's rule collection (protobuf RuleCollection), e.g. graph_subst.pb")
    taso_import.add_argument("-o", "--output", required=True, help="the rule file to write (candidates: prove them with taso verify)")
    taso_import.add_argument("--generic-shapes", action="store_true",
                             help="example shapes where every dimension the types leave free has its own size (not TASO's pool)")
    add_input_shape_option(taso_import)
    taso_import.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from taso.verifier.taso_import import run_import

    result = run_import(args.file, args.output, parse_input_shapes(args.input_shape), args.generic_shapes)
    print(result.summary())
    print(f"wrote {len(result.library)} candidate rules to {args.output} (prove them with: taso verify {args.output} -o LIBRARY.json)")
    return 0
