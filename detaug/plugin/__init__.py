"""DALI's ``nvidia.dali.plugin`` layout: ``detaug.plugin.pytorch`` holds DALI's PyTorch iterators.
Framework plugins import their framework lazily (``import detaug.plugin`` imports nothing)."""
