"""Safe file placement: the export directory is checked, written beside
itself and renamed into place, and only ever replaces a previous export."""

import os
import shutil
import tempfile
from pathlib import Path

from keras_attention.export.layout import REPORT_FILE


def _check_target(directory, overwrite):
    if directory.is_file():
        raise FileExistsError(f"`directory` {str(directory)!r} is a file; expected a new or existing export directory.")
    for ancestor in directory.parents:
        if ancestor.exists():
            if not ancestor.is_dir():
                raise NotADirectoryError(
                    f"`directory` {str(directory)!r} is under {str(ancestor)!r}, which is a file; expected a path under a directory."
                )
            break
    if directory.is_dir() and any(directory.iterdir()):
        if not overwrite:
            raise FileExistsError(
                f"`directory` {str(directory)!r} already exists and is not empty; pass overwrite=True (--force) to replace it."
            )
        if not (directory / REPORT_FILE).is_file():
            # Replacing deletes the old directory: only ever delete a previous export.
            raise FileExistsError(
                f"`directory` {str(directory)!r} is not an export directory (no {REPORT_FILE}); "
                "refusing to replace it even with overwrite=True. Remove it yourself or choose another path."
            )


def _put_in_place(staging, directory, overwrite):
    """Replace `directory` by `staging` with renames, so readers see the old or the new export."""
    _check_target(directory, overwrite)  # again: something may have appeared there meanwhile
    old = None
    if directory.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{directory.name}.old-", dir=directory.parent))
        os.rmdir(old)
        os.rename(directory, old)
    try:
        os.rename(staging, directory)
    except OSError:
        if old is not None:
            os.rename(old, directory)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _remove_created(created):
    """Remove the parent directories an export created, deepest first."""
    for parent in created:
        try:
            parent.rmdir()
        except OSError:
            break
