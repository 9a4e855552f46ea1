"""CDCv2 change files: update and progress statements, their writer and an ordering reader.

See :mod:`updatestream.cdcv2.format` for the statements and the directory layout,
:mod:`updatestream.cdcv2.writer` for when progress is written, and
:mod:`updatestream.cdcv2.reader` for reading the files back in any order.
"""

from updatestream.cdcv2.format import CDCv2FormatError, Progress, Statement, Update
from updatestream.cdcv2.reader import (
    Collection,
    Completed,
    OrderedReader,
    ordered,
    read_directory,
    read_paths,
)
from updatestream.cdcv2.writer import BatchReport, CDCv2WriteError, Change, StreamWriter

__all__ = [
    "BatchReport",
    "CDCv2FormatError",
    "CDCv2WriteError",
    "Change",
    "Collection",
    "Completed",
    "OrderedReader",
    "Progress",
    "Statement",
    "StreamWriter",
    "Update",
    "ordered",
    "read_directory",
    "read_paths",
]
