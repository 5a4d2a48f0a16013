"""Pipeline.deserialize of a document nested past Python's stack is a GraphFormatError, not a
RecursionError."""
import pytest

import detaug
from detaug.runtime.persist import GraphFormatError


def test_deeply_nested_document_is_refused_by_name():
    doc = b'{"format": "detaug-pipeline-2", "params": {"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}"
    with pytest.raises(GraphFormatError, match="nested deeper"):
        detaug.Pipeline.deserialize(doc)

