"""Moved to kafkastore.maintenance.merge (merging) and kafkastore.maintenance.housekeeper
(Housekeeper, housekeeper_for); this old import path stays for one release."""
from .maintenance.housekeeper import *  # noqa: F401,F403
from .maintenance.merge import *  # noqa: F401,F403
