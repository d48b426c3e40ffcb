"""Directory put first on PYTHONPATH by ``daydream trace``; holds its ``sitecustomize``."""
