"""RobinHood testbed: start a topology as local processes, replay a trace under a scenario, compare policies."""
