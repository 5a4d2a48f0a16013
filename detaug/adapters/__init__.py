"""Framework adapters: ``detaug.adapters.torch`` (iterator of torch tensors) and
``detaug.adapters.keras`` (Sequence). Each imports its framework lazily, on first use, so that
``import detaug`` never imports torch or keras."""
