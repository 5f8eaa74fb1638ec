"""`python -m remote.run_inference --max-samples 7000`: the name users know, same as `python -m remote run`."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main(["run", *sys.argv[1:]]))
