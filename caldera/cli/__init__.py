"""The ``caldera`` command line, one module per command (``caldera COMMAND --help`` for each; the top-level
help lists them with an example each). :func:`main` is the console script's entry point."""

from caldera.cli.app import build_parser, main

__all__ = ["build_parser", "main"]
