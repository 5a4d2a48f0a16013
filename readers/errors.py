"""The one exception type that every reader and writer raises for bad input."""
from __future__ import annotations


class DatasetError(ValueError):
    """Bad dataset input: malformed file, missing image, invalid box, unknown class, unsafe path.

    The message always names the offending file and the fault, as ``"<file>: <fault>"``.

    Attributes:
        file: the file the fault was found in (annotation file or image path).
        reason: the fault, without the file name.
    """

    def __init__(self, file, reason: str):
        self.file = str(file)
        self.reason = reason
        super().__init__(f"{self.file}: {reason}")
