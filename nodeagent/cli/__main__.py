"""`python -m nodeagent.cli`, as the `nodeagent` console script."""

import sys

from nodeagent.cli import main

sys.exit(main())
