"""``python -m pgmem.cli``: the ``pgmem`` command."""

from . import main

main()
