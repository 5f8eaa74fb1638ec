import sys

from .program import main

# `python -m deploytool`: help and errors name the command, not __main__.py
sys.argv[0] = "deploytool"
main()
