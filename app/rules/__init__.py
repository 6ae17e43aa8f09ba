"""Rules deployment around the domain's rules (``commands.rules``): the signed control record, the catalog of deployed
versions, and the deploy itself. May import ``commands``, ``schemas`` and the wiring at the top of ``app``."""
