"""Hide-and-seek (Baker et al. 2019) rebuilt on the ``mujoco`` bindings; see docs/hide-and-seek.md."""
