"""``detaug.plugin.tf`` (DALI's ``nvidia.dali.plugin.tf``): importable; DALI's ``DALIDataset``
(a tf.data.Dataset fed by a pipeline) is not in detaug and raises one line naming it: detaug's
TensorFlow / Keras route is ``detaug.adapters.keras`` (DetaugSequence), see docs/dali.md."""


def __getattr__(name):
    if name.startswith("_"):
        raise AttributeError(name)
    raise AttributeError(f"detaug.plugin.tf.{name}: DALI's TensorFlow plugin ({name}) is not in "
                         "detaug; use detaug.adapters.keras.DetaugSequence (docs/dali.md"
                         "#not-in-detaug)")
