"""What deploy sends the host's release code, for its unit tests: the upload, and a file's digest."""

from __future__ import annotations

import hashlib
import io
import tarfile

from remote.host import release


def upload(files: dict[str, bytes], whole: bool = True) -> io.BytesIO:
    """The upload deploy sends; `whole`: with its end (one cut short by the laptop has none)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w|") as tar:
        for name, data in {**files, **({release.UPLOAD_END: b""} if whole else {})}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
