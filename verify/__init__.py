"""verify: the smoke gate to run after every deploy of sm12x (`python -m verify`)."""
