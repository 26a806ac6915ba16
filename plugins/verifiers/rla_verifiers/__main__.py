"""``python -m rla_verifiers presync [FOLDER]``: the harness's packages pre-synced for offline runs."""

import sys

from rla_verifiers import main

main(sys.argv[1:])
