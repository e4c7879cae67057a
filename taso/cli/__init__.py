"""The command line: ``taso COMMAND``, one module of this room per sub-command (:data:`COMMANDS`), each with an
``add_parser`` and a ``run``; the parser, the exit codes and the one-line errors are :mod:`.main`'s."""

from .main import (
                   COMMANDS,
                   EXIT_BROKEN_PIPE,
                   EXIT_INTERRUPTED,
                   EXIT_MISMATCH,
                   EXIT_USAGE,
                   add_input_shape_option,
                   build_parser,
                   main,
                   parse_input_shapes,
)

__all__ = ["main", "build_parser", "parse_input_shapes", "add_input_shape_option", "COMMANDS", "EXIT_USAGE", "EXIT_MISMATCH",
           "EXIT_BROKEN_PIPE", "EXIT_INTERRUPTED"]
