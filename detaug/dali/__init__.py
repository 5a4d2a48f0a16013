"""Everything that exists for DALI compatibility: DALI's Pipeline arguments and graph export
(``pipeline_api``), DALI's ops on plain tensors and its older op names (``ops``), and its PyTorch
plugin (``plugin/pytorch``, a frontend). ``detaug.types`` and ``detaug.plugin.pytorch`` are the
public paths DALI programs import."""
