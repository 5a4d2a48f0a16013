"""DALI's ``nvidia.dali.plugin`` layout (frontends): imports its framework lazily."""
