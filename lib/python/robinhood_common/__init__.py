"""RobinHood's shared Python pieces, used by the controller and the testbed alike.

- :mod:`robinhood_common.units`: Go-style durations, byte sizes, and the canonical way
  values are written in error messages (the same as the Go reader's).
- :mod:`robinhood_common.split`: the largest-remainder rule and the even split.
- :mod:`robinhood_common.contract`: the reader of the configuration contract
  (``schema/*.schema.yaml``): structure, defaults and CEL rules, with the same errors as
  the Go reader (``lib/config``).
- :mod:`robinhood_common.topology`, :mod:`robinhood_common.experiment`: the typed
  topology and experiment models on top of it.
"""
