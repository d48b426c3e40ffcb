"""``python -m daydream`` is the ``daydream`` command."""
from .cli import main

main()
