"""Zoo on Ray: the ``ray`` launcher (every worker a Ray actor process on a Ray cluster) and the
``ray`` resolver (Ray's key-value store); optional extra ``zoo-rl[ray]``."""
