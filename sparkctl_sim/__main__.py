"""``python3 -m sparkctl_sim serve <argv>``: the same as ``sparkctl-sim-rank``."""

import sys

from sparkctl_sim.rank import main

sys.exit(main())
