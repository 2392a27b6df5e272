"""``python -m codegym.cli``: the ``codegym`` command."""

from codegym.cli.app import main

main()
