"""``detaug.tfrecord`` (DALI's ``nvidia.dali.tfrecord``): DALI's feature descriptions, so that a
program that builds ``features={...}`` imports and runs up to the reader. detaug's
``fn.readers.tfrecord`` reads the TF Object Detection layout (docs/formats.md) and refuses DALI's
``features=`` argument with one line; these classes describe what DALI would parse."""
from __future__ import annotations

from dataclasses import dataclass

int64, float32, string = "int64", "float32", "string"


@dataclass(frozen=True)
class FixedLenFeature:
    """A feature of a fixed shape (DALI's ``tfrecord.FixedLenFeature(shape, dtype, default)``)."""
    shape: list
    dtype: str
    default_value: object = None


@dataclass(frozen=True)
class VarLenFeature:
    """A feature of any length (DALI's ``tfrecord.VarLenFeature(dtype, default)``)."""
    dtype: str
    default_value: object = None


FixedLenSequenceFeature = FixedLenFeature
