"""``python3 -m sparkctl.sim serve <argv>``: the same as ``sparkctl-sim-rank``."""

import sys

from sparkctl.sim.rank import main

sys.exit(main())
