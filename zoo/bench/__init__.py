"""``zoo bench``: Zoo's throughput next to this machine's limits, in one sitting.

- :mod:`.workloads`: the named workloads (data: env, algorithm, the config at the workload,
  the peers' shape);
- :mod:`.measure`: the measurements (raw env stepping on all cores, one forward pass of the
  policy, a Zoo run measured over a window, worker CPU from ``/proc``);
- :mod:`.report`: the arithmetic on the measurements (rates, ratios, CPU shares, the
  bottleneck in words) and the printed table; pure functions, unit-tested by hand.
"""
