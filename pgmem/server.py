"""The old name of :mod:`pgmem.embedded` (the embedded PostgreSQL server), kept so that ``from pgmem import
server`` and ``pgmem.server.bin_dir()``, documented before, still work: this module *is* ``pgmem.embedded``
(the same module object, so a setting changed through either name is changed for both). New code imports
``pgmem.embedded``."""

import sys

from . import embedded

sys.modules[__name__] = embedded
