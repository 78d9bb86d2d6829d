"""Write issued certificates to a directory as ca.crt, tls.crt and tls.key (file I/O)."""

from __future__ import annotations

import os
from pathlib import Path

from certs.issue import Issued


def write_bundle(out_dir: Path, ca: Issued, serving: Issued) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"ca.crt": out_dir / "ca.crt", "tls.crt": out_dir / "tls.crt", "tls.key": out_dir / "tls.key"}
    paths["ca.crt"].write_bytes(ca.certificate_pem)
    paths["tls.crt"].write_bytes(serving.certificate_pem)
    # Create the key 0600 from the start rather than chmod after: never world-readable, even briefly.
    key_tmp = out_dir / ".tls.key.tmp"
    descriptor = os.open(key_tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(serving.key_pem)
    os.replace(key_tmp, paths["tls.key"])
    return paths
