"""RobinHood cache controller."""
