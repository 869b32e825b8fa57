"""`python -m lmplatform.cli`: the `lmp` command line, for environments where the script is not on PATH."""
from lmplatform.cli import main

main()
