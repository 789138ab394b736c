"""``python -m podnet.cni``: the plugin, as the runtime would run it."""

import sys

from podnet.cni.plugin import main

sys.exit(main())
